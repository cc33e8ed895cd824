"""How fast kvtui's load generator can ingest streams, and its own dispatch delay.

Against bench/fast_sse_server.py (raw asyncio, as fast as Python streams), for several
concurrencies and worker-process counts, one closed-loop step each:
    chunks/s ingested, requests/s, dispatch delay p50/p95, event-loop lag p99, client CPU share.

    python bench/loadgen_capacity.py [--conc 16,64,256] [--procs 1,2] [--chunks 256] [--server-workers 1]

Prints a Markdown table (docs/BENCHMARKS.md keeps the figures with the machine).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvtui.engines.procs import free_port  # noqa: E402
from kvtui.load.generator import LoadGenerator, WorkerConfig  # noqa: E402
from kvtui.load.workload import TokenSpace  # noqa: E402
from kvtui.scenario.schema import Length, Workload  # noqa: E402


def start_server(chunks: int, workers: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    p = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fast_sse_server.py"), "--port", str(port), "--chunks", str(chunks),
                          "--workers", str(workers)], start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            if httpx.get(base + "/health", trust_env=False).status_code == 200:
                return p, base
        except httpx.HTTPError:
            time.sleep(0.05)
    raise SystemExit("fast server did not start")


def measure(base: str, conc: int, procs: int, chunks: int, window_s: float) -> dict:
    w = Workload(prompt_tokens=Length(value=16), output_tokens=Length(value=chunks), jitter=0.0)
    cfg = WorkerConfig(base_url=base, model="m", headers={}, workload=dataclasses.asdict(w),
                       space=dataclasses.asdict(TokenSpace.synthetic()), max_model_len=1 << 20, salt=1, seed=0,
                       request_timeout_s=120)
    with LoadGenerator(cfg, procs) as lg:
        run = lg.run_step("bench", 0, conc, True, warmup_s=1.0, window_s=window_s)
    win = [r for r in run.records if r.counted and r.ok]
    dur = run.t_window_end - run.t_window_start
    chunks_in = sum(1 for r in run.records for t in r.token_times() if run.t_window_start <= t <= run.t_window_end)
    done = sum(1 for r in run.records if r.ok and r.t_last and run.t_window_start <= r.t_last <= run.t_window_end)
    st = run.stats
    return {
        "conc": conc, "procs": procs, "chunks_per_s": chunks_in / dur, "req_per_s": done / dur, "requests": len(win),
        "errors": sum(1 for r in run.records if not r.ok and r.error != "cancelled"),
        "dispatch_p50_ms": st.dispatch_ms_p50, "dispatch_p95_ms": st.dispatch_ms_p95, "lag_p99_ms": st.loop_lag_ms_p99,
        "cpu_share": st.cpu_share,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conc", default="16,64,256")
    ap.add_argument("--procs", default="1,2")
    ap.add_argument("--chunks", type=int, default=256)
    ap.add_argument("--window", type=float, default=5.0)
    ap.add_argument("--server-workers", type=int, default=1)
    a = ap.parse_args()
    srv, base = start_server(a.chunks, a.server_workers)
    try:
        rows = [measure(base, c, p, a.chunks, a.window) for p in map(int, a.procs.split(",")) for c in map(int, a.conc.split(","))]
    finally:
        os.killpg(srv.pid, 9)
    print(f"machine: {platform.node()} · {os.cpu_count()} CPUs · Python {platform.python_version()} · "
          f"server: bench/fast_sse_server.py ×{a.server_workers} · {a.chunks} chunks/request")
    print("| concurrency | client processes | chunks/s | requests/s | errors | dispatch p50 ms | dispatch p95 ms | loop lag p99 ms | client CPU share |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['conc']} | {r['procs']} | {r['chunks_per_s']:,.0f} | {r['req_per_s']:,.1f} | {r['errors']} | {r['dispatch_p50_ms']:.2f} | "
              f"{r['dispatch_p95_ms']:.2f} | {r['lag_p99_ms']:.1f} | {r['cpu_share']:.0%} |")


if __name__ == "__main__":
    main()
