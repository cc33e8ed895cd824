"""Damaged journals and records are read around, never fatal (issue 18).

A journal cut inside a multi-byte character once stopped export, replay and --resume with a
UnicodeDecodeError; a line that is JSON but not an object gave tracebacks. Hypothesis damages
a real journal and a real records file (SnapshotWriter and write_records, with multi-byte
text in them): cuts at any byte, garbage lines, non-object JSON, wrong-typed events and
records, invalid UTF-8. Readers skip and count; a journal loses at most what was damaged;
only a journal without a header is refused, in one line. Then the same through the commands:
export of a damaged journal, replay's re-evaluation, and a --resume from one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtui.cli.entry import main
from kvtui.core.record import Record
from kvtui.errors import UsageError
from kvtui.io.records import Damaged, read_records, write_records
from kvtui.io.snapshot.file import SnapshotWriter, load_journal

from reliability_helpers import headless

MODE = "fp8-KV-é—☃"  # multi-byte characters, so that cuts land inside them


def _journal(tmp: Path) -> Path:
    w = SnapshotWriter(tmp / "j.json", {"schema": "kvtui.snapshot/1", "scenario": {"name": "ünïcode"}, "environment": {}, "run": {}})
    w.mode_started({"name": MODE, "steps": []})
    for i in range(4):
        w.step_finished(MODE, {"index": i, "load": 2.0 ** i, "passed": False, "note": "→ ✓ “fine”"})
    w.close()
    return w.journal


def _records(tmp: Path) -> Path:
    p = tmp / "r.records.jsonl"
    write_records(p, [Record(id=f"s-{i}", mode=MODE, step=0, load=1, phase="window", t_intended=0.0, t_sent=0.1,
                             t_first=0.2, t_last=0.5, itl=[0.1, 0.2], output_tokens=3, detail="… ✓") for i in range(6)])
    return p


GARBAGE = st.sampled_from([
    b"[1, 2]", b"5", b"null", b'"x"', b"\xff\xfe\xfd", b"{not json", b'{"event": "step", "data": 5}',
    b'{"event": "mode", "data": {"name": 5}}', b'{"event": "step", "data": {"mode": "' + MODE.encode() + b'", "step": [1]}}',
    b'{"id": 5, "mode": [], "step": "x", "load": 1, "phase": "window", "t_intended": 0, "t_sent": 0}',
    b'{"id": "a", "mode": "m", "step": 0, "load": 1, "phase": "window", "t_intended": 0, "t_sent": 0, "itl": "oops"}',
    b'{"event": "header"}', b"\x00\x00\x00", "é".encode()[:1], b"[" * 5000,
])
DAMAGE = st.lists(st.one_of(st.tuples(st.just("insert"), st.integers(0, 20), GARBAGE),
                            st.tuples(st.just("flip"), st.integers(0, 10_000), st.just(b""))), max_size=5)


def _damage(data: bytes, ops, cut: int | None) -> tuple[bytes, int]:
    lines = data.split(b"\n")
    inserted = 0
    for kind, at, what in ops:
        if kind == "insert":
            lines.insert(min(at, len(lines)), what)
            inserted += 1
        else:
            flat = b"\n".join(lines)
            if flat:
                i = at % len(flat)
                flat = flat[:i] + b"\xff" + flat[i + 1:]
            lines = flat.split(b"\n")
    out = b"\n".join(lines)
    if cut is not None:
        out = out[: cut % (len(out) + 1)]
    return out, inserted


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=DAMAGE, cut=st.one_of(st.none(), st.integers(0, 100_000)))
def test_a_damaged_journal_is_read_around(tmp_path_factory, ops, cut):
    tmp = tmp_path_factory.mktemp("j")
    j = _journal(tmp)
    raw, inserted = _damage(j.read_bytes(), ops, cut)
    j.write_bytes(raw)
    try:
        doc = load_journal(j)
    except UsageError as e:
        assert "journal has no header line" in str(e) and "\n" not in str(e)
        return
    steps = [s for m in doc["modes"] for s in m["steps"]]
    assert all(isinstance(s, dict) for s in steps)
    if inserted and cut is None and not any(k == "flip" for k, _, _ in ops):
        assert f"{inserted} damaged line(s) skipped" in doc["load_warnings"][-1] or not inserted
        assert len(steps) == 4  # nothing that was intact is lost


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=DAMAGE, cut=st.one_of(st.none(), st.integers(0, 100_000)))
def test_damaged_records_are_skipped_and_counted(tmp_path_factory, ops, cut):
    tmp = tmp_path_factory.mktemp("r")
    p = _records(tmp)
    raw, inserted = _damage(p.read_bytes(), ops, cut)
    p.write_bytes(raw)
    damaged = Damaged()
    recs = list(read_records(p, damaged))
    assert all(isinstance(r, Record) and isinstance(r.mode, str) and all(isinstance(x, (int, float)) for x in r.itl) for r in recs)
    if cut is None and not any(k == "flip" for k, _, _ in ops):
        assert len(recs) == 6 and damaged.count == sum(1 for k, _, w in ops if k == "insert" and w.strip())


def test_commands_read_a_journal_cut_inside_a_character(tmp_path, capsys):
    j = _journal(tmp_path)
    raw = j.read_bytes()
    cut = raw.rfind("☃".encode()) + 1  # inside the snowman's three bytes, on the last line
    j.write_bytes(raw[:cut] + b"\n[1, 2]\n\xff\xfe\n")
    rc = main(["export", str(j), "--format", "csv", "--out", "-"])
    cap = capsys.readouterr()
    assert rc == 0 and "Traceback" not in cap.err and MODE in cap.out


def test_replay_reevaluation_counts_damaged_records(tmp_path):
    from kvtui.io.scenario.schema import Slo
    from kvtui.tui.state import reevaluate_modes

    p = _records(tmp_path)
    with open(p, "ab") as f:
        f.write(b'[1]\n{"id": 3}\n' + "é".encode()[:1] + b"\n")
    step = {"index": 0, "load": 1, "t_window_start": 0.0, "t_window_end": 10.0}
    out, problems = reevaluate_modes([(MODE, [step], p)], Slo(latency={"tpot_p95_ms": 100.0}))
    assert out[MODE][0]["requests"] == 6
    assert any("3 damaged line(s) skipped" in x for x in problems), problems


def test_resume_from_a_damaged_journal(tmp_path, runs, knee_path):
    first = headless(tmp_path, knee_path, "--mode", "first", "--set", "ramp.max=4", out=tmp_path / "a.json")
    runs.append(first)
    assert first.wait() == 0
    # Make it an unfinished run's journal: the snapshot gone, the journal rebuilt and damaged.
    from kvtui.io.snapshot.file import load_snapshot

    doc = load_snapshot(first.out)
    j = first.out.with_name(first.out.name + ".journal")
    lines = [json.dumps({"event": "header", "t": 0, "data": {k: v for k, v in doc.items() if k != "modes"}})]
    for m in doc["modes"]:
        lines.append(json.dumps({"event": "mode_done", "t": 0, "data": m}, default=str))
    j.write_bytes(("\n".join(lines) + "\n").encode() + b"[1]\n\xe2\x98\n{\"event\": \"step\", \"data\": 3}\n")
    first.out.unlink()
    h = headless(tmp_path, knee_path, "--mode", "first", "--resume", str(j), out=tmp_path / "b.json")
    runs.append(h)
    rc = h.wait()
    out = h.stdout() + h.stderr()
    assert rc == 0 and "Traceback" not in out, out[-3000:]
    assert "mode first kept from the resumed snapshot" in out
