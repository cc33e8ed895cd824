"""The live trace replay's send-time error (`[ramp] load = "trace"`, kvtui/runtime/load/worker.py trace_arrivals).

    PYTHONPATH=. python bench/trace_replay.py [--rates 50,100,200,400] [--processes 2] [--window 4]

Writes a bursty trace (lognormal lengths, 20 req/s at 1×, inter-arrival CV > 1) and, for each target
rate, runs one live step of `kvtui run --headless` against `kvtui sim serve --knee` (a fixed-pace
model: the server is never the limit, tokens are few), the speed-up factor chosen to reach that rate.
From the step's records: each request's scheduled send time (t_intended, the schedule's offset from
the step's one start) against the time it left the client (t_sent): p50/p99/max of the lateness, and
the sent rate against the scheduled one (the trace's own burstiness over the step: not the
1× mean). Exits 1 when a step measured nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_trace(path: Path, rows: int = 20_000) -> float:
    rng = random.Random(0)
    t = 0.0
    with open(path, "w") as f:
        for _ in range(rows):
            t += rng.expovariate(20.0) * (0.1 if rng.random() < 0.3 else 1.3)
            isl = max(8, min(600, int(rng.lognormvariate(4.5, 0.6))))
            row = {"time": round(t, 4), "input_tokens": isl, "output_tokens": rng.randrange(4, 16)}
            f.write(json.dumps(row) + "\n")
    return (rows - 1) / t  # the trace's rate at 1×


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def run_one(tmp: Path, rate_1x: float, rate: float, processes: int, window: float) -> dict:
    factor = rate / rate_1x
    sc = tmp / f"r{int(rate)}.toml"
    sc.write_text("\n".join([
        "[server]", 'engine = "sim"', "max_model_len = 4096",
        "[[modes]]", 'name = "bench"', 'extra_args = ["--knee", "4096", "--knee-tpot-ms", "1"]',
        "[workload]", 'trace = "trace.jsonl"',
        "[ramp]", 'load = "trace"', f"start = {factor}", f"max = {factor}", "warmup_s = 1", f"window_s = {window}",
        "confirm = false", f"processes = {processes}",
        "[slo]", "ttft_p95_ms = 600000",
    ]) + "\n")
    out = tmp / f"r{int(rate)}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-m", "kvtui", "run", str(sc), "--headless", "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=600, cwd=tmp)
    if p.returncode != 0:
        raise SystemExit(f"rate {rate:g}: kvtui run exited {p.returncode}: {(p.stderr or p.stdout)[-600:]}")
    recs = [json.loads(x) for x in out.with_suffix(".records.jsonl").read_text().splitlines() if x.strip()]
    sent = [r for r in recs if r.get("t_sent") and r.get("t_intended")]
    if not sent:
        raise SystemExit(f"rate {rate:g}: no request was sent: nothing measured")
    late = [(r["t_sent"] - r["t_intended"]) * 1000 for r in sent]
    t0, t1 = min(r["t_sent"] for r in sent), max(r["t_sent"] for r in sent)
    span = t1 - t0
    i0, i1 = min(r["t_intended"] for r in sent), max(r["t_intended"] for r in sent)
    return {"target_rps": rate, "factor": round(factor, 3), "requests": len(sent),
            "scheduled_rps": round((len(sent) - 1) / (i1 - i0), 1) if i1 > i0 else None,
            "sent_rps": round((len(sent) - 1) / span, 1) if span > 0 else None,
            "late_ms_p50": round(pct(late, 0.5), 2), "late_ms_p99": round(pct(late, 0.99), 2),
            "late_ms_max": round(max(late), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="50,100,200,400")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--window", type=float, default=4.0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rate_1x = write_trace(tmp / "trace.jsonl")
        print(f"trace: 20,000 rows at {rate_1x:.2f} req/s (1×); {a.processes} load-generator process(es)")
        print(f"{'target req/s':>12}  {'factor':>7}  {'requests':>8}  {'scheduled req/s':>15}  {'sent req/s':>10}  "
              f"{'late p50 ms':>11}  "
              f"{'late p99 ms':>11}  {'late max ms':>11}")
        for rate in (float(x) for x in a.rates.split(",")):
            r = run_one(tmp, rate_1x, rate, a.processes, a.window)
            print(f"{r['target_rps']:>12g}  {r['factor']:>7g}  {r['requests']:>8}  {r['scheduled_rps'] or 0:>15.1f}  "
                  f"{r['sent_rps'] or 0:>10.1f}  "
                  f"{r['late_ms_p50']:>11.2f}  {r['late_ms_p99']:>11.2f}  {r['late_ms_max']:>11.2f}")


if __name__ == "__main__":
    main()
