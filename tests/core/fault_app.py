"""A real HTTP server that misbehaves on demand (the model name picks the fault).

Run: python fault_app.py PORT. Used where the simulator cannot be made to fail this way.
"""

import asyncio
import json
import sys

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


def chunk(text=" t1", finish=None, chat=False):
    if chat:
        c = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    else:
        c = {"index": 0, "text": text, "finish_reason": finish}
    return "data: " + json.dumps({"id": "x", "choices": [c]}) + "\n\n"


USAGE = "data: " + json.dumps({"id": "x", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}) + "\n\n"


async def gen(fault: str, chat: bool):
    if chat:
        yield "data: " + json.dumps({"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}) + "\n\n"
        await asyncio.sleep(0.05)  # the role chunk must not count as the first token
    if fault == "malformed":
        yield chunk()
        yield "data: {not json\n\n"
        return
    if fault == "error-in-stream":
        yield chunk()
        yield "data: " + json.dumps({"error": {"message": "engine overloaded", "code": 500}}) + "\n\n"
        return
    if fault == "hang":
        yield chunk()
        await asyncio.sleep(3600)
    for i in range(4):
        await asyncio.sleep(0.01)
        # dummy weights give empty text: the chunk still carries a token
        yield chunk("" if i == 1 else f" t{i}", "length" if i == 3 else None, chat)
    if fault == "truncated":
        return
    if fault != "no-usage":
        yield USAGE
    yield "data: [DONE]\n\n"


async def completions(request: Request):
    body = await request.json()
    fault = body.get("model", "ok")
    if fault == "http-500":
        return JSONResponse({"error": "boom"}, status_code=500)
    if fault == "http-429":
        return JSONResponse({"error": "slow down"}, status_code=429)
    if fault == "http-400":
        return JSONResponse({"error": "bad"}, status_code=400)
    if fault == "http-204":
        return Response(status_code=204)
    if fault.startswith("redirect-"):  # to another origin (127.0.0.2): a client that follows measures it
        return Response(status_code=int(fault[9:]), headers={"Location": "http://127.0.0.2:9/v1/completions"})
    if fault == "big-headers":
        return Response("x", headers={"X-Padding": "a" * 20000})
    if fault == "buffered":  # a buffering proxy: the whole stream held, then sent in one piece
        body = "".join([chunk(f" t{i}", "length" if i == 5 else None, "messages" in body) for i in range(6)])
        usage = USAGE.replace('"completion_tokens": 4', '"completion_tokens": 6').replace('"total_tokens": 7',
                                                                                          '"total_tokens": 9')
        await asyncio.sleep(0.2)
        return Response(body + usage + "data: [DONE]\n\n", media_type="text/event-stream")
    return StreamingResponse(gen(fault, "messages" in body), media_type="text/event-stream")


app = Starlette(routes=[
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/v1/chat/completions", completions, methods=["POST"]),
    Route("/health", lambda r: Response(status_code=200)),
])

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
