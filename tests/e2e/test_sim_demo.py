"""The demo a fresh install runs (`kvtui` / `kvtui run --headless`): simulated L4, in process, paced to the wall.

What must hold: fp8 KV holds more concurrency at the same SLO than bf16, and every figure is
labelled SIMULATED.
"""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_demo_fp8_kv_beats_bf16_at_the_same_slo(tmp_path):
    out = tmp_path / "demo.json"
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", "--headless", "--out", str(out)],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "SIMULATED" in r.stdout
    doc = json.loads(out.read_text())
    best = {m["name"]: m["best_concurrency"] for m in doc["modes"]}
    assert best["bf16"] and best["fp8-kv"] > best["bf16"], best
    comp = {row["mode"]: row for row in doc["comparison"]["rows"]}
    assert comp["fp8-kv"]["best_x"] > 1.0 and comp["fp8-kv"]["kv_tokens_x"] == 2.0
