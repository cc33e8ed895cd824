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
from pathlib import Path

import pytest
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
    out = []
    needle = f"{TAG}={tag}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle not in d.joinpath("environ").read_bytes().split(b"\0"):
                continue
            stat = d.joinpath("stat").read_text()
            if stat[stat.rfind(")") + 2:].split()[0] in ("Z", "X"):
                continue
            out.append((int(d.name), d.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")))
        except OSError:
            continue
    return out


def _wait(pred, timeout_s: float, what: str, proc=None):
    deadline = time.monotonic() + timeout_s
    while True:
        v = pred()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"kvtui exited ({proc.returncode}) before: {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.2)


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
        ready = _wait(lambda: "ready in" in (proc.stdout.readline() or ""), 600, "vLLM ready", proc)
        assert ready
        _wait(lambda: any("multiprocessing" in c for _, c in _tagged(tag)), 120, "load workers up", proc)
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
