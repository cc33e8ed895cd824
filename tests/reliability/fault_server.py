"""A real OpenAI-compatible streaming server that misbehaves on a schedule (run-level faults).

    python fault_server.py PORT [--metrics vllm|garbage|binary|missing|html] [--http STATUS:FROM:TO]
                                [--every KIND:N]... [--tokens N] [--gap-ms MS]

Requests to /v1/completions are numbered from 0 in arrival order; the schedule picks each
one's answer:
- `--http 503:20:60`: requests 20 … 59 get HTTP 503 (a 5xx or 429 burst);
- `--every malformed:5`: every 5th request (n % 5 == 4) streams a `data:` line that is not JSON;
  kinds: malformed, truncated (ends without [DONE] or usage), reset (the connection breaks
  off mid-stream), hang (one token, then nothing for an hour);
- otherwise a well-formed stream of --tokens chunks --gap-ms apart, usage, [DONE].

`POST /_answer` (JSON) sets a *wrong answer* for every later request (tests/reliability/
test_untrusted_numbers.py draws them with hypothesis): the server always generates exactly
max_tokens tokens with finish_reason "length" (ignore_eos), and then may lie about them —
    usage_out / usage_prompt: {"times": m} {"minus": k} {"plus": k} {"value": any JSON}
    usage: any JSON in place of the usage object;  choices: any JSON in place of a token chunk's choices
    streamed: stream only this many of the tokens (usage still tells max_tokens unless lied about);
    finish: the last chunk's finish_reason ("length" unless set; null: none);
    per_chunk: tokens per chunk (honest bundling);  crlf: CRLF line ends;  split: write events
    in pieces of this many bytes;  bad_utf8: invalid UTF-8 in a data line;  oversize: pad one
    event to this many bytes;  gap_ms: between chunks.
`--max-model-len N` and `--models-data JSON` set what /v1/models says.
`--trickle ROUTE:GAP_S[:AFTER]` (repeatable): after AFTER whole answers (default 0), ROUTE (/health,
/v1/models, /version, /metrics, /tokenize) answers 200 at once and then one byte of its body every
GAP_S seconds, for an hour: a server no idle timeout ever cuts off.

`/metrics` answers what --metrics says: a small vLLM-shaped exposition whose running gauge is
the number of open streams, garbage text, random bytes, a 404, or an HTML page.
`/_stats` (JSON) counts the answers given by kind, so a test can check that kvtui recorded
every one of them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

ARGS: argparse.Namespace
STATE = {"n": 0, "open": 0, "prompt_tokens": 0, "generation_tokens": 0, "answers": {}}


def _count(kind: str) -> None:
    STATE["answers"][kind] = STATE["answers"].get(kind, 0) + 1


def _chunk(text: str, finish: str | None = None) -> str:
    return "data: " + json.dumps({"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}) + "\n\n"


def _usage(prompt: int, out: int) -> str:
    return "data: " + json.dumps({"id": "x", "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": out,
                                                                        "total_tokens": prompt + out}}) + "\n\n"


def _kind(n: int) -> str:
    if ARGS.http:
        status, lo, hi = ARGS.http
        if lo <= n < hi:
            return f"http_{status}"
    for kind, every in ARGS.every:
        if n % every == every - 1:
            return kind
    return "ok"


async def _stream(kind: str, prompt: int, max_tokens: int):
    STATE["open"] += 1
    try:
        gap = ARGS.gap_ms / 1000
        n = min(max_tokens, ARGS.tokens)
        for i in range(n):
            await asyncio.sleep(gap)
            if kind == "malformed" and i == 1:
                yield "data: {\"choices\": [ {not json\n\n"
                return
            if kind == "reset" and i == 1:
                raise ConnectionResetError("fault server: connection broken off mid-stream")
            yield _chunk(f" t{i}", "length" if i == n - 1 else None)
            STATE["generation_tokens"] += 1
            if kind == "hang":
                await asyncio.sleep(3600)
        if kind == "truncated":
            return
        STATE["prompt_tokens"] += prompt
        yield _usage(prompt, n)
        yield "data: [DONE]\n\n"
    finally:
        STATE["open"] -= 1


def _lie(spec, truth: int):
    if spec is None:
        return truth
    if "value" in spec:
        return spec["value"]
    if "times" in spec:
        return truth * spec["times"]
    if "minus" in spec:
        return truth - spec["minus"]
    if "plus" in spec:
        return truth + spec["plus"]
    return truth


async def _answer_stream(a: dict, prompt: int, max_tokens: int):
    """A stream of exactly max_tokens tokens, told as the answer spec `a` says; `raw`: these
    event payloads as they are (each sent as `data: PAYLOAD`), then [DONE]."""
    nl = "\r\n" if a.get("crlf") else "\n"
    if "raw" in a:
        for payload in a["raw"]:
            yield ("data: " + payload + nl + nl).encode()
        yield ("data: [DONE]" + nl + nl).encode()
        return
    per = max(1, int(a.get("per_chunk", 1)))
    gap = float(a.get("gap_ms", 0.0)) / 1000
    events: list[bytes] = []
    done = 0
    shown = max(1, min(max_tokens, int(a.get("streamed", max_tokens))))
    while done < shown:
        k = min(per, shown - done)
        done += k
        finish = a.get("finish", "length") if done == shown else None
        choices = a["choices"] if "choices" in a else [{"index": 0, "text": " t" * k, "finish_reason": finish}]
        events.append(("data: " + json.dumps({"id": "x", "choices": choices}) + nl + nl).encode())
    if a.get("bad_utf8") and events:
        events[0] = b'data: {"id": "x", "choices": [{"index": 0, "text": "\xff\xfe"}]}' + (nl + nl).encode()
    if a.get("oversize") and events:
        pad = "x" * int(a["oversize"])
        events[0] = ("data: " + json.dumps({"id": "x", "choices": [{"index": 0, "text": pad}]}) + nl + nl).encode()
    usage = a["usage"] if "usage" in a else {"prompt_tokens": _lie(a.get("usage_prompt"), prompt),
                                              "completion_tokens": _lie(a.get("usage_out"), max_tokens)}
    events.append(("data: " + json.dumps({"id": "x", "choices": [], "usage": usage}) + nl + nl).encode())
    events.append(("data: [DONE]" + nl + nl).encode())
    split = int(a.get("split", 0))
    for ev in events:
        if gap:
            await asyncio.sleep(gap)
        if split:
            for i in range(0, len(ev), split):
                yield ev[i:i + split]
                await asyncio.sleep(0)
        else:
            yield ev


async def set_answer(request: Request):
    STATE["answer"] = await request.json()
    return JSONResponse({"ok": True})


async def completions(request: Request):
    body = await request.json()
    if STATE.get("answer") is not None:
        prompt = body.get("prompt")
        plen = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        STATE["n"] += 1
        return StreamingResponse(_answer_stream(STATE["answer"], plen, int(body.get("max_tokens") or 16)),
                                 media_type="text/event-stream")
    n = STATE["n"]
    STATE["n"] += 1
    kind = _kind(n)
    _count(kind)
    if kind.startswith("http_"):
        status = int(kind[5:])
        return JSONResponse({"error": {"message": f"fault server: HTTP {status} for request {n}"}}, status_code=status)
    prompt = body.get("prompt")
    plen = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
    return StreamingResponse(_stream(kind, plen, int(body.get("max_tokens") or 16)), media_type="text/event-stream")


METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="fault"}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{model_name="fault"}} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{model_name="fault"}} {kv}
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{{model_name="fault"}} {prompt}
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{{model_name="fault"}} {gen}
"""


