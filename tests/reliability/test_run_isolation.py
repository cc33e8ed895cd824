"""Runs never share files, and commands never write over their own inputs (issue 18).

A second run on the same --out once appended to the first's records (165 → 330 lines, two
salts, a snapshot saying 165), and two at once shared one journal. Now a run claims its --out:
an flock on its journal while it runs, an earlier run's files refused (one line, exit 2,
nothing started, the first run's files byte for byte as they were), a directory refused up
front. `diff … --out A`, `export --out X.records.jsonl`: refused, whatever the spelling.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtui.cli.entry import main
from kvtui.io.records import read_records
from kvtui.io.snapshot.file import load_snapshot

from reliability_helpers import headless, tagged, wait_until


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.parent.iterdir() if p.name.startswith(out.stem) and p.is_file()}


def _one_line_refusal(h, rc, words):
    err = h.stderr().strip()
    assert rc == 2 and len(err.splitlines()) == 1 and err.startswith("kvtui: ") and words in err, (rc, err, h.stdout()[-2000:])
    assert "Traceback" not in h.stdout() + err


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One short finished sim run, shared by the tests that only read it."""
    from reliability_helpers import KNEE

    d = tmp_path_factory.mktemp("first")
    sp = d / "rel.toml"
    sp.write_text(KNEE.replace('[[modes]]\nname = "second"\n', "").replace("max = 16", "max = 2"))
    h = headless(d, sp)
    assert h.wait() == 0, h.stdout()[-2000:]
    return sp, h.out


def test_a_second_run_on_the_same_out_is_refused_and_the_first_is_untouched(tmp_path, runs, finished_run):
    sp, out = finished_run
    before = _files(out)
    h = headless(tmp_path, sp, out=out)
    runs.append(h)
    _one_line_refusal(h, h.wait(), "an earlier run's files are there")
    assert _files(out) == before  # not one byte appended to its records, its snapshot as it was
    doc = load_snapshot(out)
    recs = list(read_records(out.with_name(out.stem + ".records.jsonl")))
    assert doc["run"]["records_written"] == len(recs) and {r.id.split("-")[0] for r in recs} == {doc["run"]["salt"]}
    assert h.leftovers() == []


def test_two_runs_at_once_on_one_out_cannot_mix(tmp_path, runs, knee_path):
    # One mode's whole search (~35 s): long enough for B and C to be refused while A runs.
    a = headless(tmp_path, knee_path, "--mode", "first")
    runs.append(a)
    wait_until(lambda: a.journal.exists() and a.journal.stat().st_size > 0, 60, "run A's journal", a.proc)
    # Plain, or resuming A's journal while A runs: A holds its lock, and says so.
    b = headless(tmp_path, knee_path, out=a.out)
    runs.append(b)
    _one_line_refusal(b, b.wait(), "another kvtui run is writing to it now")
    c = headless(tmp_path, knee_path, "--mode", "first", "--resume", str(a.journal), out=a.out)
    runs.append(c)
    _one_line_refusal(c, c.wait(), "another kvtui run is writing to it now")
    assert a.proc.poll() is None  # A was still running all along: the refusals were of a live run
    assert a.wait() == 0, a.stdout()[-2000:]
    doc = load_snapshot(a.out)
    recs = list(read_records(a.records))
    assert doc["run"]["finished"] and not a.journal.exists()
    assert len(recs) == doc["run"]["records_written"] and {r.id.split("-")[0] for r in recs} == {doc["run"]["salt"]}


def test_an_out_that_is_a_directory_fails_before_anything_starts(tmp_path, runs, knee_path):
    d = tmp_path / "results"
    d.mkdir()
    h = headless(tmp_path, knee_path, out=d)
    runs.append(h)
    _one_line_refusal(h, h.wait(), "is a directory")
    assert "starting the engine" not in h.stdout() and not any(tmp_path.glob("*.journal"))


# --------------------------------------------------------------------------- commands and their inputs

def _spellings(p: Path, tmp: Path) -> list[str]:
    link = tmp / f"link-{p.name}"
    if not link.exists():
        link.symlink_to(p)
    return [str(p), str(p.parent / "." / p.name), str(p.parent / ".." / p.parent.name / p.name), str(link)]


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(["export-csv", "export-md", "diff-a", "diff-b"]),
       target=st.sampled_from(["snapshot", "records", "journal"]), spelling=st.integers(0, 3))
def test_no_command_writes_over_its_inputs(finished_run, tmp_path_factory, capsys, command, target, spelling):
    _, out = finished_run
    tmp = tmp_path_factory.mktemp("spell")
    journal = out.with_name(out.name + ".journal")
    if target == "journal" and not journal.exists():
        journal.write_text(out.read_text()[:0])  # an empty journal beside it: still an input's name
    path = {"snapshot": out, "records": out.with_name(out.stem + ".records.jsonl"), "journal": journal}[target]
    before = _files(out)
    dest = _spellings(path, tmp)[spelling]
    if command.startswith("export"):
        argv = ["export", str(out), "--format", command.split("-")[1], "--out", dest]
    else:
        argv = ["diff", str(out), str(out), "--out", dest]
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    # A link to an input is refused as a link first (kvtui.safeio: outputs are regular files or new paths).
    why = "symbolic link" if spelling == 3 else "it would overwrite it"
    assert rc == 2 and len(err.splitlines()) == 1 and why in err, (argv, err)
    assert _files(out) == before
    if target == "journal" and journal.exists() and journal.stat().st_size == 0:
        os.unlink(journal)
