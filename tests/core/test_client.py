"""The streaming client over real HTTP: DESIGN's token-timing rule and every error class."""

import asyncio
import sys
from pathlib import Path

import pytest

from kvtui.load.client import StreamClient, stream_request
from kvtui.load.records import Record
from kvtui.procs.servers import ServerProcess, free_port


@pytest.fixture(scope="module")
def fault_server():
    port = free_port()
    p = ServerProcess([sys.executable, str(Path(__file__).with_name("fault_app.py")), str(port)])
    p.start()
    base = f"http://127.0.0.1:{port}"
    p.wait_ready(base + "/health", 30, what="fault server")
    yield base
    p.stop()


def one(base, model, chat=False, timeout=5.0, headers=None):
    async def go():
        rec = Record(id="r", mode="m", step=0, load=1, phase="window", t_intended=0.0, t_sent=0.0)
        body = {"model": model, "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}}
        body["messages" if chat else "prompt"] = [{"role": "user", "content": "hi"}] if chat else [1, 2, 3]
        url = base + ("/v1/chat/completions" if chat else "/v1/completions")
        import time

        rec.t_intended = time.monotonic()
        async with StreamClient(timeout, headers or {}) as c:
            await stream_request(c, url, body, rec, timeout)
        return rec

    return asyncio.run(go())


def test_token_timing_rule_completions(fault_server):
    r = one(fault_server, "ok")
    assert r.ok and r.error is None
    assert len(r.itl) == 3  # 4 token-bearing chunks (one with empty text) → 3 gaps
    assert r.output_tokens == 4 and r.prompt_tokens == 3  # from usage, not counted chunks
    assert r.t_first < r.t_last and abs((r.t_last - r.t_first) - sum(r.itl)) < 1e-6
    assert r.tpot == pytest.approx((r.t_last - r.t_first) / 3)


def test_chat_role_chunk_is_not_the_first_token(fault_server):
    r = one(fault_server, "ok", chat=True)
    assert r.ok and len(r.itl) == 3
    assert r.ttft >= 0.05  # the role-only delta came 50 ms before the first token


@pytest.mark.parametrize("model,error", [
    ("http-500", "http_5xx"), ("http-429", "http_429"), ("http-400", "http_4xx"),
    ("malformed", "sse_malformed"), ("error-in-stream", "stream_error"),
    ("truncated", "truncated"), ("no-usage", "truncated"),
])
def test_error_classes(fault_server, model, error):
    r = one(fault_server, model)
    assert not r.ok and r.error == error, (r.error, r.detail)
    assert r.ttft is None and r.tpot is None  # failures carry no latency (they count as infinite)


def test_a_stream_that_never_finishes_times_out(fault_server):
    r = one(fault_server, "hang", timeout=1.0)
    assert r.error == "timeout" and "1 s" in r.detail


def test_connection_refused():
    r = one(f"http://127.0.0.1:{free_port()}", "ok")
    assert r.error == "connect"


def test_against_the_simulator_usage_matches_request(knee_server):
    async def go():
        rec = Record(id="r", mode="m", step=0, load=1, phase="window", t_intended=0.0, t_sent=0.0)
        body = {"model": "knee", "prompt": list(range(40)), "max_tokens": 7, "stream": True, "stream_options": {"include_usage": True}}
        async with StreamClient(10, {"Authorization": f"Bearer {knee_server.api_key}"}) as c:
            await stream_request(c, knee_server.base_url + "/v1/completions", body, rec, 10)
        return rec

    r = asyncio.run(go())
    assert r.ok and r.prompt_tokens == 40 and r.output_tokens == 7 and len(r.itl) == 6


def test_wrong_api_key_is_an_http_4xx(knee_server):
    r = one(knee_server.base_url, "knee", headers={"Authorization": "Bearer wrong"})
    assert r.error == "http_4xx" and r.http_status == 401
