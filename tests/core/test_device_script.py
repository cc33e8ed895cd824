"""scripts/h200_answer.sh, the device script of issue 28's H200 runs, on the offline simulator (SIM=1):
what it is asked for is what the snapshot runs with, for its own 8k / 512 scenario and for a shipped one.

Until 2026-12-05 CONFIRM_WHEN reached only the script's own scenario, so the published 2k / 256 runs
meant as "doubt" ran the shipped scenario's "always" (docs/results/README.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
