"""Where does kvtui's client lose time against vLLM's own histograms? (docs/BENCHMARKS.md §3)

One real vLLM (CPU build, tiny Llama), closed loop at --conc, the same prompts each way; for
each variant the client's means against the server's TTFT/TPOT/E2E histogram means over the
same requests:
  worker      kvtui's LoadGenerator (a worker process, records over a pipe): what `kvtui run` does
  inproc      kvtui's own `stream_request` (same client code, one StreamClient per slot), run
              in this process's event loop, no worker, no pipe
  inproc-text the same with text prompts ("tN" words) instead of token ids
(Until kvtui's client moved to aiohttp, an "aiohttp" variant ran kvtui's SSE parser over an
aiohttp session beside the httpx one; that is what `inproc` runs now. Its rows in
bench/results/client_probe_aiohttp.md came from commit 9864d71 (kvtui still on httpx there).)

    python bench/client_probe.py [--conc 8] [--requests 120] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.agreement_vllm import client_means, scrape, server_delta, wait_idle  # noqa: E402
from bench.peers import from_kvtui  # noqa: E402
from kvtui.runtime.load.client import StreamClient, stream_request  # noqa: E402
from kvtui.runtime.load.generator import LoadGenerator, StepParams, WorkerConfig  # noqa: E402
from kvtui.core.record import Record  # noqa: E402
from kvtui.runtime.load.workload import PromptFactory, discover_token_space, request_body  # noqa: E402
from kvtui.io.scenario import load_scenario  # noqa: E402
from kvtui.io.scenario.schema import Length, Workload  # noqa: E402


async def inproc(ep, workload, space, max_len, conc, n, salt, text: bool) -> list[Record]:
    factory = PromptFactory(workload, space, max_len, salt, workload.seed)
    url = ep.base_url + "/v1/completions"
    out: list[Record] = []
    counter = iter(range(10**9))

    async def slot() -> None:
        client = StreamClient(600, ep.headers())
        try:
            while len(out) < n:
                k = next(counter)
                p = factory.build(k)
                if text:
                    p = dataclasses.replace(p, ids=None, text=" ".join(f"t{i}" for i in p.ids))
                rec = Record(id=f"{salt}-{k}", mode="probe", step=0, load=conc, phase="window",
                             t_intended=time.monotonic(), t_sent=0.0)
                await stream_request(client, url, request_body(p, ep.model, workload), rec, 600)
                rec.t_intended = rec.t_sent
                out.append(rec)
        finally:
            await client.aclose()

    await asyncio.gather(*(slot() for _ in range(conc)))
    return out


def worker(ep, workload, space, max_len, conc, n, salt) -> list[Record]:
    cfg = WorkerConfig(base_url=ep.base_url, model=ep.model, headers=ep.headers(), workload=dataclasses.asdict(workload),
                       space=dataclasses.asdict(space), max_model_len=max_len, salt=salt, seed=workload.seed,
                       request_timeout_s=600)
    with LoadGenerator(cfg, 1) as lg:
        run = lg.run_step(StepParams("probe", 0, conc, True, warmup_s=0.0, window_s=0.0, window_requests=n))
    st = run.stats.to_dict()
    print(f"  (worker: loop lag p99 {st['loop_lag_ms_p99']:.0f} ms, max {st['loop_lag_ms_max']:.0f} ms, "
          f"CPU share {st['cpu_share']:.2f}, wall {st['wall_s']:.1f} s, run-queue wait {st['runq_wait_s'] or 0:.2f} s)", file=sys.stderr, flush=True)
    return run.records  # the cancelled tail too: the server counts their first tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conc", type=int, default=8)
    ap.add_argument("--requests", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", default="worker,inproc,inproc-text")
    a = ap.parse_args()
    from kvtui.runtime.engines.vllm.launcher import VllmEngine

    sc = load_scenario(ROOT / "kvtui" / "data" / "scenarios" / "vllm-cpu-tiny.toml")
    sc.server.kv_cache_memory_bytes = 400_000_000
    workload = Workload(prompt_tokens=Length(value=256), output_tokens=Length(value=64), jitter=0.1, seed=7)
    eng = VllmEngine()
    ep = eng.start(sc, sc.modes[0], lambda line: None)
    try:
        headers = ep.headers()
        space = discover_token_space(ep.base_url, ep.model, headers)
        max_len = ep.max_model_len or sc.server.max_model_len
        print("| round | variant | requests | TTFT client / server ms | TPOT client / server ms | E2E client / server ms |")
        print("|---|---|---|---|---|---|")
        salt = 1000
        for rnd in range(a.rounds):
            for v in a.variants.split(","):
                salt += 1
                wait_idle(ep.base_url, headers)
                before = scrape(ep.base_url, headers)
                if v == "worker":
                    recs = worker(ep, workload, space, max_len, a.conc, a.requests, salt)
                else:
                    recs = asyncio.run(inproc(ep, workload, space, max_len, a.conc, a.requests, salt, v == "inproc-text"))
                wait_idle(ep.base_url, headers)
                srv = server_delta(before, scrape(ep.base_url, headers))
                cli = client_means(from_kvtui(recs))

                def f(k):
                    c, s = cli[k]["mean"], srv[k]["mean"]
                    if c is None or s is None:
                        return "—"
                    return f"{c * 1000:.2f} / {s * 1000:.2f} ({(c / s - 1) * 100:+.0f} %)"

                print(f"| {rnd} | {v} | {len(recs)} | {f('ttft')} | {f('tpot')} | {f('e2e')} |", flush=True)
    finally:
        eng.stop()


if __name__ == "__main__":
    main()
