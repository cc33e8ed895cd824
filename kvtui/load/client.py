"""One streaming request, timed the way `vllm bench serve` times it (DESIGN.md, "Token timing").

TTFT: first chunk carrying a generated token (a `choices` entry, even with empty text),
not the chat role-only delta, not the usage chunk. ITL: every gap between token-bearing
chunks. Output tokens: from `usage` (stream_options.include_usage), never counted chunks.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp

from kvtui.load.records import Record
from kvtui.secrets import scrub_text

_SSL_CONTEXT = None


def _ssl_context():
    """One verifying SSL context per process: building one loads the CA bundle (~50 ms of CPU),
    and the load generator makes a client per closed-loop slot."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        import ssl

        import certifi

        _SSL_CONTEXT = ssl.create_default_context(cafile=certifi.where())
    return _SSL_CONTEXT


class StreamClient:
    """One aiohttp session with one keep-alive connection: what one closed-loop slot, or one
    open-loop request in flight, streams through (the transport `vllm bench serve` uses).

    Not httpx: against a busy CPU vLLM the same requests, the same SSE parsing and the same
    timing rule read TTFT 9-25x and TPOT 2-4x the server's own histogram means through an
    httpx AsyncClient, and within 1 % (TPOT, E2E) through aiohttp (bench/client_probe.py,
    docs/BENCHMARKS.md §3). Must be made inside a running event loop.
    """

    def __init__(self, request_timeout_s: float, headers: dict[str, str]):
        # trust_env=False (aiohttp's default, stated): an HTTP(S)_PROXY in the environment must
        # not sit between the client and the server.
        connector = aiohttp.TCPConnector(limit=1, ssl=_ssl_context())
        timeout = aiohttp.ClientTimeout(total=None, connect=10.0, sock_read=request_timeout_s)
        self.session = aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers, trust_env=False)
        # What a server might echo back (a 500 body or an SSE error quoting the Authorization
        # header): never stored. Every record's text is scrubbed of these and of bearer tokens.
        self.secrets = sorted({v for v in headers.values() if len(v) >= 8} | {v.split(" ", 1)[1] for v in headers.values()
                                                                              if v.lower().startswith(("bearer ", "basic ")) and len(v) > 12},
                              key=len, reverse=True)

    async def aclose(self) -> None:
        await self.session.close()

    async def __aenter__(self) -> "StreamClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _token_bearing(choice: dict[str, Any], chat: bool) -> tuple[bool, str]:
    if not chat:
        return ("text" in choice, choice.get("text") or "")
    delta = choice.get("delta") or {}
    if "content" not in delta or delta["content"] is None:
        return (False, "")
    content = delta["content"]
    if "role" in delta and content == "":
        return (False, "")  # the role-only opening delta
    return (True, content)


_DONE = object()
_FAILED = object()


def _event(line: bytes, rec: Record, chat: bool, now: float, last: float | None, text_parts: list[str] | None):
    """One SSE line. Returns _DONE, _FAILED (rec filled), the time of a token-bearing event, or None."""
    if not line.startswith(b"data:"):
        return None
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return _DONE
    try:
        data = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError):
        rec.status, rec.error = "error", "sse_malformed"
        rec.detail = f"not JSON: {payload[:80].decode('utf-8', 'replace')!r}"
        return _FAILED
    if not isinstance(data, dict):
        rec.status, rec.error = "error", "sse_malformed"
        rec.detail = f"not an object: {payload[:80].decode('utf-8', 'replace')!r}"
        return _FAILED
    if "error" in data and not data.get("choices"):
        err = data["error"]
        rec.status, rec.error = "error", "stream_error"
        rec.detail = str(err.get("message") if isinstance(err, dict) else err)[:200]
        return _FAILED
    usage = data.get("usage")
    if usage:
        rec.prompt_tokens = usage.get("prompt_tokens")
        rec.output_tokens = usage.get("completion_tokens")
    choices = data.get("choices")
    if choices:
        bearing, text = _token_bearing(choices[0], chat)
        if bearing:
            if last is None:
                rec.t_first = now
            else:
                rec.itl.append(now - last)
            if text_parts is not None and text:
                text_parts.append(text)
            return now
    return None


