"""The search strategies replayed on the recorded H200 runs (docs/results/*.json): steps and
GPU-seconds to the knee, no GPU needed.

Each recorded mode is an oracle: a load passes iff it is at most the recorded knee (monotone,
the recorded answer), and a step costs the recorded step time at that load (interpolated
between the recorded loads; the published runs' own windows and drains). Against it:

  linear  ramp.start, +resolution, … to the first fail (no confirmation)
  fast    kvtui's fast search from the recorded KV-bound guess (what the published runs did)
  seeded  the search seeded by the simulator's prediction for that scenario and mode, made now
          from the catalogue's H200 calibration (no refit: the oracle has verdicts, not figures)

    python bench/h200_replay.py [docs/results/h200-kvb.json docs/results/h200-v2.json]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvtui.explore.prediction import Target, predict_mode  # noqa: E402
from kvtui.core.search import FastSearch, LinearSearch, ramp_levels  # noqa: E402
from kvtui.core.search_seeded import SeededSearch  # noqa: E402
from kvtui.simulator.model.calibration_file import read_calibration  # noqa: E402
from kvtui.io.snapshot.file import load_snapshot  # noqa: E402
from kvtui.io.scenario.loader import scenario_from_snapshot  # noqa: E402

DEFAULT = [ROOT / "docs/results/h200-kvb.json", ROOT / "docs/results/h200-v2.json"]


def step_cost(mode: dict) -> callable:
    pts = sorted({float(s["load"]): float(s.get("duration_s") or 0) for s in mode.get("steps") or []}.items())

    def cost(load: float) -> float:
        if load <= pts[0][0]:
            return pts[0][1] * load / pts[0][0] if pts[0][0] else pts[0][1]
        for (a, ta), (b, tb) in zip(pts, pts[1:]):
            if a <= load <= b:
                return ta + (tb - ta) * (load - a) / (b - a)
        return pts[-1][1] * load / pts[-1][0]
    return cost


def drive(search, knee: float, cost) -> dict:
    loads = []
    while (x := search.next()) is not None:
        loads.append(x)
        search.record(x, x <= knee)
    r = search.result()
    return {"best": r.best, "first_fail": r.first_fail, "steps": len(loads), "gpu_s": round(sum(cost(x) for x in loads)),
            "loads": loads}


def replay(path: Path) -> list[dict]:
    doc = load_snapshot(path)
    sc = scenario_from_snapshot(doc["scenario"])
    cal = read_calibration(None)
    out = []
    for md in doc["modes"]:
        if not md.get("steps") or md.get("best_concurrency") is None:
            continue
        knee = float(md["best_concurrency"])
        mode = sc.mode(md["name"])
        cost = step_cost(md)
        pred = predict_mode(sc, mode, cal, Target("H200", "llama-3.1-8b"))
        res = sc.ramp.resolution or 1
        lin_ramp = type(sc.ramp)(**{**sc.ramp.__dict__, "step": f"+{res:g}", "confirm": False})
        row = {"resolution": res, "file": path.name, "mode": md["name"], "knee": knee, "predicted": pred.get("knee"),
               "linear": drive(LinearSearch(lin_ramp, levels=ramp_levels(lin_ramp)), knee, cost),
               "fast": drive(FastSearch(sc.ramp, guess=md.get("predicted_kv_concurrency")), knee, cost),
               # not covered (the AWQ checkpoints' shape is not here): the run falls back to fast, so does this
               "seeded": drive(SeededSearch(sc.ramp, knee=pred.get("knee")) if pred.get("covered")
                               else FastSearch(sc.ramp, guess=md.get("predicted_kv_concurrency")), knee, cost),
               "recorded_steps": len(md["steps"]), "recorded_gpu_s": round(sum(s.get("duration_s") or 0 for s in md["steps"]))}
        out.append(row)
    return out


def table(rows: list[dict]) -> str:
    lines = ["| run | mode | knee (recorded) | predicted | linear steps / GPU-s | fast steps / GPU-s | seeded steps / GPU-s | same answer (linear: within the resolution) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        res = r["resolution"]
        same = r["fast"]["best"] == r["seeded"]["best"] == r["knee"] and abs(r["linear"]["best"] - r["knee"]) < res
        lines.append(f"| {r['file']} | {r['mode']} | {r['knee']:g} | {r['predicted'] if r['predicted'] is not None else '—'} | "
                     f"{r['linear']['steps']} / {r['linear']['gpu_s']} | {r['fast']['steps']} / {r['fast']['gpu_s']} | "
                     f"{r['seeded']['steps']} / {r['seeded']['gpu_s']} | {'yes' if same else 'NO'} |")
    tot = {k: (sum(r[k]["steps"] for r in rows), sum(r[k]["gpu_s"] for r in rows)) for k in ("linear", "fast", "seeded")}
    lines.append(f"| **all** | | | | {tot['linear'][0]} / {tot['linear'][1]} | {tot['fast'][0]} / {tot['fast'][1]} | "
                 f"{tot['seeded'][0]} / {tot['seeded'][1]} | |")
    return "\n".join(lines)


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or DEFAULT
    rows = [r for p in paths for r in replay(p)]
    from bench.measured import require

    require(rows, f"no recorded mode with steps and a knee in {', '.join(map(str, paths))}", "h200_replay")
    print(table(rows))


if __name__ == "__main__":
    main()
