"""One mode of a seeded re-run against the published run of the same workload: steps, GPU time, knee.

    python scripts/seeded_vs_published.py PUBLISHED.json SEEDED.json MODE

GPU time = the mode's engine start plus the sum of its steps' durations (what the run held the GPU
for, between steps' drains); both runs' figures come from their snapshots.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvtui.io.snapshot.file import load_snapshot  # noqa: E402


def figures(md: dict) -> dict:
    steps = md.get("steps") or []
    step_s = sum(float(s.get("duration_s") or 0) for s in steps)
    start = float((md.get("server") or {}).get("startup_s") or 0)
    p = md.get("prediction") or {}
    return {"knee": md.get("best_concurrency"), "steps": len(steps), "step_s": round(step_s),
            "gpu_s": round(step_s + start), "strategy": (md.get("search") or {}).get("strategy"),
            "loads": ",".join(f"{s['load']:g}{'' if s.get('passed') else '✗'}" for s in steps),
            "predicted": p.get("knee"), "calibration": p.get("calibration"),
            "simulated": bool(md.get("simulated") or (md.get("engine_info") or {}).get("simulated"))}


def main() -> int:
    pub_path, new_path, mode = sys.argv[1:4]
    pub = next(m for m in load_snapshot(pub_path)["modes"] if m["name"] == mode)
    new = next(m for m in load_snapshot(new_path)["modes"] if m["name"] == mode)
    a, b = figures(pub), figures(new)
    print(f"| {mode} | search | knee | steps | steps' s | GPU s (start + steps) | loads |")
    print("|---|---|---|---|---|---|---|")
    for name, f in ((f"published ({Path(pub_path).name})", a), (f"seeded ({Path(new_path).name})", b)):
        tag = " SIMULATED" if f["simulated"] else ""
        pred = f", predicted {f['predicted']:g} ({f['calibration']})" if f["predicted"] is not None else ""
        print(f"| {name}{tag} | {f['strategy']}{pred} | {f['knee']} | {f['steps']} | {f['step_s']} | {f['gpu_s']} | "
              f"{f['loads']} |")
    same = "same knee" if a["knee"] == b["knee"] else f"knee {a['knee']} → {b['knee']}"
    print(f"\n{same}; steps {a['steps']} → {b['steps']}; steps' GPU time {a['step_s']} → {b['step_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
