"""Bounded work under any accepted value (issue #30, class 4): a --fast scenario whose steps
would simulate unbounded requests is refused up front naming the field; a long --fast run stops
on SIGTERM with exit 130 and its snapshot finalised."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvtui.io.snapshot.file import load_snapshot

ROOT = Path(__file__).resolve().parents[2]
LONG = """
name = "long"
[server]
engine = "sim"
[[modes]]
name = "a"
[[modes]]
name = "b"
[workload]
prompt_tokens = 64
output_tokens = 64
[ramp]
start = 1
max = 3000
step = "+1"
search = "linear"
warmup_s = 1
window_s = 10
[slo]
tpot_p95_ms = 1000000
"""


def kvtui(*args, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kvtui", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, **kw)


@pytest.mark.parametrize("override, field", [
    ("ramp.min_samples=100000000", "ramp.min_samples"),
    ("ramp.min_samples=100001", "ramp.min_samples"),
    ("ramp.window_requests=50000000", "ramp.window_requests"),
    ("ramp.max=1000000", "ramp.step"),  # +1 to a million: refused by the bound on levels
    ("ramp.max=1000000;ramp.step=\"double\"", "ramp.max"),
])
def test_unbounded_fast_values_are_refused_naming_the_field(tmp_path, override, field) -> None:
    sc = tmp_path / "long.toml"
    sc.write_text(LONG)
    sets = [a for o in override.split(";") for a in ("--set", o)]
    p = kvtui("run", sc, "--headless", "--fast", *sets, "--out", tmp_path / "o.json")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 2, out + err
    assert len(err.strip().splitlines()) == 1 and (f"{field} = " in err or f"{field}: " in err), err
    assert not (tmp_path / "o.json").exists() and not (tmp_path / "o.records.jsonl").exists()


def test_sigterm_during_a_long_fast_run_exits_130_with_the_snapshot_finalised(tmp_path) -> None:
    sc = tmp_path / "long.toml"
    sc.write_text(LONG)
    out = tmp_path / "o.json"
    journal = out.with_name(out.name + ".journal")
    p = kvtui("run", sc, "--headless", "--fast", "--out", out)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            if journal.exists() and journal.read_text().count('"event": "step"') >= 2:
                break
            time.sleep(0.2)
        assert p.poll() is None, "the run ended before it could be stopped"
        p.send_signal(signal.SIGTERM)
        o, e = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, o + e
    doc = load_snapshot(out)  # the final snapshot, not a journal rebuild
    assert not journal.exists()
    assert "SIGTERM" in (doc["run"].get("stop_reason") or "")
    steps = [s for m in doc["modes"] for s in m["steps"]]
    assert len(steps) >= 2 and len(steps) < 3000 * 2  # stopped, not run to its end


# -- one step's own bound and the stop inside it (kvtui.simulator.engine.budget) ---------------------

ONE_LONG_STEP = """
name = "day"
[server]
engine = "sim"
[[modes]]
name = "a"
[workload]
prompt_tokens = 64
output_tokens = 16
[ramp]
start = 1
max = 1
warmup_s = 0
window_s = 86400
[slo]
tpot_p95_ms = 35
"""


def test_sigterm_inside_one_long_modelled_step_stops_it(tmp_path) -> None:
    """ramp.window_s = 86400 at concurrency 1 is in range: one step simulated a day of requests and
    said "stopping" on SIGTERM without stopping. The step's own loop looks at the run's stop."""
    sc = tmp_path / "day.toml"
    sc.write_text(ONE_LONG_STEP)
    out = tmp_path / "o.json"
    p = kvtui("run", sc, "--headless", "--fast", "--out", out)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:  # the mode started: its one step is running
            if out.with_name(out.name + ".journal").exists() and '"event": "mode"' in \
                    out.with_name(out.name + ".journal").read_text():
                break
            time.sleep(0.1)
        assert p.poll() is None
        p.send_signal(signal.SIGTERM)
        o, e = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, o + e
    doc = load_snapshot(out)
    (step,) = [s for m in doc["modes"] for s in m["steps"]] or [None]
    # Cut inside the step (it was still running), no verdict on it, or no step at all if the stop
    # came while the prediction was still simulating: either way the stop held, not the day.
    assert step is None or (step.get("cut") and step["passed"] is None and "SIGTERM" in str(step.get("aborted")))
    assert "SIGTERM" in doc["run"]["stop_reason"]


def test_a_modelled_step_past_its_bound_ends_its_mode_naming_the_bound(tmp_path) -> None:
    sc = tmp_path / "day.toml"
    sc.write_text(ONE_LONG_STEP)
    out = tmp_path / "o.json"
    p = kvtui("run", sc, "--headless", "--fast", "--out", out)
    o, e = p.communicate(timeout=600)
    assert p.returncode == 1, o + e
    (m,) = load_snapshot(out)["modes"]
    assert m["error"]["kind"] == "bounded" and "engine iterations simulated" in m["error"]["message"], m["error"]
    assert all(s["passed"] is None and s.get("cut") for s in m["steps"])
    assert "ended at its bound" in o + e


def test_min_samples_past_the_bound_is_refused_on_the_live_simulator_too(tmp_path) -> None:
    """A run of the sim engine without --fast runs its steps in process, paced (kvtui.explore.pacing):
    the same bound as --fast, up front (ramp.min_samples = 1e8 once ignored SIGTERM on a live run)."""
    sc = tmp_path / "long.toml"
    sc.write_text(LONG)
    p = kvtui("run", sc, "--headless", "--set", "ramp.min_samples=100000000", "--out", tmp_path / "o.json")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 2 and "ramp.min_samples = 100,000,000" in err, out + err


def test_the_budget_ends_a_step_on_the_stop_and_on_each_bound() -> None:
    from kvtui.simulator.engine.budget import STOPPED, StepBudget, refusal

    calls = {"n": 0}

    def halt() -> bool:
        calls["n"] += 1
        return calls["n"] > 3

    b = StepBudget(halt)
    passes = 0
    while not b.over(0, 0, 0):
        passes += 1
    assert b.ended == STOPPED and refusal(b.ended, 1) is None and passes < 10_000
    for kw, args, word in (({"max_requests": 10}, (11, 0, 0), "requests"), ({"max_tokens": 10}, (0, 11, 0), "tokens"),
                           ({"max_iterations": 10}, (0, 0, 11), "iterations")):
        b = StepBudget(None, **kw)
        assert b.over(*args) and word in b.ended and "bound" in (refusal(b.ended, 4) or "")
    for load in (0.0, -1.0, float("nan"), float("inf"), 1e300):
        assert StepBudget().refuse_load(load)


def test_a_snapshot_step_of_an_absurd_load_is_not_simulated_by_calibrate(tmp_path) -> None:
    """`kvtui calibrate` simulates every measured step of a snapshot: a load of 1e300 (or 1e999)
    once meant 1e300 slots in memory, or an OverflowError. Refused in one line."""
    import json

    sc = tmp_path / "s.toml"
    sc.write_text(LONG.replace("max = 3000", "max = 4").replace('step = "+1"', 'step = "double"'))
    snap = tmp_path / "s.json"
    p = kvtui("run", sc, "--headless", "--fast", "--out", snap)
    p.communicate(timeout=300)
    for load in (1e300, 1e7):
        d = json.loads(snap.read_text())
        d["modes"][0]["steps"][0]["load"] = d["modes"][0]["steps"][0]["concurrency"] = load
        bad = tmp_path / f"bad{load:g}.json"
        bad.write_text(json.dumps(d))
        c = kvtui("calibrate", bad, "--out", tmp_path / "c.toml")
        o, e = c.communicate(timeout=300)
        assert c.returncode == 2 and len(e.strip().splitlines()) == 1 and "Traceback" not in e, o + e