def _events(lines: list[bytes], rec: Record, chat: bool, now: float, last: float | None,
            text_parts: list[str] | None) -> tuple[float | None, bool]:
    """The SSE lines of one read. Returns (time of the last token-bearing event, [DONE] seen);
    a bad event marks `rec` as an error and stops there."""
    for line in lines:
        outcome = _event(line, rec, chat, now, last, text_parts)
        if outcome is _DONE:
            return last, True
        if outcome is _FAILED:
            break
        if outcome is not None:
            last = outcome
    return last, False


async def stream_request(
    client: StreamClient,
    url: str,
    body: dict[str, Any],
    rec: Record,
    timeout_s: float,
    collect_text: bool = False,
) -> str:
    """Send one streaming request and fill `rec` in place. Returns the output text when asked.

    Whatever the server said that ends up in the record (`detail`) is scrubbed of the key.
    """
    try:
        return await _stream_request(client, url, body, rec, timeout_s, collect_text)
    finally:
        if rec.detail:
            rec.detail = scrub_text(rec.detail, getattr(client, "secrets", None) or [])


async def _stream_request(
    client: StreamClient,
    url: str,
    body: dict[str, Any],
    rec: Record,
    timeout_s: float,
    collect_text: bool = False,
) -> str:
    chat = "messages" in body
    text_parts: list[str] = []
    last: float | None = None
    done = False
    rec.t_sent = time.monotonic()
    rec.dispatch_delay = max(0.0, rec.t_sent - rec.t_intended)
    try:
        async with asyncio.timeout(timeout_s):
            async with client.session.post(url, json=body) as resp:
                rec.http_status = resp.status
                if resp.status != 200:
                    raw = (await resp.read())[:300].decode("utf-8", "replace")
                    rec.status = "error"
                    rec.error = "http_429" if resp.status == 429 else ("http_5xx" if resp.status >= 500 else "http_4xx")
                    rec.detail = f"HTTP {resp.status}: {raw.strip()}"
                    return ""
                # Bytes as they arrive, split into SSE lines here (no text decoding or line
                # reader per chunk: bench/loadgen_capacity.py). Every event of one read gets
                # that read's time, as vLLM's client does.
                reads = resp.content.iter_any()
                parts = text_parts if collect_text else None
                tail = b""
                async for chunk in reads:
                    now = time.monotonic()
                    lines = (tail + chunk).split(b"\n")
                    tail = lines.pop()
                    last, done = _events(lines, rec, chat, now, last, parts)
                    if done or rec.status == "error":
                        break
                    # A read that finds data already buffered does not suspend: one busy stream
                    # could hold the loop and delay every other stream's timestamps (loop lag
                    # p99 went from ~300 ms to ~30 ms at 128 streams with this yield; see bench/).
                    await asyncio.sleep(0)
                else:  # the body ended: a last line without its newline means the stream was cut
                    last, done = _events([tail], rec, chat, time.monotonic(), last, parts)
                if rec.status == "error":
                    return ""
                if done:
                    # Read the body's end (the chunked terminator after [DONE]): a response left
                    # unfinished closes its connection, and every request paid a new TCP connect
                    # (bench/dispatch_honesty.py). Bounded, for servers that keep the stream open.
                    try:
                        async with asyncio.timeout(1.0):
                            async for _ in reads:
                                pass
                    except TimeoutError:
                        pass
    except TimeoutError:  # aiohttp's own read/connect timeouts are TimeoutErrors too
        rec.status, rec.error, rec.detail = "error", "timeout", f"no end of stream within {timeout_s:g} s"
        return ""
    except asyncio.CancelledError:
        rec.status, rec.error, rec.detail = "error", "cancelled", "the step ended while in flight"
        raise
    except aiohttp.ClientConnectorError as e:
        rec.status, rec.error, rec.detail = "error", "connect", str(e)[:200] or "connection refused"
        return ""
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
        rec.status, rec.error = "error", "truncated"
        rec.detail = f"stream broke off: {type(e).__name__}: {str(e)[:120]}"
        return ""
    except aiohttp.ClientError as e:
        rec.status, rec.error, rec.detail = "error", "connect", f"{type(e).__name__}: {str(e)[:160]}"
        return ""
    rec.t_last = last
    if rec.t_first is None:
        rec.status, rec.error, rec.detail = "error", "no_tokens", "the stream carried no token"
    elif not done:
        rec.status, rec.error, rec.detail = "error", "truncated", "the stream ended without [DONE]"
    elif rec.output_tokens is None:
        rec.status, rec.error, rec.detail = "error", "truncated", "no usage chunk (include_usage unsupported?)"
    return "".join(text_parts)
