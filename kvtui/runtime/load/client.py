"""One streaming request, timed the way `vllm bench serve` times it (DESIGN.md, "Token timing").

TTFT: first chunk carrying a generated token (a `choices` entry, even with empty text),
not the chat role-only delta, not the usage chunk. ITL: every gap between token-bearing
chunks. Output tokens: from `usage` (stream_options.include_usage), never counted chunks.
"""

from __future__ import annotations

import asyncio
import errno
import json
import resource  # imported up front: a lazy import fails exactly when descriptors run out
from typing import Any

import aiohttp

from kvtui import clock
from kvtui.core.record import Record
from kvtui.secrets import scrub_text

_SSL_CONTEXT = None
# Seconds a kept-alive connection may sit idle before a request takes a new one (StreamClient).
KEEPALIVE_S = 3.0


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
        # keepalive_timeout below the server's: uvicorn (vLLM's server and the simulator's) closes a
        # kept-alive connection idle for 5 s, aiohttp would reuse one for 15. On a host that stalled
        # the client for seconds, the next request went into a connection the server had closed:
        # "Server disconnected" before any answer, blamed on the server (a CI run's demo step).
        connector = aiohttp.TCPConnector(limit=1, ssl=_ssl_context(), keepalive_timeout=KEEPALIVE_S)
        timeout = aiohttp.ClientTimeout(total=None, connect=10.0, sock_read=request_timeout_s)
        self.session = aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers, trust_env=False)
        # What a server might echo back (a 500 body or an SSE error quoting the Authorization
        # header): never stored. Every record's text is scrubbed of these and of bearer tokens.
        self.secrets = sorted({v for v in headers.values() if len(v) >= 8}
                              | {v.split(" ", 1)[1] for v in headers.values()
                                 if v.lower().startswith(("bearer ", "basic ")) and len(v) > 12},
                              key=len, reverse=True)

    async def aclose(self) -> None:
        await self.session.close()

    async def __aenter__(self) -> "StreamClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _token_bearing(choice: dict[str, Any], chat: bool) -> tuple[bool, str | None]:
    if not chat:
        # `text: null` is no token: every chunk null once passed with the usage count as output.
        # None comes back as the text: the caller flags the record (text_null).
        if "text" in choice and choice["text"] is None:
            return (False, None)
        return ("text" in choice, choice.get("text", ""))  # text 0 or [] is no token text: malformed below
    delta = choice.get("delta") or {}
    if "content" not in delta or delta["content"] is None:
        return (False, "")
    content = delta["content"]
    if "role" in delta and content == "":
        return (False, "")  # the role-only opening delta
    return (True, content)


_DONE = object()
_FAILED = object()

# One SSE line beyond this is refused (`sse_oversize`): a 30 MB event once took 2 s of quadratic
# re-splitting and still read as a PASS. vLLM's events are a few hundred bytes.
MAX_EVENT_BYTES = 1 << 20
# A usage count above this is not a count (1e308, 10**18): no request carries a billion tokens.
MAX_USAGE_TOKENS = 1 << 30


def _count(v: Any) -> tuple[int | None, bool]:
    """A usage count if it is one (an int in 0..MAX_USAGE_TOKENS, not a bool), and whether it was."""
    if v is None:
        return None, True
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_USAGE_TOKENS:
        return v, True
    return None, False


def http_error_class(status: int) -> str:
    """A status other than 200, as an error class (kvtui.core.record.ERROR_CLASSES)."""
    if status == 429:
        return "http_429"
    if status >= 500:
        return "http_5xx"
    if 400 <= status < 500:
        return "http_4xx"
    if 300 <= status < 400:
        return "http_redirect"
    return "http_status"  # 1xx, or a 2xx that is not the stream (204 No Content)


def _flag(rec: Record, name: str) -> None:
    if name not in rec.flags:
        rec.flags.append(name)


def _malformed(rec: Record, what: str) -> object:
    rec.status, rec.error, rec.detail = "error", "sse_malformed", what[:200]
    return _FAILED


