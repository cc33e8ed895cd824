"""A hostile OpenAI-compatible server: it echoes the client's Authorization header back.

    python echo_server.py HOST PORT [slow-tokenize]

/v1/completions: request n % 3 == 0 answers HTTP 500 with the header in the body; n % 3 == 1
streams an SSE `error` event quoting it; the rest stream a normal answer with usage.
/metrics answers a small vLLM exposition. /_seen tells which Authorization headers each
route received (the test checks what reached a metrics_url on another host).
"""

from __future__ import annotations

import json
import sys

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

SEEN: dict[str, list[str]] = {}
STATE = {"n": 0}


def _seen(route: str, request: Request) -> str:
    hdr = request.headers.get("authorization", "")
    SEEN.setdefault(route, []).append(hdr)
    return hdr


async def completions(request: Request):
    hdr = _seen("completions", request)
    n = STATE["n"]
    STATE["n"] += 1
    if n % 3 == 0:
        return PlainTextResponse(f"Internal Server Error: request had Authorization: {hdr}", status_code=500)

    async def stream():
        if n % 3 == 1:
            yield f"data: {json.dumps({'error': {'message': f'upstream rejected Authorization: {hdr}', 'code': 500}})}\n\n"
            yield "data: [DONE]\n\n"
            return
        for i in range(4):
            yield f"data: {json.dumps({'choices': [{'index': 0, 'text': ' t1'}]})}\n\n"
        yield f"data: {json.dumps({'choices': [], 'usage': {'prompt_tokens': 16, 'completion_tokens': 4}})}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream")


async def metrics(request: Request):
    _seen("metrics", request)
    return PlainTextResponse('vllm:num_requests_running{model_name="echo"} 0.0\nvllm:num_requests_waiting{model_name="echo"} 0.0\n')


async def models(request: Request):
    _seen("models", request)
    return JSONResponse({"object": "list", "data": [{"id": "echo", "object": "model", "max_model_len": 4096}]})


async def tokenize(request: Request):
    """slow-tokenize: 3 s per probe, and ids that are not the tN vocabulary (discovery probes hundreds)."""
    import asyncio

    if not SLOW:
        return JSONResponse({"detail": "Not Found"}, status_code=404)
    body = await request.json()
    await asyncio.sleep(3)
    words = str(body.get("prompt") or "x").split()
    return JSONResponse({"tokens": [1000 + i for i in range(len(words))], "count": len(words)})


SLOW = "slow-tokenize" in sys.argv[3:]

app = Starlette(routes=[
    Route("/tokenize", tokenize, methods=["POST"]),
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/metrics", metrics),
    Route("/v1/models", models),
    Route("/health", lambda r: PlainTextResponse("")),
    Route("/_seen", lambda r: JSONResponse(SEEN)),
])

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host=sys.argv[1], port=int(sys.argv[2]), log_level="warning")
