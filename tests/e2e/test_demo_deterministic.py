"""The shipped demo tells one story: the same seed and scenario give the same answer, whatever the host's load.

Two live runs of the demo (real HTTP, the simulator on the wall clock), a busy-loop process loading
the CPU during the second: the answers (text and every step's verdict) are identical, because a
live simulated step is judged in the simulator's modelled time (kvtui.explore.sim_model), and the
live client's own figures are kept beside them. The same answer as `kvtui run sim-demo --fast`.
"""

import json
import os
import subprocess
import sys

import pytest

from kvtui.report.answer import answer_text

pytestmark = pytest.mark.slow

# The demo shortened for CI (its verdicts do not depend on the wall clock, so neither on the slow motion).
QUICK = ["--set", "ramp.window_s=2", "--set", "ramp.warmup_s=1", "--set", "server.time_scale=0.05"]
BUSY = "import time\nt = time.time() + 240\nwhile time.time() < t:\n    pass\n"  # bounded: gone in 4 min at most


def _run(tmp_path, name, *extra):
    out = tmp_path / f"{name}.json"
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", "sim-demo", "--headless", "--out", str(out),
                        "--mode", "fp8-kv", *QUICK, *extra], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "COLUMNS": "120"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return json.loads(out.read_text())


def _verdicts(doc):
    return [(s["load"], s["passed"], s["limited_by"], s["ttft_ms"].get("p95"), s["tpot_ms"].get("p95"),
             s["output_tok_s"]) for m in doc["modes"] for s in m["steps"]]


def test_same_seed_same_answer_under_cpu_load(tmp_path):
    quiet = _run(tmp_path, "quiet")
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    try:
        loaded = _run(tmp_path, "loaded")
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert _verdicts(quiet) == _verdicts(loaded)
    assert answer_text(quiet) == answer_text(loaded)
    steps = quiet["modes"][0]["steps"]
    assert steps and all(s.get("modelled") for s in steps)
    assert all(isinstance(s.get("live"), dict) and s["live"]["requests"] > 0 for s in steps)  # the live run kept
