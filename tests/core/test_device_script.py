"""scripts/h200_answer.sh, the device script of issue 28's H200 runs, on the offline simulator (SIM=1):
what it is asked for is what the snapshot runs with, for its own 8k / 512 scenario and for a shipped one.

Until 2026-12-05 CONFIRM_WHEN reached only the script's own scenario, so the published 2k / 256 runs
meant as "doubt" ran the shipped scenario's "always" (docs/RESULTS.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, **env: str) -> tuple[dict, str]:
    runs = tmp_path / "runs"
    full = {**os.environ, "PYTHON": sys.executable, "SIM": "1", "RUNS": str(runs), "OUT": str(tmp_path / "out"),
            "TAG": "t", **env}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "h200_answer.sh"), "next"], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    latest = Path((runs / "t.latest").read_text().strip())
    return json.loads(latest.read_text()), proc.stdout


@pytest.mark.parametrize("scenario", ["", "h200-llama8b"])
def test_what_the_device_script_is_asked_for_is_what_the_snapshot_ran(tmp_path: Path, scenario: str) -> None:
    doc, out = _run(tmp_path, SCENARIO=scenario, CONFIRM_WHEN="doubt", MIN_SAMPLES="40", WINDOW_S="12",
                    MODES="fp8-w+kv")
    ramp = doc["scenario"]["ramp"]
    assert (ramp["confirm_when"], ramp["min_samples"], ramp["window_s"]) == ("doubt", 40, 12.0)
    assert [m["name"] for m in doc["modes"] if m.get("steps")] == ["fp8-w+kv"]
    # the split printed on the device says what the snapshot ran with
    assert "confirm_when doubt" in out and "window 12.0 s" in out
    # a shipped scenario keeps what was not asked for (its 2k / 256 workload)
    if scenario:
        assert doc["scenario"]["workload"]["prompt_tokens"]["max"] == 2048


def test_unasked_the_shipped_scenario_keeps_its_own_ramp(tmp_path: Path) -> None:
    doc, _ = _run(tmp_path, SCENARIO="h200-llama8b", MODES="fp8-w+kv")
    ramp = doc["scenario"]["ramp"]
    assert (ramp["confirm_when"], ramp["window_s"]) == ("always", 15.0)


@pytest.mark.parametrize("env, slo", [
    ({}, {"itl_p95_ms": 300.0}),  # the published SLO: a KV-bound knee
    ({"ITL_P95_MS": "100"}, {"itl_p95_ms": 100.0}),  # the interactive one of h200-8k512-itl100
    ({"TPOT_P95_MS": "30"}, {"tpot_p95_ms": 30.0}),  # decode by each request's mean gap, no ITL target
    ({"TPOT_P95_MS": "30", "ITL_P95_MS": "250"}, {"tpot_p95_ms": 30.0, "itl_p95_ms": 250.0}),
])
def test_the_decode_slo_asked_for_is_the_one_the_snapshot_judged(tmp_path: Path, env: dict, slo: dict) -> None:
    doc, _ = _run(tmp_path, MODES="fp8-w+kv", CONFIRM_WHEN="doubt", **env)
    assert doc["scenario"]["slo"]["latency"] == {"ttft_p95_ms": 3000.0, **slo}
    # every judged step was judged on exactly those latency targets
    judged = {c["target"] for s in doc["modes"][-1]["steps"] for c in s.get("checks") or []} - {"preemptions_per_request"}
    assert judged == {"ttft_p95_ms", *slo}


def test_a_detached_comparison_outlives_the_call_that_started_it_and_the_next_call_collects_it(tmp_path: Path) -> None:
    """`detach` starts the runs in a session of their own (the device kills what a call leaves running, except a
    new session), so a comparison longer than one 10-minute call runs on, uncut, and `wait` in the next call
    returns when it is done, with everything it wrote."""
    runs = tmp_path / "runs"
    base = {**os.environ, "PYTHON": sys.executable, "SIM": "1", "RUNS": str(runs), "TAG": "t",
            "CONFIRM_WHEN": "doubt", "ITL_P95_MS": "100"}
    script = str(ROOT / "scripts" / "h200_answer.sh")

    def call(what: list[str], out: str, budget: str, **env: str) -> str:
        proc = subprocess.run(["bash", script, *what], cwd=ROOT, env={**base, "OUT": str(tmp_path / out),
                              "BUDGET_S": budget, **env}, capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    # the chain waits first, so the first call's budget (1 s) ends while it runs
    chain = ["bash", "-c", f"sleep 4; MODES=fp8-w+kv bash {script} all; TAG=c CONFIRM_WHEN=always MODES=fp8-w+kv bash {script} all"]
    try:
        first = call(["detach", *chain], "out1", "1")
        assert "chain: still running" in first
        pid = int((runs / "chain.pid").read_text())
        os.kill(pid, 0)  # the chain outlived the call that started it
        second = call(["wait"], "out2", "300")
    finally:
        if (runs / "chain.pid").exists() and not (runs / "chain.done").exists():
            os.killpg(int((runs / "chain.pid").read_text()), 15)
    assert "chain: done, rc 0" in second
    # both runs of the chain, each with the ramp it was asked for, and the time split of each
    fast = json.loads(Path((runs / "t.latest").read_text().strip()).read_text())
    careful = json.loads(Path((runs / "c.latest").read_text().strip()).read_text())
    assert (fast["scenario"]["ramp"]["confirm_when"], careful["scenario"]["ramp"]["confirm_when"]) == ("doubt", "always")
    assert [m["name"] for m in fast["modes"] if m.get("steps")] == ["fp8-w+kv"]
    # what the second call returns holds everything the chain wrote, its splits and snapshots included
    bundles = list((tmp_path / "out2").glob("t-runs-*.tar.xz"))
    assert len(bundles) == 1
    with tarfile.open(bundles[0]) as tar:
        names = {Path(n).name for n in tar.getnames()}
    assert {"t-split.txt", "c-split.txt", "chain.log", "chain.done"} <= names
    assert Path((runs / "c.latest").read_text().strip()).name in names
    # a `wait` asked with other settings leaves the chain's scenarios as they are (a chain's later run reads its own)
    before = {f.name: f.read_text() for f in runs.glob("*.toml")}
    assert set(before) == {"t.toml", "c.toml"} and 'confirm_when = "doubt"' in before["t.toml"]
    call(["wait"], "out4", "5", CONFIRM_WHEN="always", ITL_P95_MS="300")
    assert {f.name: f.read_text() for f in runs.glob("*.toml")} == before
    # `detach` with nothing to run is refused
    proc = subprocess.run(["bash", script, "detach"], cwd=ROOT, env={**base, "OUT": str(tmp_path / "o3")},
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "name the command" in proc.stderr
