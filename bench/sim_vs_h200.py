"""The simulator against kvtui's own real H200 run: same modes, loads and step settings.

For every step of a real snapshot (docs/results/h200-abc.json: vLLM 0.26.0, 8B shape,
2k/256, prefix caching off), simulate the same step offline with the calibrated model and
print measured vs simulated output tok/s, TTFT p50/p95 and TPOT p50/p95, with the signed
error, plus whether the SLO verdict agrees.

    python bench/sim_vs_h200.py [docs/results/h200-abc.json]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvtui.engines.sim import catalog  # noqa: E402
from kvtui.engines.sim.fast import simulate_step  # noqa: E402
from kvtui.engines.sim.scheduler import SchedulerSim  # noqa: E402
from kvtui.explore.evaluate import StepContext, evaluate_step  # noqa: E402
from kvtui.load.workload import PromptFactory, TokenSpace  # noqa: E402
from kvtui.report.snapshot import load_snapshot  # noqa: E402
from kvtui.scenario import scenario_from_snapshot  # noqa: E402


def _scenario(doc: dict):
    """The real run's scenario on the simulator: the H200 and the 8B shape it ran."""
    sc = scenario_from_snapshot(doc["scenario"])
    sc.server.engine, sc.server.gpu, sc.server.model = "sim", "H200", "llama-3.1-8b"
    for m in sc.modes:
        m.model = ""
    return sc


def err(sim: float | None, real: float | None) -> str:
    if not sim or not real:
        return "—"
    return f"{(sim / real - 1):+.0%}"


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "docs/results/h200-abc.json")
    doc = load_snapshot(path)
    sc = _scenario(doc)
    print(f"real: {path} ({doc['environment'].get('gpu_names')}, vLLM {doc['modes'][0]['engine_info'].get('version')}); "
          f"sim: calibrated H200 model, same loads, warm-up {sc.ramp.warmup_s:g} s, window {sc.ramp.window_s:g} s")
    print("| mode | conc | out tok/s real / sim (err) | TTFT p50 ms real / sim (err) | TTFT p95 ms real / sim (err) | "
          "TPOT p50 ms real / sim (err) | SLO verdict real / sim |")
    print("|---|---|---|---|---|---|---|")
    tally = {"n": 0, "agree": 0, "tok": [], "tpot": []}
    for m in doc["modes"]:
        mode = sc.mode(m["name"])
        sched = SchedulerSim(catalog.load_model("llama-3.1-8b"), catalog.load_gpu("H200"), mode, sc.server, seed=sc.seed)
        factory = PromptFactory(sc.workload, TokenSpace.synthetic(), sc.server.max_model_len, salt=1, seed=sc.seed)
        counter = 0
        for i, st in enumerate(m["steps"]):
            res = simulate_step(sched, factory.lengths, st["load"], True, sc.ramp.warmup_s, sc.ramp.window_s, 0, sc.seed, m["name"], i,
                                counter_start=counter)
            counter += len(res.records) + 1
            ctx = StepContext(load=st["load"], t_window_start=res.window_start or res.t_start, t_window_end=res.window_end or res.t_end)
            sim = evaluate_step(res.records, ctx, sc.slo)
            v = {True: "pass", False: "fail", None: "?"}
            tally["n"] += 1
            tally["agree"] += sim["passed"] == st["passed"]
            tally["tok"].append(abs(sim["output_tok_s"] / st["output_tok_s"] - 1))
            tally["tpot"].append(abs((sim["tpot_ms"]["p50"] or 0) / st["tpot_ms"]["p50"] - 1))
            print(f"| {m['name']} | {st['load']:g} | {st['output_tok_s']:,.0f} / {sim['output_tok_s']:,.0f} ({err(sim['output_tok_s'], st['output_tok_s'])}) | "
                  f"{st['ttft_ms']['p50']:,.0f} / {sim['ttft_ms']['p50'] or 0:,.0f} ({err(sim['ttft_ms']['p50'], st['ttft_ms']['p50'])}) | "
                  f"{st['ttft_ms']['p95']:,.0f} / {sim['ttft_ms']['p95'] or 0:,.0f} ({err(sim['ttft_ms']['p95'], st['ttft_ms']['p95'])}) | "
                  f"{st['tpot_ms']['p50']:.1f} / {sim['tpot_ms']['p50'] or 0:.1f} ({err(sim['tpot_ms']['p50'], st['tpot_ms']['p50'])}) | "
                  f"{v[st['passed']]} / {v[sim['passed']]} |")
    n = tally["n"]
    print(f"\n{n} steps: SLO verdict agrees on {tally['agree']}; mean |error| out tok/s {sum(tally['tok']) / n:.1%}, "
          f"TPOT p50 {sum(tally['tpot']) / n:.1%}")


if __name__ == "__main__":
    main()
