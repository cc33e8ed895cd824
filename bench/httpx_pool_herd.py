"""Why kvtui gives each closed-loop slot its own httpx client (kvtui/runtime/load/generator.py, _Worker.slot).

N slots stream from bench/fast_sse_server.py, 3 requests each, starts staggered over 0.25 s,
through (a) one shared httpx pool, as kvtui did before, and (b) one client per slot. When many
streams end together, httpcore assigns every queued request to the same idle connection; all but
one get ConnectionNotAvailable and go round again. Prints, per request round, the time from
`client.stream()` to the response headers, and how many such retries happened.

    python bench/httpx_pool_herd.py [--conc 64] [--chunks 128]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import httpcore._async.http11 as h11conn
import httpx
from httpcore._exceptions import ConnectionNotAvailable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.loadgen_capacity import start_server  # noqa: E402

RETRIES = {"n": 0}
_orig = h11conn.AsyncHTTP11Connection.handle_async_request


async def _counting(self, request):
    try:
        return await _orig(self, request)
    except ConnectionNotAvailable:
        RETRIES["n"] += 1
        raise


h11conn.AsyncHTTP11Connection.handle_async_request = _counting


async def run(url: str, conc: int, shared: bool) -> dict[int, list[float]]:
    body = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 128, "stream": True, "stream_options": {"include_usage": True}}
    lim = httpx.Limits(max_connections=conc + 16, max_keepalive_connections=conc + 16)
    pool = httpx.AsyncClient(limits=lim, trust_env=False, timeout=120) if shared else None
    rounds: dict[int, list[float]] = {0: [], 1: [], 2: []}

    async def slot(i: int) -> None:
        client = pool or httpx.AsyncClient(limits=httpx.Limits(max_connections=2), trust_env=False, timeout=120)
        await asyncio.sleep(0.25 * i / conc)
        for k in range(3):
            t0 = time.monotonic()
            async with client.stream("POST", url, json=body) as resp:
                rounds[k].append(time.monotonic() - t0)
                async for _ in resp.aiter_raw():
                    await asyncio.sleep(0)
        if pool is None:
            await client.aclose()

    await asyncio.gather(*[slot(i) for i in range(conc)])
    if pool is not None:
        await pool.aclose()
    return rounds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conc", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=128)
    a = ap.parse_args()
    srv, base = start_server(a.chunks, 1)
    try:
        print(f"{a.conc} slots × 3 requests, {a.chunks} chunks each, burst server · {os.cpu_count()} CPUs · httpx {httpx.__version__}")
        print("| pool | round | headers p50 ms | headers max ms | ConnectionNotAvailable retries |")
        print("|---|---|---|---|---|")
        for shared in (True, False, True, False):
            RETRIES["n"] = 0
            rounds = asyncio.run(run(base + "/v1/completions", a.conc, shared))
            for k, v in rounds.items():
                v.sort()
                print(f"| {'one shared' if shared else 'one per slot'} | {k} | {v[len(v) // 2] * 1000:,.0f} | {v[-1] * 1000:,.0f} | "
                      f"{RETRIES['n'] if k == 0 else ''} |")
    finally:
        os.killpg(srv.pid, 9)


if __name__ == "__main__":
    main()
