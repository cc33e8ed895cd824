"""Does kvtui measure what vLLM's own client and vLLM's own /metrics measure? (issue 7, items 3 and 6)

One real vLLM (the CPU build, the tiny 4-layer Llama, launched by kvtui's VllmEngine exactly as
`kvtui run` launches it), then, interleaved round by round:
  kvtui      its load generator (worker process, closed loop at --conc), one step: warm-up,
             (--kvtui-prompts text, the default: the same "tN"-word text prompts as the peer, through
             a JSONL dataset, so the server does the same tokenizing work for both tools)
             a window of --window requests, the held tail (cancelled at the end, as in a ramp);
             figures from kvtui's own `evaluate_step` over the window's requests
  vllm       `vllm bench serve --max-concurrency conc` (semaphore, aiohttp) on the same prompts:
             PromptFactory's token-id prompts written as "tN" words, which the tiny tokenizer maps
             back to exactly those ids (no BOS), request k with the same lengths as kvtui's k.
             A different salt, so the two never share a prefix in the prefix cache.
             Figures over its steady requests (the first and last `conc` by start dropped: the
             lock-step start and the drain), and as vLLM prints them (all requests).
Against the server, for each tool's run (scrapes after drain, so the interval holds exactly
that run): means of vLLM's TTFT/ITL/TPOT/E2E histograms against the client's means over the same
requests, and tokens: vLLM observes `request_prompt_tokens`/`request_generation_tokens` only
for requests that finished (an aborted request — kvtui's cancelled tail — is not observed), so
client usage summed over its non-cancelled requests must equal the server's sums exactly.
Item 6: the prefix-cache hit rate over each run (≈ 0), and one more kvtui run with
`shared_prefix = 0.5` to show the rate moves when the scenario asks for it.

    python bench/agreement_vllm.py [--conc 8] [--isl 256] [--osl 64] [--window 96] [--rounds 2] [--out bench/results/agreement.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.peers import Req, from_kvtui, latency_summary, pct, vllm_bench  # noqa: E402
from kvtui.core.evaluate import StepContext, evaluate_step  # noqa: E402
from kvtui.runtime.load.generator import LoadGenerator, StepParams, WorkerConfig  # noqa: E402
from kvtui.runtime.load.workload import PromptFactory, discover_token_space  # noqa: E402
from kvtui.io.scenario import load_scenario  # noqa: E402
from kvtui.io.scenario.schema import Length, Slo, Workload  # noqa: E402

HIST = {"ttft": "vllm:time_to_first_token_seconds", "itl": "vllm:inter_token_latency_seconds",
        "tpot": "vllm:request_time_per_output_token_seconds", "e2e": "vllm:e2e_request_latency_seconds",
        "req_prompt": "vllm:request_prompt_tokens", "req_gen": "vllm:request_generation_tokens"}
COUNTERS = {"prompt_tokens": "vllm:prompt_tokens_total", "generation_tokens": "vllm:generation_tokens_total",
            "pc_queries": "vllm:prefix_cache_queries_total", "pc_hits": "vllm:prefix_cache_hits_total"}


def scrape(base: str, headers: dict[str, str]) -> dict[str, float]:
    """Sums/counts of the histograms and the counters we compare (summed over label sets)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(base + "/metrics", headers=headers, trust_env=False, timeout=10).text
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def wait_idle(base: str, headers: dict[str, str], timeout_s: float = 120) -> None:
    t = time.monotonic() + timeout_s
    while time.monotonic() < t:
        m = scrape(base, headers)
        if not m.get("vllm:num_requests_running") and not m.get("vllm:num_requests_waiting"):
            return
        time.sleep(0.25)


