"""The shipped demo tells one story: the same seed and scenario give the same answer, whatever the host's load.

`kvtui run sim-demo --headless` without --fast runs the simulator in process, each step paced over
its modelled time (kvtui.explore.pacing): there is no HTTP client or server whose timing a busy
host could move. Two such runs, a busy-loop process loading the CPU during the second, give the
same answer (text and every step's verdict), and the same as `kvtui run sim-demo --fast`, because
they are the same code on the same modelled clock; only the pacing differs.
"""

import json
import os
import subprocess
import sys

import pytest

from kvtui.report.answer import answer_text

pytestmark = pytest.mark.slow

# The demo shortened for CI (its verdicts do not depend on the wall clock, so neither on the pacing).
QUICK = ["--set", "ramp.window_s=2", "--set", "ramp.warmup_s=1"]
BUSY = "import time\nt = time.time() + 240\nwhile time.time() < t:\n    pass\n"  # bounded: gone in 4 min at most


def _run(tmp_path, name, *extra):
    out = tmp_path / f"{name}.json"
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", "sim-demo", "--headless", "--out", str(out),
                        "--mode", "fp8-kv", *QUICK, *extra], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "COLUMNS": "120"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return json.loads(out.read_text()), r.stdout


def _verdicts(doc):
    return [(s["load"], s["passed"], s["limited_by"], s["ttft_ms"].get("p95"), s["tpot_ms"].get("p95"),
             s["output_tok_s"]) for m in doc["modes"] for s in m["steps"]]


def _answer(doc):
    # Everything but the run's own wall time and the words that say how it ran.
    return [ln for ln in answer_text(doc).splitlines() if " steps in " not in ln]


def test_same_seed_same_answer_under_cpu_load_and_as_fast(tmp_path):
    quiet, said = _run(tmp_path, "quiet")
    assert "paced at ×20" in said and "sim serve" not in said  # in process: no HTTP simulator started
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    try:
        loaded, _ = _run(tmp_path, "loaded")
    finally:
        for p in busy:
            p.kill()
            p.wait()
    fast, _ = _run(tmp_path, "fast", "--fast")
    assert _verdicts(quiet) and _verdicts(quiet) == _verdicts(loaded) == _verdicts(fast)
    assert _answer(quiet) == _answer(loaded) == _answer(fast)
    # One measurement, the offline model's, paced: the snapshot says so, as --fast's does.
    assert quiet["run"]["fast"] is True and "offline" in quiet["modes"][0]["engine_info"]["version"]
