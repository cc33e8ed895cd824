"""The window a scenario's steps need, so that a step spends most of its time measuring.

A continuous step lasts its warm-up, its window and its tail (docs/PROTOCOL.md). Under an SLO on
TPOT or E2E the tail waits for whole requests (kvtui.load.births): the window requests sent by one
request's duration before the window's end, at least `births.SAMPLE_FACTOR` × the classic sample
count of them, else every window request. At a low knee (a large model, a small GPU: few requests
at once, each lasting about output × the TPOT limit, ~12 s at 256 tokens and 50 ms) a 20 s window
holds too few of them, and the step waits one whole request after its window: qwen2.5-32b on an
H200, default `kvtui init`, 2 + 20 s of warm-up and window and ~13 s of tail, 1.6 × (warm-up +
window) at the median step, with 52 whole requests where the rule asks 80.

`window_for` is the window one load needs; `suggest_window` predicts a scenario's first mode (the
baseline, whose knee is the lowest in every bundled shape) on the offline simulator and sizes the
window for its knee. `kvtui init` writes it, with why, where it is longer than the default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from kvtui.scenario.schema import Scenario

# With the whole tail (one request's duration after the window), the window that keeps a step
# within this many × (warm-up + window): (warm-up + W + e2e) / (warm-up + W) ≤ STEP_OVER_WINDOW.
STEP_OVER_WINDOW = 1.4
# The whole tail lasts a little longer than one median duration: the last window request's own
# duration (lengths ±10 %) and its wait for a first token. qwen2.5-32b bf16 on an H200: 13.6–14.5 s
# of tail after a 30 s window for an E2E p50 of 12.4 s.
TAIL_OVER_E2E = 1.15
ROUND_S = 5.0  # a window is a round number of seconds


@dataclass(frozen=True)
class WindowChoice:
    window_s: float
    why: str
    load: float  # the predicted knee it was sized for
    e2e_s: float  # a request's duration there


def window_for(load: float, e2e_s: float, tail: str, need: int, window_s: float,
               warmup_s: float = 0.0) -> tuple[float, str]:
    """The window a closed-loop step at `load` needs, whose requests last `e2e_s`, at least `window_s`.

    - The SLO's percentiles need `need` requests: the window lasts at least the time to send them
      (it would be extended to that anyway).
    - Under the births rule, the window holds the whole requests it counts: those sent by one
      duration before its end, SAMPLE_FACTOR × need of them, so the tail is only the spread of
      durations; where that would be longer, the window whose whole tail (one duration after it)
      keeps the step within STEP_OVER_WINDOW × (warm-up + window).
    Rounded up to ROUND_S."""
    from kvtui.load.births import SAMPLE_FACTOR

    n = max(1.0, load)
    rate = n / e2e_s  # requests sent a second in the steady state
    w = max(window_s, need / rate)
    why = f"long enough to send the {need} requests the SLO's percentiles need ({rate:.1f} sent a second)"
    if tail == "births":
        births = e2e_s + SAMPLE_FACTOR * need / rate
        cap = TAIL_OVER_E2E * e2e_s / (STEP_OVER_WINDOW - 1) - warmup_s
        if min(births, cap) > w:
            w = min(births, cap)
            why = (f"long enough for the {SAMPLE_FACTOR * need} whole requests the TPOT p95 counts ({rate:.1f} sent a "
                   f"second), so the step waits only for their spread after it" if births <= cap else
                   f"long enough that the wait for its last whole requests after it (one duration) keeps the "
                   f"step within {STEP_OVER_WINDOW:g} x (warm-up + window)")
    return (window_s, "") if w <= window_s else (ROUND_S * math.ceil(w / ROUND_S - 1e-9), why)


def suggest_window(sc: Scenario, calibration: Any = None,
                   nvml: Callable[[], tuple[str | None, str]] | None = None) -> WindowChoice | None:
    """The window for `sc`'s first mode at its predicted knee, where it is longer than sc.ramp.window_s.

    None where nothing is to change: an open loop, the classic protocol, no prediction (the GPU or
    the model is not in the catalogue, or the simulator cannot model the mode), or a knee whose
    requests the window already holds. Where a TPOT target bounds a request's duration at the knee
    (about output × the limit), one simulated load first: the lowest at which the window holds its
    whole requests. If that passes, the knee is above it and the window stands (a fraction of the
    full prediction's cost, which `kvtui init` pays on every scenario it writes)."""
    from kvtui.engines.sim.budget import SimulationCut
    from kvtui.engines.sim.fastrun import SimConfigError
    from kvtui.errors import KvtuiError
    from kvtui.explore.prediction import Simulator, _sim_scenario, predict_mode, predicted_at, resolve_target
    from kvtui.explore.protocol import mean_length, tail_for
    from kvtui.explore.stats import PCTS, min_samples_for
    from kvtui.load.births import SAMPLE_FACTOR
    from kvtui.predict.roofline import as_calibration

    r = sc.ramp
    if r.load != "concurrency" or r.protocol != "continuous" or not sc.modes:
        return None
    mode, cal = sc.modes[0], as_calibration(calibration)
    nvml = nvml or (lambda: (None, "kvtui init predicts for the scenario's GPU"))
    out = mean_length(sc.workload.output_tokens)
    need = max([min_samples_for(PCTS[p]) for _, p, _ in sc.slo.targets()] + [r.min_samples])
    tail = tail_for(sc)
    tpot = next((v for m, p, v in sc.slo.targets() if m == "tpot"), None)
    try:
        if tail == "births" and tpot:
            e2e_top = max(0.0, out - 1) * float(tpot) / 1e3
            if 0 < e2e_top < r.window_s:
                target = resolve_target(sc, mode, nvml)
                if target.why:
                    return None
                n_hi = math.ceil(SAMPLE_FACTOR * need * e2e_top / (r.window_s - e2e_top))
                if Simulator(_sim_scenario(sc, target), mode, cal, True).step(float(n_hi))["passed"]:
                    return None
        pred = predict_mode(sc, mode, cal, nvml=nvml)
    except (SimConfigError, SimulationCut, KvtuiError):
        return None
    knee = pred.get("knee")
    point = predicted_at(pred, knee) if knee else None
    if not knee or not point:
        return None
    tok_s = point.get("output_tok_s") or 0.0
    if tok_s > 0:
        e2e = knee * out / tok_s  # Little's law in the closed loop: N requests of `out` tokens at tok_s
    else:
        e2e = ((point.get("ttft_p95_ms") or 0.0) + max(0.0, out - 1) * (point.get("tpot_p95_ms") or 0.0)) / 1e3
    if e2e <= 0:
        return None
    w, why = window_for(knee, e2e, tail, need, r.window_s, r.warmup_s)
    if w <= r.window_s:
        return None
    return WindowChoice(window_s=w, why=why, load=float(knee), e2e_s=e2e)
