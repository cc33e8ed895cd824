"""Resuming a comparison: from a final snapshot with fewer modes, from a journal after kill -9 (the
cut-short mode continues from its finished steps), from several snapshots, past failed and changed modes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kvtui.io.records import read_records
from kvtui.io.snapshot.file import load_journal, load_snapshot

from scenario_factory import knee_toml


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


KILL = knee_toml("kill", knee=8, slowdown=2, server={"time_scale": 1},
                 modes=[{"name": "baseline"}, {"name": "second", "extra_args": ["--knee", "4"]}],
                 ramp={"max": 8, "warmup_s": 0.2, "window_s": 1})


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
    # Continued, not measured again: the finished steps are kept as they were, the search goes on from them.
    cut = before["modes"][1]["steps"]
    assert second["continued"]["steps"] == cut_steps and "continued from" in r.stdout
    for old_s, new_s in zip(cut, second["steps"]):
        assert new_s["resumed"] is True
        assert all(new_s[k] == old_s[k] for k in ("index", "load", "passed", "requests", "started_at", "ttft_ms", "tpot_ms"))
    fresh = second["steps"][cut_steps:]
    assert fresh and all(s["index"] >= cut_steps and "resumed" not in s for s in fresh)
    assert min(s["started_at"] for s in fresh) > max(s["started_at"] for s in cut)
    # One clock for the mode: kept steps and telemetry end before the new ones begin.
    ends = [s["t_rel_end"] for s in second["steps"]]
    assert ends == sorted(ends)
    ts = [row["t"] for row in second["series"]]
    assert ts == sorted(ts) and len(ts) > len(before["modes"][1]["series"])
    assert doc["comparison"]["baseline"] == "baseline"
    best = second["best_concurrency"]
    assert doc["comparison"]["rows"][1]["best_x"] == (round(best / kept["best_concurrency"], 3) if best else None)
    # The sidecar: the baseline's records as they were; of the cut-short mode, those of its finished
    # steps kept and those of the step the kill cut gone.
    recs = list(read_records(tmp_path / "run.records.jsonl"))
    old_base = {x.id for x in old_records if x.mode == "baseline"}
    old_done = {x.id for x in old_records if x.mode == "second" and x.step < cut_steps}
    old_cut = {x.id for x in old_records if x.mode == "second" and x.step >= cut_steps}
    ids = {x.id for x in recs}
    assert {x.id for x in recs if x.mode == "baseline"} == old_base
    assert old_done and old_done <= ids and not old_cut & ids
    for s in second["steps"]:
        assert sum(1 for x in recs if x.mode == "second" and x.step == s["index"] and x.counted) == s["requests"]


# The kill scenario with a third mode between: baseline, fp8-kv, third (the old "second").
PICKY = KILL.replace('name = "kill"', 'name = "picky"').replace(
    'name = "second"', 'name = "fp8-kv"\nkv_cache_dtype = "fp8"\n[[modes]]\nname = "third"')


def test_resume_from_several_snapshots_retries_failed_and_changed_modes(tmp_path):
    """What the H200 session of 2026-11-29 needed: a mode that failed to start (fixed in the
    scenario since) and a mode measured under other settings are run again, not kept; the
    finished modes of two separate runs join in one snapshot."""
    from kvtui.explore.run import Run
    from kvtui.io.scenario import load_scenario

    sp = tmp_path / "picky.toml"
    sp.write_text(PICKY)
    # Run A: the baseline, and fp8-kv with a flag the server rejects (fails at startup, for real).
    bad = tmp_path / "bad.toml"
    bad.write_text(PICKY.replace('kv_cache_dtype = "fp8"', 'kv_cache_dtype = "fp8"\nextra_args = ["--no-such-flag"]'))
    a = tmp_path / "a.json"
    Run(load_scenario(bad), a, modes=["baseline", "fp8-kv"]).run()
    doc_a = load_snapshot(a)
    assert doc_a["modes"][1]["error"] and not doc_a["modes"][1]["steps"]
    # Resumed as it is, the failed mode is tried again (and fails again), the baseline kept.
    a2 = tmp_path / "a2.json"
    retry: list = []
    Run(load_scenario(bad), a2, modes=["baseline", "fp8-kv"], resume=doc_a, listener=retry.append).run()
    assert any(e.kind == "warning" and "failed in the resumed run" in e.data and "not kept" in e.data for e in retry)
    doc_a2 = load_snapshot(a2)
    assert [m["name"] for m in doc_a2["modes"]] == ["baseline", "fp8-kv"]
    assert doc_a2["modes"][0] == doc_a["modes"][0] and doc_a2["modes"][1]["error"]
    assert doc_a2["modes"][1]["started_at"] > doc_a["modes"][1]["started_at"]
    # Run B: the third mode, under a knee the scenario no longer has.
    old3 = tmp_path / "old3.toml"
    old3.write_text(PICKY.replace('extra_args = ["--knee", "4"]', 'extra_args = ["--knee", "2"]'))
    b = tmp_path / "b.json"
    Run(load_scenario(old3), b, modes=["third"], fast=True).run()
    # Joined: baseline kept from A, fp8-kv measured (its flag is gone), third measured again.
    out = tmp_path / "joined.json"
    events: list = []
    Run(load_scenario(sp), out, resume=[doc_a2, load_snapshot(b)], listener=events.append, fast=True).run()
    doc = load_snapshot(out)
    names = [m["name"] for m in doc["modes"]]
    assert names == ["baseline", "fp8-kv", "third"]
    base, fp8, third = doc["modes"]
    assert base == doc_a["modes"][0]
    assert not fp8.get("error") and fp8["complete"] and fp8["steps"]
    assert third["settings"]["extra_args"] == ["--knee", "4"] and third["complete"]
    warnings = [e.data for e in events if e.kind == "warning"]
    assert any("settings changed" in w and "fp8-kv" in w and "--no-such-flag" in w for w in warnings)
    assert any("settings changed" in w and "third" in w and "extra_args" in w for w in warnings)
    assert doc["resumed_from"]["modes"] == ["baseline"] and doc["resumed_from"]["paths"] == [str(a2), str(b)]
    assert any("settings changed" in w and "not kept" in w for w in doc["warnings"])
    # Only the baseline's records came along (the stale third mode's did not).
    recs = list(read_records(out.with_name("joined.records.jsonl")))
    old_base = {x.id for x in read_records(a.with_name("a.records.jsonl")) if x.mode == "baseline"}
    assert old_base == {x.id for x in read_records(a2.with_name("a2.records.jsonl")) if x.mode == "baseline"}
    assert {x.id for x in recs if x.mode == "baseline"} == old_base
    assert not {x.id for x in read_records(b.with_name("b.records.jsonl"))} & {x.id for x in recs}


def test_modes_run_in_parallel_on_two_gpus_join_and_say_which_device(tmp_path):
    """Two modes measured at once, each kvtui on its own GPU of one host (CUDA_VISIBLE_DEVICES=0
    and =1), then joined: the joined snapshot and its report say which device ran which mode.

    The two runs are the simulator's (no GPU here); their "ran_on" is set as kvtui writes it
    on a GPU host (see telemetry.nvml.gpu_inventory), since the join only reads the snapshots."""
    from kvtui.explore.run import Run
    from kvtui.io.scenario import load_scenario
    from kvtui.report.markdown import render_markdown

    sp = tmp_path / "picky.toml"
    sp.write_text(PICKY)
    docs = []
    for i, mode in enumerate(["baseline", "fp8-kv", "third"]):
        p = tmp_path / f"gpu{i}.json"
        Run(load_scenario(sp), p, modes=[mode], fast=True).run()
        d = json.loads(p.read_text())
        (m,) = d["modes"]
        assert m["ran_on"]["host"] == d["environment"]["host"] and "gpu_uuids" not in m["ran_on"]  # simulated: no device
        m["ran_on"].update(gpu_names=["NVIDIA H200"], gpu_uuids=[f"GPU-{'ab'[min(i, 1)] * 8}-0000"], gpu_indices=[min(i, 1)])
        p.write_text(json.dumps(d))
        docs.append(load_snapshot(p))
    out = tmp_path / "joined.json"
    events: list = []
    Run(load_scenario(sp), out, resume=docs, listener=events.append, fast=True).run()
    doc = load_snapshot(out)
    assert [m["name"] for m in doc["modes"]] == ["baseline", "fp8-kv", "third"]
    note = "the joined modes ran on 2 devices: "
    (w,) = [w for w in doc["warnings"] if w.startswith(note)]
    assert "GPU 0 GPU-aaaaaaaa (baseline)" in w and "GPU 1 GPU-bbbbbbbb (fp8-kv, third)" in w
    assert any(e.kind == "warning" and e.data == w for e in events)
    md = render_markdown(doc)
    assert "| baseline: ran on |" in md and "| fp8-kv, third: ran on |" in md and "GPU 1 GPU-bbbbbbbb" in md


def test_resume_warns_of_a_changed_section_but_not_of_a_key_an_older_kvtui_did_not_write(tmp_path):
    """The H200 snapshots of 2026-11-29/30 predate [slo] max_preemptions_per_request: resuming
    them under the same scenario must not claim the SLO changed; a real change must be named."""
    from kvtui.explore.run import Run
    from kvtui.io.scenario import load_scenario

    sp = tmp_path / "picky.toml"
    sp.write_text(PICKY)
    a = tmp_path / "a.json"
    Run(load_scenario(sp), a, modes=["baseline"], fast=True).run()
    d = json.loads(a.read_text())
    assert "max_preemptions_per_request" in d["scenario"]["slo"]
    del d["scenario"]["slo"]["max_preemptions_per_request"]  # as the older kvtui wrote it
    a.write_text(json.dumps(d))
    events: list = []
    Run(load_scenario(sp), tmp_path / "b0.json", modes=["baseline"], resume=load_snapshot(a),
        listener=events.append, fast=True).run()
    said = [e.data for e in events if e.kind == "warning" and "[slo] differs" in str(e.data)]
    assert not said, said
    # A real change of the SLO is refused, naming the field (kvtui.explore.resume_guard).
    import pytest

    from kvtui.errors import UsageError

    with pytest.raises(UsageError, match=r"slo\.latency\.tpot_p95_ms = "):
        Run(load_scenario(sp, ["slo.tpot_p95_ms=99"]), tmp_path / "b1.json", modes=["baseline"],
            resume=load_snapshot(a), fast=True)


def test_a_mode_continued_on_another_device_says_where_its_first_steps_ran(tmp_path):
    """The H200 sessions of 2026-11-30: a mode cut on one machine's GPU 1 was finished on another
    machine. The continued mode keeps the earlier device (continued.ran_on) beside its own."""
    from kvtui.explore.run import Run
    from kvtui.io.scenario import load_scenario
    from kvtui.io.snapshot.file import ran_on_devices

    sp = tmp_path / "kill.toml"
    # ITL, not TPOT: a step ends once its window requests have their first tokens, so some are cut
    # at its end by their gaps so far (what re-evaluating a kept step must read as the step did)
    sp.write_text(KILL.replace("tpot_p95_ms = 30", "itl_p95_ms = 30"))
    first = tmp_path / "first.json"
    fewer = ["ramp.max=4", "ramp.search=\"linear\"", "ramp.confirm=false"]
    Run(load_scenario(sp, fewer), first, modes=["second"]).run()  # real time: the continuation needs it
    d = json.loads(first.read_text())
    (m,) = d["modes"]
    assert len(m["steps"]) >= 3
    m["steps"], m["complete"] = m["steps"][:2], False  # cut after two steps, as a device call's limit does
    earlier = {"host": "vm", "gpu_names": ["NVIDIA H200"], "gpu_uuids": ["GPU-5d64e549-fa3b"], "gpu_indices": [1]}
    m["ran_on"] = earlier
    first.write_text(json.dumps(d))
    out = tmp_path / "second.json"
    Run(load_scenario(sp, fewer), out, modes=["second"], resume=load_snapshot(first)).run()
    (cont,) = load_snapshot(out)["modes"]
    assert cont["continued"]["steps"] == 2 and cont["continued"]["ran_on"] == earlier
    # the earlier run's server start is GPU time this mode's answer cost: kept beside this run's own
    assert cont["continued"]["startup_s"] == [m["server"]["startup_s"]] and m["server"]["startup_s"] > 0
    # The kept steps re-read their own figures from the records carried with them (another SLO, the
    # knee's interval and the archive re-evaluate them): their window stays on their records' clock.
    from kvtui.core.evaluate import reevaluate
    slo = load_scenario(sp, fewer).slo
    carried = [r for r in read_records(out.with_name(load_snapshot(out)["records"])) if r.step in (0, 1)]
    assert sum(s["window_cut"]["requests"] for s in cont["steps"][:2]) >= 1
    for s in cont["steps"][:2]:
        again = reevaluate(s, [r for r in carried if r.step == s["index"]], slo)
        # the same requests; their token gaps by the step's end, but for the few a worker had not yet
        # reported when the step was judged (its records have them: the live figure lacks ≤ 1 %)
        assert {k: again["samples"][k] for k in ("ttft", "tpot", "e2e")} == {k: s["samples"][k] for k in ("ttft", "tpot", "e2e")}
        assert s["samples"]["itl"] <= again["samples"]["itl"] <= 1.01 * s["samples"]["itl"], (again["samples"], s["samples"])
    assert cont["ran_on"] != earlier
    assert ran_on_devices([cont]) == {"vm GPU 1 GPU-5d64e549": ["second steps 1–2"]}  # the simulator's own steps: no device