def server_delta(a: dict[str, float], b: dict[str, float]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for k, name in HIST.items():
        n = b.get(name + "_count", 0) - a.get(name + "_count", 0)
        s = b.get(name + "_sum", 0) - a.get(name + "_sum", 0)
        d[k] = {"count": n, "sum": s, "mean": (s / n) if n else None}
    for k, name in COUNTERS.items():
        d[k] = b.get(name, 0) - a.get(name, 0)
    d["prefix_cache_hit_rate"] = d["pc_hits"] / d["pc_queries"] if d["pc_queries"] else None
    return d


def client_means(reqs: list[Req]) -> dict[str, Any]:
    """Client means over the same request sets the server's histograms cover."""
    with_first = [r for r in reqs if r.ttft is not None]  # TTFT/ITL: observed per token, also for aborted requests
    ok = [r for r in reqs if r.ok]  # E2E/TPOT/token histograms: finished requests only
    gaps = [g for r in with_first for g in r.itl]
    tpots = [r.tpot for r in ok if r.tpot is not None]

    def m(xs):
        return sum(xs) / len(xs) if xs else None

    return {
        "ttft": {"count": len(with_first), "mean": m([r.ttft for r in with_first])},
        "itl": {"count": len(gaps), "mean": m(gaps)},
        "tpot": {"count": len(ok), "mean": m(tpots)},
        "e2e": {"count": len(ok), "mean": m([r.e2e for r in ok])},
        "req_prompt": {"count": len(ok), "sum": sum(r.prompt_tokens or 0 for r in ok)},
        "req_gen": {"count": len(ok), "sum": sum(r.output_tokens or 0 for r in ok)},
    }


def steady(reqs: list[Req], conc: int) -> list[Req]:
    by_start = sorted(reqs, key=lambda r: r.start)
    return by_start[conc:-conc] if len(by_start) > 3 * conc else by_start


def dist(reqs: list[Req]) -> dict[str, Any]:
    s = latency_summary(reqs)
    return {k: {"p50": s[k]["p50"], "p95": s[k]["p95"], "n": s[k]["n"]} for k in ("ttft", "itl", "tpot", "e2e")}


def run_kvtui(ep, workload: Workload, space, max_len: int, conc: int, window: int, salt: int) -> tuple[dict, list[Req], Any]:
    cfg = WorkerConfig(base_url=ep.base_url, model=ep.model, headers=ep.headers(), workload=dataclasses.asdict(workload),
                       space=dataclasses.asdict(space), max_model_len=max_len, salt=salt, seed=workload.seed,
                       request_timeout_s=600)
    with LoadGenerator(cfg, 1) as lg:
        run = lg.run_step(StepParams("agree", 0, conc, True, warmup_s=2.0, window_s=0.0, window_requests=window))
    ctx = StepContext(load=conc, t_window_start=run.t_window_start, t_window_end=run.t_window_end, client=run.stats.to_dict())
    step = evaluate_step(run.records, ctx, Slo(latency={"ttft_p95_ms": 1e9}))
    figures = {k: {"p50": step[f"{k}_ms"].get("p50"), "p95": step[f"{k}_ms"].get("p95"), "n": step[f"{k}_ms"]["n"]}
               for k in ("ttft", "itl", "tpot", "e2e")}
    return figures, from_kvtui(run.records), run


def vllm_prompts(path: Path, workload: Workload, space, max_len: int, salt: int, n: int) -> None:
    f = PromptFactory(workload, space, max_len, salt, workload.seed)
    with open(path, "w") as out:
        for k in range(n):
            p = f.build(k)
            out.write(json.dumps({"prompt": " ".join(f"t{i}" for i in p.ids), "output_tokens": p.max_tokens}) + "\n")


def add_server_args(ap: argparse.ArgumentParser, *, conc: int, rounds: int, log: str) -> None:
    """The options both agreement benches share: the server, the prompt shape, rounds, outputs."""
    ap.add_argument("--scenario", default=str(ROOT / "kvtui" / "data" / "scenarios" / "vllm-cpu-tiny.toml"))
    ap.add_argument("--conc", type=int, default=conc)
    ap.add_argument("--isl", type=int, default=256)
    ap.add_argument("--osl", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--kv-bytes", type=int, default=400_000_000)
    ap.add_argument("--out", default="")
    ap.add_argument("--log", default=log)


def for_each_server_thread(eng, fn) -> None:
    """Apply fn(tid) to every thread of the server's processes (Linux: niceness and CPU affinity
    are per thread); threads gone meanwhile are skipped."""
    for pid in eng.pids():
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                fn(int(tid))
            except OSError:
                pass


def main() -> None:
    ap = argparse.ArgumentParser()
    add_server_args(ap, conc=8, rounds=2, log="/tmp/kvtui-agreement.log")
    ap.add_argument("--window", type=int, default=96, help="kvtui window requests; vllm bench gets window + 2*conc")
    ap.add_argument("--kvtui-prompts", choices=("text", "ids"), default="text",
                    help="text: kvtui sends the same kind of prompts as vllm bench (\"tN\" words through a JSONL "
                         "dataset), so the server tokenizes for both; ids: kvtui's token-id prompts (the server "
                         "skips tokenization and runs faster for kvtui than for the peer)")
    ap.add_argument("--server-nice", type=int, default=0,
                    help="renice every thread of the server's processes after start (a small box: server and clients share cores)")
    a = ap.parse_args()
    from kvtui.runtime.engines.vllm.launcher import VllmEngine

    sc = load_scenario(Path(a.scenario))
    sc.server.kv_cache_memory_bytes = a.kv_bytes  # no KV wall here: this is about measurement, not capacity
    mode = sc.modes[0]
    workload = Workload(prompt_tokens=Length(value=a.isl), output_tokens=Length(value=a.osl), jitter=0.1, seed=7)
    logf = open(a.log, "a")
    eng = VllmEngine()
    t0 = time.monotonic()
    ep = eng.start(sc, mode, lambda line: (logf.write(line + "\n"), logf.flush()))
    startup = time.monotonic() - t0
    if a.server_nice:
        for_each_server_thread(eng, lambda tid: os.setpriority(os.PRIO_PROCESS, tid, a.server_nice))
    headers = ep.headers()
    os.environ["OPENAI_API_KEY"] = ep.api_key or ""  # vllm bench serve sends it as Bearer
    rows: list[dict[str, Any]] = []
    try:
        space = discover_token_space(ep.base_url, ep.model, headers)
        max_len = ep.max_model_len or sc.server.max_model_len
        version = httpx.get(ep.base_url + "/version", headers=headers, trust_env=False).json().get("version")
        n_vllm = a.window + 2 * a.conc
        for rnd in range(a.rounds):
            order = ["kvtui", "vllm"] if rnd % 2 == 0 else ["vllm", "kvtui"]
            for tool in order:
                wait_idle(ep.base_url, headers)
                before = scrape(ep.base_url, headers)
                salt = 0x5EED0000 + rnd * 16 + (1 if tool == "vllm" else 2)
                if tool == "kvtui":
                    wl = workload
                    if a.kvtui_prompts == "text":
                        data = Path("/tmp/kvtui-agreement-kvtui-prompts.jsonl")
                        vllm_prompts(data, workload, space, max_len, salt, 2 * n_vllm)
                        wl = dataclasses.replace(workload, dataset=str(data))
                    figures, reqs, run = run_kvtui(ep, wl, space, max_len, a.conc, a.window, salt)
                    extra = {"client": run.stats.to_dict(), "cancelled": sum(1 for r in reqs if r.cut)}
                    printed = None
                else:
                    data = Path("/tmp/kvtui-agreement-prompts.jsonl")
                    vllm_prompts(data, workload, space, max_len, salt, n_vllm)
                    tr = vllm_bench(ep.base_url, ep.model, str(ROOT / sc.server.model), a.conc, n_vllm, dataset=str(data),
                                    log=Path(a.log))
                    reqs = tr.reqs
                    figures = dist(steady(reqs, a.conc))
                    printed = tr.extra["printed"]
                    extra = {"cancelled": 0}
                wait_idle(ep.base_url, headers)
                after = scrape(ep.base_url, headers)
                row = {"round": rnd, "tool": tool, "figures": figures, "all_requests": dist([r for r in reqs if not r.cut]),
                       "printed": printed, "server": server_delta(before, after), "client_means": client_means(reqs), **extra}
                rows.append(row)
                f = figures
                print(f"round {rnd} {tool}: TTFT p50 {f['ttft']['p50']} p95 {f['ttft']['p95']} · TPOT p50 {f['tpot']['p50']} "
                      f"· E2E p50 {f['e2e']['p50']} ms (n={f['ttft']['n']}) · server gen tokens "
                      f"{row['server']['req_gen']['sum']:.0f} vs client {row['client_means']['req_gen']['sum']}", file=sys.stderr, flush=True)
        # Item 6: a shared prefix must show up in the hit rate.
        wait_idle(ep.base_url, headers)
        before = scrape(ep.base_url, headers)
        shared = dataclasses.replace(workload, shared_prefix=0.5)
        run_kvtui(ep, shared, space, max_len, a.conc, max(24, a.window // 4), 0x5EEDFFFF)
        wait_idle(ep.base_url, headers)
        shared_row = {"tool": "kvtui shared_prefix=0.5", "server": server_delta(before, scrape(ep.base_url, headers))}
    finally:
        eng.stop()
        logf.close()
    machine = (f"{platform.node()} · {os.cpu_count()} CPUs · vLLM {version} (CPU build) · tiny 4-layer Llama "
               f"(runs/tiny-llama) · startup {startup:.0f} s · ISL {a.isl} / OSL {a.osl} (±10 %) · concurrency {a.conc} · "
               f"kvtui window {a.window} requests, vllm bench {n_vllm} requests · {a.rounds} rounds interleaved"
               f" · kvtui prompts: {a.kvtui_prompts}"
               + (f" · server reniced +{a.server_nice}" if a.server_nice else ""))
    print(machine)
    print(report(rows, shared_row))
    if a.out:
        Path(a.out).write_text(json.dumps({"machine": machine, "args": vars(a), "rows": rows, "shared_prefix": shared_row},
                                          indent=1, default=str))


def _med(xs):
    xs = [x for x in xs if x is not None]
    return pct(xs, 0.5) if xs else None


def report(rows: list[dict], shared_row: dict) -> str:
    out = ["**kvtui vs `vllm bench serve`** (medians over rounds; ms)", "",
           "| metric | kvtui | vllm bench (steady) | kvtui / vllm | vllm bench as printed (all requests) |", "|---|---|---|---|---|"]
    k = [r for r in rows if r["tool"] == "kvtui"]
    v = [r for r in rows if r["tool"] == "vllm"]
    printed_key = {"ttft": "ttft", "itl": "itl", "tpot": "tpot", "e2e": "e2el"}
    for m in ("ttft", "itl", "tpot", "e2e"):
        for p in ("p50", "p95"):
            kv = _med([r["figures"][m][p] for r in k])
            vv = _med([r["figures"][m][p] for r in v])
            pk = ("median" if p == "p50" else "p95") + f"_{printed_key[m]}_ms"
            pv = _med([(r["printed"] or {}).get(pk) for r in v])
            ratio = f"{kv / vv:.3f}" if kv and vv else "—"
            fmt = lambda x: "—" if x is None else f"{x:.2f}"  # noqa: E731
            out.append(f"| {m.upper()} {p} | {fmt(kv)} | {fmt(vv)} | {ratio} | {fmt(pv)} |")
    out += ["", "**Client vs the server's own histograms** (means over the same requests, ms; tokens exact)", "",
            "| round | client | TTFT client / server | ITL client / server | TPOT client / server | E2E client / server | "
            "requests finished client / server | prompt tokens client / server | output tokens client / server | prefix-cache hit rate |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c, s = r["client_means"], r["server"]

        def pair(key):
            cm, sm = c[key]["mean"], s[key]["mean"]
            if cm is None or sm is None:
                return "—"
            return f"{cm * 1000:.2f} / {sm * 1000:.2f} ({cm / sm - 1:+.1%}; n {c[key]['count']}/{s[key]['count']:.0f})"

        hit = s["prefix_cache_hit_rate"]
        out.append(f"| {r['round']} | {r['tool']} | {pair('ttft')} | {pair('itl')} | {pair('tpot')} | {pair('e2e')} | "
                   f"{c['req_gen']['count']} / {s['req_gen']['count']:.0f} | {c['req_prompt']['sum']} / {s['req_prompt']['sum']:.0f} | "
                   f"{c['req_gen']['sum']} / {s['req_gen']['sum']:.0f} | {'—' if hit is None else f'{hit:.4f}'} |")
    sh = shared_row["server"]["prefix_cache_hit_rate"]
    out += ["", f"Prefix cache with `shared_prefix = 0.5` (kvtui): hit rate {'—' if sh is None else f'{sh:.3f}'} "
            f"({shared_row['server']['pc_hits']:.0f} of {shared_row['server']['pc_queries']:.0f} tokens)."]
    return "\n".join(out)


if __name__ == "__main__":
    main()
