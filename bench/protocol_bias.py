"""Each step protocol's figures against the load's steady state, in the offline simulator.

A step is meant to measure what a closed loop of N requests does once it has settled: births
spread evenly, every position in flight. The simulator can run that steady state for as long as
one likes, so it is the truth here: for each load a step was measured at, one long run (drained,
births spread over one request, 400 modelled seconds, the first 80 discarded) gives TTFT and TPOT
p95 over thousands of requests. Against it, every step of a `kvtui run --fast` of the default
`kvtui init llama-3.1-8b --engine sim --gpu H200` scenario (4 modes, TTFT p95 ≤ 2 s, TPOT p95 ≤
50 ms) under the continuous protocol: the relative error of each p95, and whether the step's
verdict agrees with the steady state's. (The classic protocol, measured here beside it until it was
retired in issue 46, read TPOT p95 +6.9 % and TTFT p95 +101 %: docs/PROTOCOL.md keeps that table.)

    PYTHONPATH=$PWD python bench/protocol_bias.py --md bench/results/protocol_bias.md

Fails (exit 1) when a run measured no step.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvtui.simulator.engine.continuous import ContinuousClient, StepPlan  # noqa: E402
from kvtui.simulator.engine.fastrun import OfflineServer  # noqa: E402
from kvtui.explore.run import Run  # noqa: E402
from kvtui.core.stats import percentile  # noqa: E402
from kvtui.io.scenario.loader import load_scenario  # noqa: E402
from kvtui.io.scenario.schema import Scenario  # noqa: E402

TOTAL_S, SKIP_S = 400.0, 80.0


def steady_state(sc: Scenario, mode_name: str, load: float, e2e_s: float) -> dict[str, float]:
    """TTFT and TPOT p95 (ms) of the load's steady state: one long drained run, births spread over one
    request's duration, the first SKIP_S discarded."""
    mode = next(m for m in sc.modes if m.name == mode_name)
    srv = OfflineServer(sc, mode, 1)
    client = ContinuousClient(srv.sched, srv._sample, sc.seed)
    plan = StepPlan(load=load, warmup_s=0.0, window_s=TOTAL_S, need=1, drain_before=True, tail="full",
                    stagger_s=e2e_s, settle="time")
    res, _info, _ = client.step(plan, 0, 0)
    t0 = res.t_start
    recs = [r for r in res.records if r.ok and t0 + SKIP_S <= r.t_sent <= t0 + TOTAL_S]
    return {"ttft": percentile(sorted(r.ttft * 1e3 for r in recs if r.ttft is not None), 0.95),
            "tpot": percentile(sorted(r.tpot * 1e3 for r in recs if r.tpot is not None), 0.95), "n": len(recs)}


def run(sc_path: Path, out: Path) -> dict[str, Any]:
    return Run(load_scenario(sc_path), out, fast=True).run()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--md", type=Path)
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="kvtui-bias-"))
    sc_path = tmp / "s.toml"
    subprocess.run([sys.executable, "-m", "kvtui", "init", "llama-3.1-8b", "--engine", "sim", "--gpu", "H200",
                    "--out", str(sc_path)], check=True, capture_output=True, cwd=ROOT)
    sc = load_scenario(sc_path)
    limits = {m: float(lim) for m, p, lim in sc.slo.targets() if p == "p95"}
    docs = {"continuous": run(sc_path, tmp / "continuous.json")}
    truth: dict[tuple[str, float], dict[str, float]] = {}
    out = ["# The step protocols against the steady state (offline simulator)", "",
           "Command: `PYTHONPATH=$PWD python bench/protocol_bias.py --md bench/results/protocol_bias.md`", "",
           f"Scenario: default `kvtui init llama-3.1-8b --engine sim --gpu H200` (2k / 256 ±10 %, TTFT p95 ≤ "
           f"{limits.get('ttft', 0):g} ms, TPOT p95 ≤ {limits.get('tpot', 0):g} ms, warm-up {sc.ramp.warmup_s:g} s, "
           f"window {sc.ramp.window_s:g} s). Steady state: one drained run per load, {TOTAL_S:g} modelled s, births "
           f"spread over one request, the first {SKIP_S:g} s discarded. SIMULATED.", ""]
    summary = []
    for proto, doc in docs.items():
        rows, errs, disagree, n = [], {"ttft": [], "tpot": []}, 0, 0
        for m in doc["modes"]:
            for s in m["steps"]:
                load = float(s["load"])
                key = (m["name"], load)
                if key not in truth:
                    truth[key] = steady_state(sc, m["name"], load, max(1.0, (s["e2e_ms"]["p50"] or 0) / 1e3))
                t = truth[key]
                got = {k: (s.get(f"{k}_ms") or {}).get("p95") for k in ("ttft", "tpot")}
                e = {k: (got[k] / t[k] - 1) if got[k] and t[k] else math.nan for k in got}
                for k in e:
                    errs[k].append(e[k])
                true_pass = all(t[k] <= lim for k, lim in limits.items() if k in t)
                n += 1
                disagree += int(bool(s["passed"]) != true_pass)
                rows.append(f"| {m['name']} | {load:g} | {s.get('why', '')} | {got['ttft']:.0f} / {t['ttft']:.0f} "
                            f"({e['ttft']:+.1%}) | {got['tpot']:.2f} / {t['tpot']:.2f} ({e['tpot']:+.1%}) | "
                            f"{'PASS' if s['passed'] else 'FAIL'} | {'PASS' if true_pass else 'FAIL'} |")
        if not n:
            print(f"protocol_bias: the {proto} run measured no step", file=sys.stderr)
            return 1
        out += [f"### {proto}", "", "| mode | load | step | TTFT p95 step / steady (ms) | TPOT p95 step / steady (ms) "
                "| verdict | steady state's |", "|---|---:|---|---|---|---|---|"] + rows + [""]
        knees = ", ".join(f"{m['name']} {m.get('best_concurrency')}" for m in doc["modes"])
        summary.append(f"- {proto}: TPOT p95 error median {statistics.median(errs['tpot']):+.1%} "
                       f"(range {min(errs['tpot']):+.1%} … {max(errs['tpot']):+.1%}), TTFT p95 median "
                       f"{statistics.median(errs['ttft']):+.1%}; verdicts against the steady state's: {disagree} of "
                       f"{n} differ; knees {knees}")
    out += ["## Summary", ""] + summary + [""]
    text = "\n".join(out)
    print(text)
    if a.md:
        a.md.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