async def metrics(request: Request):
    trickle = _trickle("/metrics")
    if trickle is not None:
        return trickle
    _count("metrics_" + ARGS.metrics)
    kind = ARGS.metrics
    if kind == "vllm":
        return PlainTextResponse(METRICS.format(running=float(STATE["open"]), kv=min(1.0, STATE["open"] / 100),
                                                prompt=float(STATE["prompt_tokens"]), gen=float(STATE["generation_tokens"])))
    if kind == "garbage":
        return PlainTextResponse("vllm:num_requests_running{model_name=\"fault\" 12 34 }}}\nvllm:kv_cache_usage_perc NaNNaN\n"
                                 "vllm:generation_tokens_total{le=} x\n")
    if kind == "binary":
        return Response(os.urandom(512), media_type="text/plain")
    if kind == "html":
        return Response("<html><body>502 Bad Gateway</body></html>", media_type="text/html")
    return JSONResponse({"detail": "Not Found"}, status_code=404)


def _trickle(path: str) -> Response | None:
    """A 200 whose body comes one byte every GAP_S seconds (`--trickle`), or None."""
    for route, gap, after in ARGS.trickle:
        if route == path:
            seen = STATE.setdefault("trickle_seen", {})
            seen[route] = seen.get(route, 0) + 1
            if seen[route] <= after:
                return None
            _count("trickle" + route)

            async def drip():
                for _ in range(int(3600 / gap)):
                    yield b" "
                    await asyncio.sleep(gap)

            return StreamingResponse(drip(), media_type="application/json")
    return None


