"""kvtui and `vllm bench serve` against one real vLLM at the same time (issue 7, item 3).

Run one after the other (bench/agreement_vllm.py), the two clients meet a server whose own
speed drifts by up to ±20 % between runs on a small shared box: the server's TPOT mean moved
from 5.2 to 7.2 ms between back-to-back runs, so the clients' ratio measured that drift, not the
clients. Here both run at once, each with half the concurrency, on the same kind of prompts
("tN"-word text written by kvtui's PromptFactory, different salts, so no shared prefix): every
request of either tool meets the same engine steps. Each tool scored by the same functions over
its steady requests (the first and last `conc` by start dropped). kvtui's step is flagged by its
own client-limited rule (loop lag, run-queue wait), reported beside the figures.

    python bench/agreement_together.py [--conc 4] [--requests 200] [--rounds 3] [--out bench/results/agreement_together.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import threading
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.agreement_vllm import add_server_args, dist, for_each_server_thread, run_kvtui, steady, vllm_prompts  # noqa: E402
from bench.peers import pct, vllm_bench  # noqa: E402
from kvtui.core.evaluate import client_limited  # noqa: E402
from kvtui.runtime.load.workload import discover_token_space  # noqa: E402
from kvtui.io.scenario import load_scenario  # noqa: E402
from kvtui.io.scenario.schema import Length, Workload  # noqa: E402

METRICS = ("ttft", "itl", "tpot", "e2e")


def main() -> None:
    ap = argparse.ArgumentParser()
    add_server_args(ap, conc=4, rounds=3, log="/tmp/kvtui-agreement-together.log")  # --conc: each tool's; the server sees twice
    ap.add_argument("--requests", type=int, default=200, help="vllm bench requests; kvtui's window is the same less 2*conc")
    ap.add_argument("--split-cpus", action="store_true",
                    help="pin every thread of the server to CPU 0 and this process (so both clients) to the others: "
                         "on a 2-core box the server otherwise takes both cores and both clients wait on the run queue")
    a = ap.parse_args()
    from kvtui.runtime.engines.vllm.launcher import VllmEngine

    sc = load_scenario(Path(a.scenario))
    sc.server.kv_cache_memory_bytes = a.kv_bytes
    mode = sc.modes[0]
    workload = Workload(prompt_tokens=Length(value=a.isl), output_tokens=Length(value=a.osl), jitter=0.1, seed=7)
    logf = open(a.log, "a")
    eng = VllmEngine()
    ep = eng.start(sc, mode, lambda line: (logf.write(line + "\n"), logf.flush()))
    os.environ["OPENAI_API_KEY"] = ep.api_key or ""
    if a.split_cpus:
        for_each_server_thread(eng, lambda tid: os.sched_setaffinity(tid, {0}))
        os.sched_setaffinity(0, set(range(1, os.cpu_count() or 2)))  # the kvtui worker and vllm bench inherit it
    rows: list[dict[str, Any]] = []
    try:
        headers = ep.headers()
        space = discover_token_space(ep.base_url, ep.model, headers)
        max_len = ep.max_model_len or sc.server.max_model_len
        version = httpx.get(ep.base_url + "/version", headers=headers, trust_env=False).json().get("version")
        for rnd in range(a.rounds):
            kv_data, vb_data = Path("/tmp/kvtui-together-kvtui.jsonl"), Path("/tmp/kvtui-together-vllm.jsonl")
            vllm_prompts(kv_data, workload, space, max_len, 0x70600000 + rnd * 16 + 2, 2 * a.requests)
            vllm_prompts(vb_data, workload, space, max_len, 0x70600000 + rnd * 16 + 1, a.requests)
            out: dict[str, Any] = {}

            def peer() -> None:
                try:
                    out["vllm"] = vllm_bench(ep.base_url, ep.model, str(ROOT / sc.server.model), a.conc, a.requests,
                                             dataset=str(vb_data), log=Path(a.log))
                except Exception as e:  # reported below; the kvtui side still finishes
                    out["vllm_error"] = repr(e)

            t = threading.Thread(target=peer)
            t.start()
            # vllm bench imports for a few seconds before its first request; kvtui's warm-up covers it.
            figures, kreqs, run = run_kvtui(ep, dataclasses.replace(workload, dataset=str(kv_data)), space, max_len,
                                            a.conc, a.requests - 2 * a.conc, 0x70600000 + rnd * 16 + 2)
            t.join()
            if "vllm" not in out:
                raise RuntimeError(out.get("vllm_error", "vllm bench did not run"))
            vreqs = out["vllm"].reqs
            client = run.stats.to_dict()
            ttft = figures["ttft"]
            row = {"round": rnd, "kvtui": figures, "vllm": dist(steady(vreqs, a.conc)), "client": client,
                   "client_limited": client_limited(client, ttft),
                   "span_s": {"kvtui": round(max(r.start for r in kreqs) - min(r.start for r in kreqs), 1),
                              "vllm": round(max(r.start for r in vreqs) - min(r.start for r in vreqs), 1)}}
            rows.append(row)
            print(f"round {rnd}: kvtui TPOT p50 {figures['tpot']['p50']} vllm {row['vllm']['tpot']['p50']} · "
                  f"client-limited {row['client_limited']} · spans {row['span_s']} s", file=sys.stderr, flush=True)
    finally:
        eng.stop()
        logf.close()
    machine = (f"{platform.node()} · {os.cpu_count()} CPUs · vLLM {version} (CPU build) · tiny 4-layer Llama · "
               f"ISL {a.isl} / OSL {a.osl} (±10 %) · each tool at concurrency {a.conc}, both at once · "
               f"{a.requests} requests each · {a.rounds} rounds"
               + (" · server pinned to CPU 0, clients to the rest" if a.split_cpus else ""))
    print(machine)
    print(report(rows))
    if a.out:
        Path(a.out).write_text(json.dumps({"machine": machine, "args": vars(a), "rows": rows}, indent=1, default=str))


def report(rows: list[dict]) -> str:
    out = ["| round | kvtui client-limited | " + " | ".join(f"{m.upper()} {p} kvtui / vllm" for m in METRICS for p in ("p50", "p95")) + " |",
           "|---|---|" + "---|" * 8]
    ratios: dict[str, list[float]] = {}
    for r in rows:
        cells = []
        for m in METRICS:
            for p in ("p50", "p95"):
                k, v = r["kvtui"][m][p], r["vllm"][m][p]
                if k and v:
                    ratios.setdefault(f"{m} {p}", []).append(k / v)
                    cells.append(f"{k:.2f} / {v:.2f} ({k / v:.3f})")
                else:
                    cells.append("—")
        c = r["client"]
        flag = f"{'yes' if r['client_limited'] else 'no'} (lag p99 {c['loop_lag_ms_p99']:.0f} ms, run-queue {c.get('runq_wait_s') or 0:.1f} of {c['wall_s']:.1f} s)"
        out.append(f"| {r['round']} | {flag} | " + " | ".join(cells) + " |")
    clean = [r for r in rows if not r["client_limited"]]
    out += ["", f"Median kvtui / vllm over the {len(clean)} round(s) kvtui did not flag client-limited:", ""]
    for key in ratios:
        m, p = key.split()
        xs = [r["kvtui"][m][p] / r["vllm"][m][p] for r in clean if r["kvtui"][m][p] and r["vllm"][m][p]]
        if xs:
            out.append(f"- {m.upper()} {p}: {pct(xs, 0.5):.3f} (range {min(xs):.3f}–{max(xs):.3f})")
    return "\n".join(out)


if __name__ == "__main__":
    main()
