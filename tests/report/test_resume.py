"""Resuming a comparison: from a final snapshot with fewer modes, and from a journal after kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kvtui.load.records import read_records
from kvtui.report.snapshot import load_journal, load_snapshot


def test_resume_from_a_final_snapshot_with_fewer_modes(three_modes):
    first, doc = three_modes.first_doc, three_modes.doc
    assert [m["name"] for m in first["modes"]] == ["baseline"]
    # Every mode of the scenario, in its order (baseline first), the kept one untouched.
    assert [m["name"] for m in doc["modes"]] == ["baseline", "fp8-kv", "w-int4"]
    assert all(m["complete"] for m in doc["modes"])
    assert doc["modes"][0] == first["modes"][0]
    assert doc["resumed_from"]["modes"] == ["baseline"]
    assert doc["comparison"]["baseline"] == "baseline"
    # The new snapshot's own sidecar holds every mode's records: the kept ones copied, not pointed at.
    rec = three_modes.path.with_name("three.records.jsonl")
    old = {r.id: r for r in read_records(three_modes.first.with_name("first.records.jsonl"))}
    new = list(read_records(rec))
    kept = {r.id: r for r in new if r.mode == "baseline"}
    assert kept.keys() == old.keys() and all(kept[k] == old[k] for k in old)
    assert {r.mode for r in new} == {"baseline", "fp8-kv", "w-int4"}
    for m in doc["modes"]:
        for s in m["steps"]:
            assert sum(1 for r in new if r.mode == m["name"] and r.step == s["index"] and r.counted) == s["requests"]
    assert not any("records_file" in m for m in doc["modes"])
    assert oct(os.stat(rec).st_mode & 0o777) == "0o600"


KILL = """
name = "kill"
[server]
engine = "sim"
max_model_len = 2048
time_scale = 1
extra_args = ["--knee", "8", "--knee-tpot-ms", "20", "--knee-slowdown", "2"]
[[modes]]
name = "baseline"
[[modes]]
name = "second"
extra_args = ["--knee", "4"]
[workload]
prompt_tokens = 64
output_tokens = 16
[ramp]
start = 1
max = 8
step = "double"
warmup_s = 0.2
window_s = 1
[slo]
tpot_p95_ms = 30
"""


def _descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rfind(")") + 2:].split()[1])
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _journal_events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def test_resume_from_the_journal_after_kill_9_mid_mode(tmp_path):
    sp = tmp_path / "kill.toml"
    sp.write_text(KILL)
    out = tmp_path / "run.json"
    journal = tmp_path / "run.json.journal"
    cmd = [sys.executable, "-m", "kvtui", "run", str(sp), "--headless", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    orphans: list[int] = []
    try:
        # Wait until the second mode has finished one step, then kill -9 the run mid-mode.
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            ev = _journal_events(journal)
            if any(e["event"] == "step" and e["data"]["mode"] == "second" for e in ev):
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.1)
        else:
            raise AssertionError("the second mode never finished a step")
        orphans = _descendants(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for pid in orphans:  # SIGKILL cannot be caught: the simulator and load workers it started live on
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert not out.exists() and journal.exists()
    before = load_journal(journal)
    assert [m["name"] for m in before["modes"]] == ["baseline", "second"]
    assert before["modes"][0]["complete"] is True and before["modes"][1]["complete"] is False
    cut_steps = len(before["modes"][1]["steps"])
    assert cut_steps >= 1
    old_records = list(read_records(tmp_path / "run.records.jsonl"))
    assert {r.mode for r in old_records} == {"baseline", "second"}

    # Resume into the same file, the way a user finishes the run.
    r = subprocess.run(cmd + ["--resume", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "kept from the resumed snapshot" in r.stdout
    doc = load_snapshot(out)
    assert not journal.exists()
    assert [m["name"] for m in doc["modes"]] == ["baseline", "second"]
    kept = doc["modes"][0]
    assert kept == {**before["modes"][0]}  # unchanged
    second = doc["modes"][1]
    assert second["complete"] and second["search"]["done"] and len(second["steps"]) >= 3
    assert second["started_at"] > before["modes"][1]["started_at"]  # measured again, from its first step
    assert doc["comparison"]["baseline"] == "baseline"
    best = second["best_concurrency"]
    assert doc["comparison"]["rows"][1]["best_x"] == (round(best / kept["best_concurrency"], 3) if best else None)
    # The sidecar: the baseline's records as they were, the cut-short mode's stale ones gone.
    recs = list(read_records(tmp_path / "run.records.jsonl"))
    old_base = {x.id for x in old_records if x.mode == "baseline"}
    old_second = {x.id for x in old_records if x.mode == "second"}
    assert {x.id for x in recs if x.mode == "baseline"} == old_base
    assert not old_second & {x.id for x in recs}
    for s in second["steps"]:
        assert sum(1 for x in recs if x.mode == "second" and x.step == s["index"] and x.counted) == s["requests"]