def _raw(path: str) -> Response | None:
    """The body `--raw PATH=TEXT` gives this route, as it is (HTTP 200), or None."""
    for item in ARGS.raw:
        route, _, text = item.partition("=")
        if route == path:
            if text.startswith("@"):  # a body too long for a command line: from a file
                text = Path(text[1:]).read_text()
            return Response(text, media_type="application/json")
    return None


async def tokenize(request: Request):
    return _trickle("/tokenize") or _raw("/tokenize") or JSONResponse({"detail": "Not Found"}, status_code=404)


async def version(request: Request):
    return _trickle("/version") or _raw("/version") or JSONResponse({"version": "fault-server"})


async def models(request: Request):
    raw = _trickle("/v1/models") or _raw("/v1/models")
    if raw is not None:
        return raw
    if ARGS.models_data is not None:
        return JSONResponse({"object": "list", "data": json.loads(ARGS.models_data)})
    return JSONResponse({"object": "list", "data": [{"id": "fault", "object": "model", "max_model_len": ARGS.max_model_len}]})


async def stats(request: Request):
    return JSONResponse({"requests": STATE["n"], "open": STATE["open"], "answers": STATE["answers"]})


app = Starlette(routes=[
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/metrics", metrics),
    Route("/v1/models", models),
    Route("/version", version),
    Route("/tokenize", tokenize, methods=["POST"]),
    Route("/health", lambda r: _trickle("/health") or Response(status_code=200)),
    Route("/_stats", stats),
    Route("/_answer", set_answer, methods=["POST"]),
])


def _http(text: str) -> tuple[int, int, int]:
    status, lo, hi = (int(x) for x in text.split(":"))
    return status, lo, hi


def _trickle_arg(text: str) -> tuple[str, float, int]:
    route, gap, *after = text.split(":")
    return route, float(gap), int(after[0]) if after else 0


def _every(text: str) -> tuple[str, int]:
    kind, n = text.split(":")
    assert kind in ("malformed", "truncated", "reset", "hang"), kind
    return kind, int(n)


if __name__ == "__main__":
    import uvicorn

    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--metrics", default="vllm", choices=["vllm", "garbage", "binary", "missing", "html"])
    ap.add_argument("--http", type=_http)
    ap.add_argument("--every", type=_every, action="append", default=[])
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--gap-ms", type=float, default=5.0)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--models-data", help="JSON for /v1/models' data (a malformed one, say)")
    ap.add_argument("--trickle", type=_trickle_arg, action="append", default=[], metavar="ROUTE:GAP_S[:AFTER]")
    ap.add_argument("--answer", help="JSON answer spec from the start (as POST /_answer)")
    ap.add_argument("--raw", action="append", default=[], metavar="PATH=TEXT",
                    help="answer GET/POST PATH (/version, /v1/models, /tokenize) with TEXT as it is (@FILE: its text)")
    ARGS = ap.parse_args()
    if ARGS.answer:
        STATE["answer"] = json.loads(ARGS.answer)
    print(f"fault server on 127.0.0.1:{ARGS.port}", file=sys.stderr, flush=True)
    uvicorn.run(app, host="127.0.0.1", port=ARGS.port, log_level="warning")
