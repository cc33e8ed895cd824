"""Dispatch honesty (issue 7, item 2): the client's own dispatch delay and event-loop lag per
step, latency measured from the intended send time, and the client-limited flag.

A  A closed-loop ramp on the knee test model over real HTTP (`kvtui run`, linear +1): per step,
   what kvtui records about itself (dispatch delay p50/p95/max, loop lag p99/max, CPU share)
   next to what it measured, and whether it flagged the step.
B  Open loop (Poisson arrivals) against bench/fast_sse_server.py (paced: a chunk per stream every
   10 ms, 16 tokens a request), one load-generator process, rates from easy to beyond what one process can send.
   Every arrival has an intended time from the schedule; TTFT is taken from it (no coordinated
   omission) and, for contrast, from the actual send. When the client falls behind, the two
   part, and kvtui flags the step `client_limited`.

    python bench/dispatch_honesty.py [--rates 50,200,800,1600,3200] [--out bench/results/dispatch.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.knee import knee_scenario  # noqa: E402

from bench.loadgen_capacity import start_server  # noqa: E402
from bench.peers import pct  # noqa: E402
from kvtui.core.evaluate import StepContext, evaluate_step  # noqa: E402
from kvtui.explore.run import Run  # noqa: E402
from kvtui.runtime.load.generator import LoadGenerator, StepParams, WorkerConfig  # noqa: E402
from kvtui.runtime.load.workload import TokenSpace  # noqa: E402
from kvtui.io.scenario import load_scenario  # noqa: E402
from kvtui.io.scenario.schema import Length, Slo, Workload  # noqa: E402

KNEE = knee_scenario("knee-ramp", """
start = 1
max = {max}
step = "+1"
search = "linear"
confirm = false
warmup_s = 0.3
window_s = 2
""", "tpot_p95_ms = 1000")


def part_a(max_load: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as td:
        p = Path(td) / "knee.toml"
        p.write_text(KNEE.format(max=max_load))
        doc = Run(load_scenario(p), Path(td) / "run.json").run()
    rows = []
    for s in doc["modes"][0]["steps"]:
        c = s["client"]
        rows.append({"load": s["load"], "requests": s["requests"], "ttft_p50": s["ttft_ms"].get("p50"),
                     "tpot_p50": s["tpot_ms"].get("p50"), "dispatch_p50": c.get("dispatch_ms_p50"),
                     "dispatch_p95": c.get("dispatch_ms_p95"), "dispatch_max": c.get("dispatch_ms_max"),
                     "lag_p99": c.get("loop_lag_ms_p99"), "lag_max": c.get("loop_lag_ms_max"), "cpu_share": c.get("cpu_share"),
                     "client_limited": s.get("client_limited"), "limited_by": s.get("limited_by")})
    return rows


def part_b(rates: list[float], window_s: float) -> list[dict]:
    srv, base = start_server(16, 1, 10.0)
    rows = []
    try:
        w = Workload(prompt_tokens=Length(value=16), output_tokens=Length(value=16), jitter=0.0)
        cfg = WorkerConfig(base_url=base, model="m", headers={}, workload=dataclasses.asdict(w),
                           space=dataclasses.asdict(TokenSpace.synthetic()), max_model_len=1 << 20, salt=1, seed=0,
                           request_timeout_s=120)
        with LoadGenerator(cfg, 1) as lg:
            for i, rate in enumerate(rates):
                run = lg.run_step(StepParams("dispatch", i, rate, False, warmup_s=1.0, window_s=window_s))
                ctx = StepContext(load=rate, closed=False, t_window_start=run.t_window_start, t_window_end=run.t_window_end,
                                  client=run.stats.to_dict())
                step = evaluate_step(run.records, ctx, Slo(latency={"ttft_p95_ms": 1e9}))
                win = [r for r in run.records if r.counted and r.ok]
                from_sent = [(r.t_first - r.t_sent) * 1000 for r in win if r.t_first is not None]
                from_intended = [(r.t_first - r.t_intended) * 1000 for r in win if r.t_first is not None]
                st = run.stats
                dur = run.t_window_end - run.t_window_start
                rows.append({
                    "rate": rate, "sent_per_s": sum(1 for r in run.records if r.phase == "window") / dur if dur else 0,
                    "requests": len(win), "dispatch_p50": st.dispatch_ms_p50, "dispatch_p95": st.dispatch_ms_p95,
                    "dispatch_max": st.dispatch_ms_max, "lag_p99": st.loop_lag_ms_p99, "cpu_share": st.cpu_share,
                    "ttft_p95_intended": pct(from_intended, 0.95), "ttft_p95_sent": pct(from_sent, 0.95),
                    "ttft_p95_kvtui": step["ttft_ms"].get("p95"), "client_limited": step["client_limited"],
                    "inflight_capped": st.inflight_capped,
                })
                r = rows[-1]
                r["errors"] = step["errors_by_class"]
                print(f"rate {rate:g}: {json.dumps(r, default=str)}", file=sys.stderr, flush=True)
    finally:
        os.killpg(srv.pid, 9)
    return rows


def fmt(x, d=1):
    return "—" if x is None else f"{x:,.{d}f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ramp-max", type=int, default=10)
    ap.add_argument("--rates", default="50,200,800,1600,3200")
    ap.add_argument("--window", type=float, default=4.0)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    a_rows = part_a(a.ramp_max)
    b_rows = part_b([float(x) for x in a.rates.split(",")], a.window)
    print(f"{platform.node()} · {os.cpu_count()} CPUs · Python {platform.python_version()}")
    print("\nA. closed-loop ramp, knee model over HTTP (`kvtui run`, linear +1): what the client recorded about itself\n")
    print("| concurrency | window requests | TTFT p50 ms | TPOT p50 ms | dispatch p50 / p95 / max ms | loop lag p99 / max ms | client CPU | client-limited |")
    print("|---|---|---|---|---|---|---|---|")
    for r in a_rows:
        print(f"| {r['load']:g} | {r['requests']} | {fmt(r['ttft_p50'])} | {fmt(r['tpot_p50'])} | {fmt(r['dispatch_p50'], 2)} / "
              f"{fmt(r['dispatch_p95'], 2)} / {fmt(r['dispatch_max'], 2)} | {fmt(r['lag_p99'])} / {fmt(r['lag_max'])} | "
              f"{r['cpu_share']:.0%} | {'yes' if r['client_limited'] else 'no'} |")
    print("\nB. open loop (Poisson), paced fast server, one load-generator process: TTFT from the intended time vs from the send\n")
    print("| target req/s | sent req/s | window requests ok | errors | dispatch p50 / p95 / max ms | loop lag p99 ms | client CPU | TTFT p95 from intended (kvtui) | TTFT p95 from send | client-limited |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in b_rows:
        errs = ", ".join(f"{k} {v}" for k, v in (r.get("errors") or {}).items()) or "0"
        print(f"| {r['rate']:g} | {r['sent_per_s']:,.0f} | {r['requests']} | {errs} | {fmt(r['dispatch_p50'], 2)} / {fmt(r['dispatch_p95'], 1)} / "
              f"{fmt(r['dispatch_max'], 1)} | {fmt(r['lag_p99'])} | {r['cpu_share']:.0%} | {fmt(r['ttft_p95_kvtui'])} | "
              f"{fmt(r['ttft_p95_sent'])} | {'yes' if r['client_limited'] else 'no'} |")
    if a.out:
        Path(a.out).write_text(json.dumps({"closed_ramp": a_rows, "open_loop": b_rows, "args": vars(a)}, indent=1))
    from bench.measured import require

    require([r for r in a_rows if r.get("requests")], "no closed-loop step had a request", "dispatch_honesty")
    require([r for r in b_rows if r.get("requests")], "no open-loop rate had a request", "dispatch_honesty")


if __name__ == "__main__":
    main()
