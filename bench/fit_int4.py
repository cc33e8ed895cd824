"""Fit the simulator's two int4 (AWQ, Marlin W4A16) step factors on kvtui's real H200 AWQ steps.

bench/fit_calibration.py fits bf16 and fp8 on vLLM's own benchmark and kvtui's first H200 run;
it has no int4 data, so int4 kept priors (0.9 × bf16 weight bandwidth, 0.7 × bf16 GEMM
efficiency) that made the AWQ decode ~40 % slow (docs/SIMULATOR.md §7). Two kvtui runs of the
article's pair exist now, both vLLM 0.26.0 on an H200, 8B shape, AWQ int4 + fp8 KV:

- docs/results/h200-v2.json, the whole GPU (13 steps, c = 64–256): the FIT data;
- docs/results/h200-kvb.json, vLLM given 25 % of the GPU (7 steps, c = 100–200): HELD OUT —
  its steps and its knee are predicted with the fitted factors, never fitted on.

Each candidate replays every AWQ step of the fit run through the real scheduler
(bench/sim_vs_h200.simulate_run: the same loads, client and windows) and scores the sum of
squared log errors of out tok/s, TPOT p50 and p95, ITL p99 (weight 1) and ITL p50 (0.5) —
sim_vs_h200.STEP_FIT_WEIGHTS, the weights bench/fit_calibration.py uses for kvtui's run. A
coarse grid, then a finer one around the best.

    .venv/bin/python bench/fit_int4.py            # ~2 min on 2 cores; prints the fit and the held-out check
    .venv/bin/python bench/fit_int4.py --write    # also writes the two factors into the calibration file
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import sim_vs_h200 as S  # noqa: E402

from kvtui.simulator.model.roofline import DEFAULT_CALIBRATION, load_calibration  # noqa: E402
from kvtui.io.snapshot.file import load_snapshot  # noqa: E402

MODE = "awq-int4+fp8-kv"
FIT = ROOT / "docs/results/h200-v2.json"
HELD_OUT = ROOT / "docs/results/h200-kvb.json"


def with_int4(cal, bw: float, gemm: float):
    return dataclasses.replace(cal, weights_bw_eff={**cal.weights_bw_eff, "int4": bw}, gemm_eff={**cal.gemm_eff, "int4": gemm})


def replay(doc: dict, cal) -> list:
    client = S.replay_client(None, S.client_kind(doc)[0], doc)
    return S.simulate_run(doc, cal, client, modes=[MODE])


def loss(rows: list) -> float:
    total = 0.0
    for r in rows:
        for (key, pct), w in S.STEP_FIT_WEIGHTS.items():
            s, m = S.fig(r.sim, key, pct), S.fig(r.real, key, pct)
            if s and m and not math.isinf(s) and not math.isinf(m):
                total += w * math.log(s / m) ** 2
    return total


def search(doc: dict, cal, bws: list[float], gemms: list[float]) -> tuple[float, float, float]:
    best = (math.inf, 0.0, 0.0)
    for bw in bws:
        for g in gemms:
            v = loss(replay(doc, with_int4(cal, bw, g)))
            best = min(best, (v, bw, g))
    return best


def report(title: str, doc: dict, cal) -> None:
    rows = replay(doc, cal)
    print(f"{title}: {len(rows)} steps, verdicts agree on {S.agreement(rows)}")
    print(S.summary_table(rows))
    print()


def write(path: Path, bw: float, gemm: float) -> None:
    text = path.read_text()
    text = re.sub(r"(weights_bw_eff = \{[^}]*int4 = )[0-9.]+", lambda m: f"{m.group(1)}{bw:g}", text)
    text = re.sub(r"(gemm_eff = \{[^}]*int4 = )[0-9.]+", lambda m: f"{m.group(1)}{gemm:g}", text)
    path.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help=f"write the fitted factors into {DEFAULT_CALIBRATION.relative_to(ROOT)}")
    a = ap.parse_args()
    cal = load_calibration()
    fit_doc, held = load_snapshot(FIT), load_snapshot(HELD_OUT)
    print(f"int4 now: weights_bw_eff {cal.weights_bw_eff['int4']:g}, gemm_eff {cal.gemm_eff['int4']:g} "
          f"(bf16: {cal.weights_bw_eff['bf16']:g}, {cal.gemm_eff['bf16']:g})\n")
    report("fit run, before", fit_doc, cal)
    report("held-out run, before", held, cal)
    coarse = search(fit_doc, cal, [0.1, 0.15, 0.2, 0.3, 0.45, 0.6, 0.75], [0.4, 0.55, 0.7, 0.85, 1.0])
    _, bw0, g0 = coarse
    fine = search(fit_doc, cal, [round(bw0 + d, 3) for d in (-0.03, -0.015, 0, 0.015, 0.03) if bw0 + d > 0],
                  [round(g0 + d, 3) for d in (-0.075, -0.0375, 0, 0.0375, 0.075) if g0 + d > 0])
    v, bw, g = min(coarse, fine)
    print(f"fitted on {FIT.name} ({MODE}): weights_bw_eff int4 = {bw:g}, gemm_eff int4 = {g:g} (loss {v:.3f})\n")
    new = with_int4(cal, bw, g)
    report("fit run, after", fit_doc, new)
    report("held-out run, after", held, new)
    for name, doc in (("fit", fit_doc), ("held-out", held)):
        sweep = S.knee_sweep(doc, new, S.replay_client(None, S.client_kind(doc)[0], doc), modes=[MODE])
        real = next(m for m in doc["modes"] if m["name"] == MODE).get("best_concurrency")
        print(f"{name} run: simulated AWQ knee {S.knee_of(sweep[MODE])} (real {real:g})")
    if a.write:
        write(DEFAULT_CALIBRATION, bw, g)
        print(f"\nwrote {DEFAULT_CALIBRATION.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