def _event(line: bytes, rec: Record, chat: bool, now: float, last: float | None, text_parts: list[str] | None,
           words: list[int] | None = None):
    """One SSE line. Returns _DONE, _FAILED (rec filled), the time of a token-bearing event, or None.
    `words[0]` counts the word breaks (spaces, newlines) of the streamed text: evidence of how
    many tokens a chunk carried (cross_check_usage)."""
    if not line.startswith(b"data:"):
        return None
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return _DONE
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError) as e:
        # Not JSON, or JSON past the parser's limits (nested past the recursion limit, an integer
        # of more than 4,300 digits): the server's malformed event, never kvtui's own failure.
        rec.status, rec.error = "error", "sse_malformed"
        what = "not JSON" if isinstance(e, (json.JSONDecodeError, UnicodeDecodeError)) else \
            f"JSON past the parser's limits ({type(e).__name__})"
        rec.detail = f"{what}: {payload[:80].decode('utf-8', 'replace')!r}"
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
        if not isinstance(usage, dict):
            return _malformed(rec, f"usage is not an object: {str(usage)[:60]!r}")
        p, p_ok = _count(usage.get("prompt_tokens"))
        o, o_ok = _count(usage.get("completion_tokens"))
        if not (p_ok and o_ok):
            _flag(rec, "usage_invalid")
            rec.detail = f"usage not a count: {str(usage)[:120]}"
        rec.prompt_tokens = p
        rec.output_tokens = o
    choices = data.get("choices")
    if choices:
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            return _malformed(rec, f"choices is not a list of objects: {str(choices)[:60]!r}")
        if chat and not isinstance(choices[0].get("delta") or {}, dict):
            return _malformed(rec, "delta is not an object")
        fr = choices[0].get("finish_reason")
        if fr is not None:
            rec.finish_reason = str(fr)[:40]
        bearing, text = _token_bearing(choices[0], chat)
        if text is None and not chat:
            _flag(rec, "text_null")
            return None
        if not isinstance(text, str):
            return _malformed(rec, f"token text is not a string: {str(text)[:60]!r}")
        if bearing:
            if last is None:
                rec.t_first = now
            else:
                rec.itl.append(now - last)
            if text_parts is not None and text:
                text_parts.append(text)
            if words is not None and text:
                words[0] += text.count(" ") + text.count("\n")
            return now
    return None


