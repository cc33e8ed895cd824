"""A minimal OpenAI-style streaming server on raw asyncio: as fast as Python can stream.

Used by the client benchmarks so that the server is not the limit: every request gets
`--chunks` token chunks (1 token each) as fast as possible, or `--gap-ms` apart, then a
usage chunk and [DONE]. HTTP/1.1 keep-alive, chunked transfer encoding, no framework.

    python bench/fast_sse_server.py --port 8123 --chunks 256 [--gap-ms 0 | --step-ms 20] [--workers 1]

With --workers N it forks N processes sharing the listening socket (SO_REUSEPORT).
--step-ms S paces the streams like an inference engine: one timer, and every S ms each
active stream gets one token chunk (what vLLM's decode steps send: one event per stream
per step, so a client read carries one event, not hundreds as in the burst mode).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket

CHUNK = b'data: {"id":"x","object":"text_completion","choices":[{"index":0,"text":" t1","finish_reason":null}]}\n\n'
CHAT_ROLE = b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
CHAT_CHUNK = b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" t1"},"finish_reason":null}]}\n\n'
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"


def frame(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Stepper:
    """One engine-like clock for every stream: each tick writes one chunk to each active stream."""

    def __init__(self, step_s: float):
        self.step_s = step_s
        self.active: list[list] = []  # [writer, remaining, chunk bytes, future]
        self.task: asyncio.Task | None = None

    def add(self, writer: asyncio.StreamWriter, n: int, chunk: bytes) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self.active.append([writer, n, chunk, fut])
        if self.task is None:
            self.task = asyncio.create_task(self.run())
        return fut

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        t = loop.time()
        while True:
            t += self.step_s
            await asyncio.sleep(max(0.0, t - loop.time()))
            keep = []
            for item in self.active:
                w, n, c, fut = item
                if w.is_closing():
                    if not fut.done():
                        fut.set_result(False)
                    continue
                w.write(c)
                item[1] = n - 1
                if item[1] <= 0:
                    fut.set_result(True)
                else:
                    keep.append(item)
            self.active = keep


STEPPER: Stepper | None = None


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, chunks: int, gap: float) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            method, path = lines[0].split(b" ")[:2]
            length = 0
            for ln in lines[1:]:
                if ln.lower().startswith(b"content-length:"):
                    length = int(ln.split(b":")[1])
            body = await reader.readexactly(length) if length else b""
            if method == b"GET":
                payload = b'{"version":"fast-sse"}' if path == b"/version" else b"ok"
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: keep-alive\r\n\r\n%s" % (len(payload), payload))
                await writer.drain()
                continue
            if path == b"/detokenize" or path.startswith(b"/v1/embeddings"):
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: keep-alive\r\n\r\n")
                await writer.drain()
                continue
            if path == b"/tokenize":
                req = json.loads(body or b"{}")
                words = (req.get("prompt") or "").split()
                ids = [int(w[1:]) if w[1:].isdigit() else 1 for w in words]
                payload = json.dumps({"count": len(ids), "tokens": ids, "max_model_len": 1 << 20}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(payload), payload))
                await writer.drain()
                continue
            req = json.loads(body or b"{}")
            n = int(req.get("max_tokens") or chunks)
            chat = b"chat" in path
            prompt = req.get("prompt") if not chat else None
            p_tokens = len(prompt) if isinstance(prompt, list) else 1
            writer.write(HEAD)
            if chat:
                writer.write(frame(CHAT_ROLE))
            c = frame(CHAT_CHUNK if chat else CHUNK)
            if STEPPER is not None:
                if not await STEPPER.add(writer, n, c):
                    break
                n_left = 0
            else:
                n_left = n
            for i in range(n_left):
                writer.write(c)
                if gap:
                    await writer.drain()
                    await asyncio.sleep(gap)
                elif i % 16 == 15:
                    await writer.drain()
            usage = json.dumps({"id": "x", "choices": [], "usage": {"prompt_tokens": p_tokens, "completion_tokens": n, "total_tokens": p_tokens + n}}).encode()
            writer.write(frame(b"data: " + usage + b"\n\n"))
            writer.write(frame(b"data: [DONE]\n\n"))
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def serve(sock: socket.socket, chunks: int, gap: float) -> None:
    server = await asyncio.start_server(lambda r, w: handle(r, w, chunks, gap), sock=sock)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--chunks", type=int, default=256)
    ap.add_argument("--gap-ms", type=float, default=0.0)
    ap.add_argument("--step-ms", type=float, default=0.0)
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    global STEPPER
    if a.step_ms > 0:
        STEPPER = Stepper(a.step_ms / 1000)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", a.port))
    sock.listen(4096)
    for _ in range(a.workers - 1):
        if os.fork() == 0:
            break
    asyncio.run(serve(sock, a.chunks, a.gap_ms / 1000))


if __name__ == "__main__":
    main()
