"""Issue 50, part A, class 4: a failed write of the records, the journal or the snapshot stops the
run with a true message, and a run never exits 0 over a cut file. Real parts: a real file-size
limit (RLIMIT_FSIZE, as `ulimit -f`), a real deleted folder, /dev/full, kvtui's own processes."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reliability_helpers import headless, knee_path, runs, wait_until  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def _limited_fast_run(tmp_path: Path, limit_bytes: int, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "o.json"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "KVTUI_RESCUE_DIR": str(tmp_path / "rescued")}
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", "sim-demo", "--fast", "--headless", "--out", str(out), *extra],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180, preexec_fn=limit)
    return r, out


def _whole_lines(p: Path) -> bool:
    data = p.read_bytes()
    if not data:
        return True
    if not data.endswith(b"\n"):
        return False
    return all(isinstance(json.loads(ln), dict) for ln in data.splitlines())


def test_a_file_size_limit_cuts_no_records_line_and_never_exits_0(tmp_path):
    """`ulimit -f` under a run: the records file was cut mid-line and the run exited 0 saying
    "snapshot and its records". Now the records stop at a whole line, the run stops on the
    failure, says so, and exits 1; the snapshot (under the limit) names the failure."""
    # many records a step (window_requests): the records file reaches the limit before the snapshot would
    r, out = _limited_fast_run(tmp_path, 300_000, "--set", "ramp.window_requests=300")
    text = r.stdout + r.stderr
    assert r.returncode == 1, text
    assert "Traceback" not in text
    assert "File too large" in text and "snapshot and its records" not in text
    assert "the run FAILED: cannot append records to" in r.stderr
    records = out.with_name("o.records.jsonl")
    assert _whole_lines(records)
    doc = json.loads(out.read_text())
    assert doc["run"]["output_failure"].startswith("cannot append records to")
    assert doc["run"]["outcome"] == "stopped" and not doc["run"]["finished"]


def test_a_file_size_limit_below_the_snapshot_says_where_the_steps_are(tmp_path):
    """Under a limit the snapshot cannot fit either (nor in any safe place): one true message, the
    journal named as what holds the finished steps, exit 1, no OSError traceback."""
    r, out = _limited_fast_run(tmp_path, 30_000)
    text = r.stdout + r.stderr
    assert r.returncode == 1, text
    assert "Traceback" not in text and "OSError" not in text
    assert f"cannot write the snapshot {out}: File too large" in r.stderr
    assert "nor to a safe place" in r.stderr and f"finished steps are in {out}.journal" in r.stderr
    assert not out.exists()
    assert _whole_lines(out.with_name("o.records.jsonl"))


def test_a_deleted_out_folder_stops_the_run_and_the_snapshot_is_rescued(tmp_path, knee_path, runs):  # noqa: F811
    """The --out folder deleted mid-run: the run once printed "cannot append records" at every step,
    ran both modes to the end, lost everything and pointed at a journal in the deleted folder. Now
    it stops at the first failed write and writes its snapshot to a named safe place."""
    out = tmp_path / "outdir" / "run.json"
    out.parent.mkdir()
    h = headless(tmp_path, knee_path, out=out)
    runs.append(h)
    wait_until(lambda: h.proc.poll() is not None or "[first] c=" in h.stdout(), 120, "a first step", h.proc)
    shutil.rmtree(out.parent)
    t0 = time.monotonic()
    rc = h.wait(120)
    took = time.monotonic() - t0
    text = h.stdout() + h.stderr()
    assert rc == 1, text
    assert "Traceback" not in text
    assert text.count("cannot append records to") == 1, text  # said once, true, and the run stopped on it
    rescued = tmp_path / "rescued" / "run.json"
    assert f"the snapshot was written to {rescued} instead" in h.stderr(), text
    assert "is incomplete or gone" in h.stderr()  # the journal was in the deleted folder: not pointed at as kept
    doc = json.loads(rescued.read_text())
    assert doc["run"]["output_failure"].startswith(f"cannot append records to {out.with_name('run.records.jsonl')}")
    assert "second" in doc["run"]["modes_not_run"], doc["run"]  # stopped: the next mode not run for nothing
    assert took < 60, f"{took:.0f} s"  # bounded work, not an SLO: it stops on the failed write, not runs on
    assert h.leftovers() == []


def test_a_journal_write_that_fails_stops_the_run_without_a_traceback(tmp_path):
    """A journal write hitting an error (EFBIG once gave a raw OSError traceback): here the journal's
    file is swapped for /dev/full (ENOSPC on write) as the mode starts; the run stops on it, its
    snapshot written and naming the failure."""
    from kvtui.explore import events as ev
    from kvtui.explore.run import Run
    from kvtui.io.scenario import load_scenario
    from kvtui.io.scenario.defaults import demo_scenario_path

    holder: dict = {}

    def listener(e):
        if isinstance(e, ev.EngineReady) and "r" in holder and not holder.get("done"):
            holder["done"] = True
            w = holder["r"].writer
            w._journal_f.close()
            w._journal_f = open("/dev/full", "w")

    r = Run(load_scenario(str(demo_scenario_path()), []), tmp_path / "j.json", listener=listener, fast=True,
            publish=False)
    holder["r"] = r
    doc = r.run()  # no OSError out of it
    assert doc["run"]["output_failure"].startswith("cannot write the journal")
    assert "No space left on device" in doc["run"]["output_failure"]
    assert doc["run"]["stop_reason"].startswith("journal unwritable")
    assert doc["modes"][0]["complete"] is False
    assert (tmp_path / "j.json").exists()
