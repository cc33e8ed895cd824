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


def _two_requests_with_a_stall_between(base, stall_s):
    """Two requests on one client, the event loop blocked between them (a host that stalled the client)."""
    import time

    async def go():
        recs = []
        async with StreamClient(5.0, {}) as c:
            for i in range(2):
                rec = Record(id=f"r{i}", mode="m", step=0, load=1, phase="window", t_intended=time.monotonic(),
                             t_sent=0.0)
                body = {"model": "ok", "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True},
                        "prompt": [1, 2, 3]}
                await stream_request(c, base + "/v1/completions", body, rec, 5.0)
                recs.append(rec)
                if i == 0:
                    time.sleep(stall_s)  # blocks the loop: the server's close of the idle connection waits unread
        return recs

    return asyncio.run(go())


def test_a_stalled_client_does_not_reuse_a_connection_the_server_closed(fault_server):
    # uvicorn (vLLM's server, the simulator's, this one) closes a kept-alive connection after 5 s idle. A CI host
    # stalled a load generator for longer; its next request went into the closed connection and failed with
    # "Server disconnected", counted as the server's broken stream. The client takes a new connection after
    # KEEPALIVE_S idle instead.
    first, second = _two_requests_with_a_stall_between(fault_server, 5.5)
    assert first.ok and second.ok, (second.error, second.detail)


def test_a_request_that_got_no_answer_at_all_is_a_connect_error_not_a_broken_stream(fault_server, monkeypatch):
    # With aiohttp's own 15 s keep-alive the stall above does reuse the closed connection: the request gets no
    # response line. Nothing was streamed, so nothing "broke off": it did not get through (connect).
    import kvtui.load.client as client

    monkeypatch.setattr(client, "KEEPALIVE_S", 60.0)
    first, second = _two_requests_with_a_stall_between(fault_server, 5.5)
    assert first.ok
    if second.ok:  # the close was seen before the reuse after all: nothing to classify on this host
        pytest.skip("aiohttp saw the server's close before reusing the connection")
    assert second.error == "connect" and "closed before any answer" in second.detail, (second.error, second.detail)