def _events(lines: list[bytes], rec: Record, chat: bool, now: float, last: float | None,
            text_parts: list[str] | None, words: list[int] | None = None) -> tuple[float | None, bool]:
    """The SSE lines of one read. Returns (time of the last token-bearing event, [DONE] seen);
    a bad event marks `rec` as an error and stops there."""
    for line in lines:
        outcome = _event(line, rec, chat, now, last, text_parts, words)
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
    words = [0]  # word breaks in the streamed text (cross_check_usage)
    last: float | None = None
    done = False
    rec.t_sent = clock.monotonic()
    rec.dispatch_delay = max(0.0, rec.t_sent - rec.t_intended)
    try:
        async with asyncio.timeout(timeout_s):
            # A redirect is an answer, never followed: a 307 to another origin would measure another
            # server (and carry the key there).
            async with client.session.post(url, json=body, allow_redirects=False) as resp:
                rec.http_status = resp.status
                if resp.status != 200:
                    rec.status = "error"
                    rec.error = http_error_class(resp.status)
                    if rec.error == "http_redirect":
                        where = str(resp.headers.get("Location", "?"))[:200]
                        rec.detail = (f"HTTP {resp.status} to {where}: not followed (another server would be "
                                      "measured); give server.url the server itself")
                        return ""
                    try:
                        async with asyncio.timeout(5.0):  # an error body that trickles is not waited for
                            raw = (await resp.content.read(300)).decode("utf-8", "replace")
                    except TimeoutError:
                        raw = "(its body did not come within 5 s)"
                    rec.detail = f"HTTP {resp.status}: {raw.strip()}"
                    return ""
                # Bytes as they arrive, split into SSE lines here (no text decoding or line
                # reader per chunk: bench/loadgen_capacity.py). Every event of one read gets
                # that read's time, as vLLM's client does.
                reads = resp.content.iter_any()
                parts = text_parts if collect_text else None
                # The unfinished last line, as pieces: joined only once a newline ends it, so a
                # long event costs O(n), not a re-split of everything held at every read.
                held: list[bytes] = []
                held_n = 0
                async for chunk in reads:
                    now = clock.monotonic()
                    if b"\n" not in chunk:
                        held.append(chunk)
                        held_n += len(chunk)
                        if held_n > MAX_EVENT_BYTES:
                            rec.status, rec.error = "error", "sse_oversize"
                            rec.detail = f"an SSE line over {MAX_EVENT_BYTES >> 20} MiB (client bound): not read"
                            break
                        await asyncio.sleep(0)  # the same fairness yield as below
                        continue
                    lines = (b"".join(held) + chunk).split(b"\n")
                    tail = lines.pop()
                    held, held_n = ([tail], len(tail)) if tail else ([], 0)
                    if any(len(x) > MAX_EVENT_BYTES for x in lines) or held_n > MAX_EVENT_BYTES:
                        rec.status, rec.error = "error", "sse_oversize"
                        rec.detail = f"an SSE line over {MAX_EVENT_BYTES >> 20} MiB (client bound): not read"
                        break
                    last, done = _events(lines, rec, chat, now, last, parts, words)
                    if done or rec.status == "error":
                        break
                    # A read that finds data already buffered does not suspend: one busy stream
                    # could hold the loop and delay every other stream's timestamps (loop lag
                    # p99 went from ~300 ms to ~30 ms at 128 streams with this yield; see bench/).
                    await asyncio.sleep(0)
                else:  # the body ended: a last line without its newline means the stream was cut
                    last, done = _events([b"".join(held)], rec, chat, clock.monotonic(), last, parts, words)
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
    except (aiohttp.ClientError, OSError) as e:
        fd = out_of_fds(e)
        if fd:
            rec.status, rec.error, rec.detail = "error", "client", fd
        elif isinstance(e, aiohttp.ClientResponseError) and not isinstance(e, aiohttp.ClientConnectorError):
            # An answer came that is not HTTP kvtui can read (headers past aiohttp's 8 KiB, a bad
            # status line): the server answered, so not `connect`.
            rec.status, rec.error = "error", "bad_response"
            rec.detail = f"an answer that is not readable HTTP: {str(getattr(e, 'message', e))[:160]}"
        elif isinstance(e, aiohttp.ClientConnectorError):
            rec.status, rec.error, rec.detail = "error", "connect", str(e)[:200] or "connection refused"
        elif rec.http_status is None and isinstance(e, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
            # No answer at all: the request never got a response line (a kept-alive connection closed
            # under it, a server gone): no stream broke off, the request did not get through.
            rec.status, rec.error = "error", "connect"
            rec.detail = f"the connection closed before any answer: {type(e).__name__}: {str(e)[:120]}"
        elif isinstance(e, (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
            rec.status, rec.error = "error", "truncated"
            rec.detail = f"stream broke off: {type(e).__name__}: {str(e)[:120]}"
        else:
            rec.status, rec.error, rec.detail = "error", "connect", f"{type(e).__name__}: {str(e)[:160]}"
        return ""
    except Exception as e:  # kvtui's own code failed on this answer: the client's error, named
        rec.status, rec.error, rec.detail = "error", "client", f"{type(e).__name__}: {str(e)[:160]}"
        return ""
    rec.t_last = last
    if rec.t_first is None:
        rec.status, rec.error, rec.detail = "error", "no_tokens", "the stream carried no token"
    elif not done:
        rec.status, rec.error, rec.detail = "error", "truncated", "the stream ended without [DONE]"
    elif rec.output_tokens is None and "usage_invalid" not in rec.flags:
        rec.status, rec.error, rec.detail = "error", "truncated", "no usage chunk (include_usage unsupported?)"
    else:
        # A prompt sent as token ids has an exact length: the server may add a BOS, nothing else.
        prompt = body.get("prompt")
        ids = len(prompt) if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt[:4]) else 0
        cross_check_usage(rec, token_ids=ids, words=words[0])
    return "".join(text_parts)


# How far usage may exceed the tokens the stream shows (streamed_tokens_bound) and still be
# believed. On the published H200 vLLM records (docs/results, ~62,000 requests, vLLM merging
# several tokens into one chunk when its API loop runs behind: up to 256 tokens in 184 chunks),
# usage was at most 1.19x the estimate from the chunks' timing; 1.25 leaves none flagged there.
STREAMED_SLACK = 1.25
# The timing route credits a stream with at most this many tokens per chunk (see below); the
# worst on the published records was 1.39 (256 tokens in 184 chunks).
MAX_TIMED_TOKENS_PER_CHUNK = 2.0


def streamed_tokens_bound(rec: Record, words: int | None = None) -> float:
    """The most output tokens the stream itself can account for, from what it showed.

    Each token-bearing chunk carries one token or more (one spare for a closing empty chunk).
    A chunk carries more than one where the server merged tokens, and that leaves traces: the
    merged tokens were generated while the client waited, so the chunk came after a gap of
    several decode steps (tokens ~ 1 + the first-to-last span over the request's typical gap,
    the median of its positive gaps: a stall behind another request's prefill only makes this
    larger, so it errs towards belief); and merged text holds several words (`words`, the
    streamed text's word breaks: a token rarely spans two). A usage count past the largest of
    these, by more than STREAMED_SLACK, is a figure the stream does not show: 1.75x the chunks
    at an even pace once passed when it equalled max_tokens with finish_reason "length"."""
    if rec.t_first is None:
        return 0.0
    chunks = len(rec.itl) + 1
    by_time = float(chunks)
    gaps = sorted(g for g in rec.itl if g > 0)
    if gaps:
        mid = gaps[len(gaps) // 2] if len(gaps) % 2 else (gaps[len(gaps) // 2 - 1] + gaps[len(gaps) // 2]) / 2
        # At most twice the chunks: the pace is the server's to set, and an uneven one (many
        # short gaps, a few long) would otherwise credit it without limit.
        by_time = min(MAX_TIMED_TOKENS_PER_CHUNK * chunks, max(by_time, 1.0 + sum(rec.itl) / mid))
    return max(by_time, float(words or 0)) * STREAMED_SLACK + 1


def cross_check_usage(rec: Record, token_ids: int = 0, words: int | None = None) -> None:
    """Flag `usage` that disagrees with what the stream showed and what was asked.

    Output: no more than the requested max_tokens, no fewer tokens than token-bearing chunks
    (one chunk carries one token or more; one spare for a closing empty chunk), and no more than
    the stream accounts for (streamed_tokens_bound), whatever max_tokens or finish_reason say;
    a count past that bound is not kept as the figure (None, `usage_mismatch`, the claim in
    the detail). A usage 10x too high once read as 3,817 tok/s and TPOT 1.0 ms, PASS (really
    385 and 10.5). finish_reason "length" means max_tokens were generated: exactly that many.
    Prompt: token-id prompts have an exact length; the server may add a BOS or a chat template,
    never remove tokens, and never multiply them.
    """
    chunks = len(rec.itl) + 1 if rec.t_first is not None else 0
    o = rec.output_tokens
    why = []
    if o is not None:
        if rec.expected_output_tokens and o > rec.expected_output_tokens:
            why.append(f"completion_tokens {o} > max_tokens {rec.expected_output_tokens}")
        if o + 1 < chunks:
            why.append(f"completion_tokens {o} < {chunks} token chunks")
        if rec.finish_reason == "length" and rec.expected_output_tokens and o != rec.expected_output_tokens:
            why.append(f"finish_reason length but completion_tokens {o} != max_tokens {rec.expected_output_tokens}")
        bound = streamed_tokens_bound(rec, words)
        if chunks and o > bound:
            why.append(f"completion_tokens {o} > the {bound:.0f} the stream shows ({chunks} chunks, "
                       f"{words or 0} words): not used")
            rec.output_tokens = None
    p, want = rec.prompt_tokens, rec.expected_prompt_tokens
    if p is not None and want:
        if p < want:
            why.append(f"prompt_tokens {p} < {want} sent")
        elif token_ids and p > token_ids + 1:  # `token_ids` ids sent: the server adds a BOS at most
            why.append(f"prompt_tokens {p} > {token_ids} token ids sent (+1 for a BOS at most)")
        elif p > want + max(32, want // 4):  # room for a BOS and a chat template's estimate, no more
            why.append(f"prompt_tokens {p} >> {want} sent")
    if why:
        _flag(rec, "usage_mismatch")
        rec.detail = "; ".join(why)[:200]
    # Total: a figure usage did not give (null, absent) is a named flag, never a silent None.
    missing = [k for k, v in (("prompt_tokens", rec.prompt_tokens), ("completion_tokens", rec.output_tokens))
               if v is None]
    if missing and "usage_invalid" not in rec.flags and "usage_mismatch" not in rec.flags:
        _flag(rec, "usage_missing")
        rec.detail = (rec.detail + "; " if rec.detail else "") + f"usage without {', '.join(missing)}"


def out_of_fds(e: BaseException) -> str | None:
    """The client ran out of file descriptors (EMFILE/ENFILE) somewhere in `e`'s chain."""
    seen = 0
    x: BaseException | None = e
    while x is not None and seen < 8:
        for cand in (x, getattr(x, "os_error", None)):
            if isinstance(cand, OSError) and cand.errno in (errno.EMFILE, errno.ENFILE):
                soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
                return f"the client is out of file descriptors (ulimit -n {soft}): raise it; not the server's failure"
        x = x.__cause__ or x.__context__
        seen += 1
    return None
