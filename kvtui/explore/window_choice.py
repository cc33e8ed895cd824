"""The window a scenario's steps need, so that a step spends most of its time measuring.

A continuous step lasts its warm-up, its window and its tail (docs/PROTOCOL.md). Under an SLO on
TPOT or E2E the tail waits for whole requests (kvtui.core.births): the window requests sent by one
request's duration before the window's end, at least `births.SAMPLE_FACTOR` × the classic sample
count of them, else every window request. At a low knee (a large model, a small GPU: few requests
at once, each lasting about output × the TPOT limit, ~12 s at 256 tokens and 50 ms) a 20 s window
holds too few of them, and the step waits one whole request after its window: qwen2.5-32b on an
H200, default `kvtui init`, 2 + 20 s of warm-up and window and ~13 s of tail, 1.6 × (warm-up +
window) at the median step, with 52 whole requests where the rule asks 80.

`window_for` is the shortest window whose step (`step_s`) stays within STEP_OVER_WINDOW ×
(warm-up + window): its wait for whole requests, and at the KV wall its start from an idle server
after every preemption. `suggest_window` predicts a scenario's first mode (the baseline, whose
knee is the lowest in every bundled shape where it has one; else the next mode with a knee) on the
offline simulator and sizes the window for its knee and for the first load above it, whose
longer requests wait longer: half of a confirmed search's steps (sized for the knee alone,
llama-3.1-8b on an H200 at 512 + 1,024 tokens took 1.51 x at the median step). `kvtui init`
writes it, with why, where it is longer than the default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

from kvtui.io.scenario.schema import Scenario

# The bound on a modelled step: warm-up + window + its wait ≤ STEP_OVER_WINDOW × (warm-up + window).
# Inside issue 28's 1.5, with room for the model's error (measured: 1.06–1.34, bench/results/init_window.md).
STEP_OVER_WINDOW = 1.4
# The whole tail lasts a little longer than one median duration: the last window request's own
# duration (lengths ±10 %) and its wait for a first token. qwen2.5-32b bf16 on an H200: 13.6–14.5 s
# of tail after a 30 s window for an E2E p50 of 12.4 s.
TAIL_OVER_E2E = 1.15
SPREAD_OVER_E2E = 0.1  # where the whole requests counted were sent early enough: the wait is their spread
# At the KV wall about every other step follows one that preempted, and starts from an idle server
# (its first sends spread over one request); the other continues. A step is counted with this share
# of that start: a median step between the two kinds.
DRAIN_SHARE = 0.5
ROUND_S = 5.0  # a window is a round number of seconds
MAX_WINDOW_S = 600.0  # no search past this (a knee of one or two requests: the sample count sizes it)


@dataclass(frozen=True)
class WindowChoice:
    window_s: float
    why: str
    load: float  # the predicted load it was sized for: the knee, or the first load above it (at_fail)
    e2e_s: float  # a request's duration there
    at_fail: bool = False
    mode: str = ""  # the mode it was sized for: the first whose prediction has a knee
    # the modes before it predicted to meet the SLO at no load, each with what fails at its lowest load
    no_knee: tuple[tuple[str, str], ...] = ()


def step_s(window: float, load: float, e2e_s: float, tail: str, births: int, warmup_s: float,
           drains: bool = False, need: int = 0) -> float:
    """A continued step's length at `load` with this window, whose requests last `e2e_s`: its warm-up,
    its window and the wait after it. Under the births rule the wait is for the `births` whole requests
    it counts (kvtui.core.births.births_cutoff): their spread where they were sent by one duration
    before the window's end; else until the births-th one sent has finished; else (the window holds
    fewer) until the last window request has (TAIL_OVER_E2E durations). Otherwise the window's first
    tokens, which take no time here. `drains`: at the KV wall, where every step after a preemption
    starts from an idle server and spreads its first sends over one duration (DRAIN_SHARE of it).
    `need`: a window that has sent fewer requests than the SLO's percentiles need goes on until it has
    (kvtui.runtime.load.generator, the simulator alike)."""
    from kvtui.core.protocol import MAX_STAGGER_S

    rate = max(1.0, load) / e2e_s  # requests sent a second in the steady state
    window = max(window, need / rate)
    start = warmup_s + (DRAIN_SHARE * min(MAX_STAGGER_S, e2e_s) if drains else 0.0)
    if tail != "births":
        return start + window
    if rate * (window - e2e_s) >= births:
        return start + window + SPREAD_OVER_E2E * e2e_s
    if rate * window >= births:
        return start + max(window, births / rate + TAIL_OVER_E2E * e2e_s)
    return start + window + TAIL_OVER_E2E * e2e_s


def window_for(load: float, e2e_s: float, tail: str, need: int, window_s: float,
               warmup_s: float = 0.0, drains: bool = False) -> tuple[float, str]:
    """The shortest window, from `window_s` up in ROUND_S steps, for a closed-loop step at `load` whose
    requests last `e2e_s`: one whose step (`step_s`: its start from an idle server where it `drains`,
    its window's going on until it has sent the `need` requests the SLO's percentiles ask, its wait for
    whole requests under the births rule) stays within STEP_OVER_WINDOW × (warm-up + window).
    (window_s, "") where that is `window_s`.

    A window shorter than the time to send `need` requests is not refused: it goes on until it has
    (measuring, not waiting), and a longer one would hold every other load of the search (the first
    fail sends faster) for as long. llama-3.1-8b fp8-w on an L4, knee 2: 261 s to send 40 requests,
    200 s written, the first fail's steps at 3 then 217 s instead of 282 s."""
    from kvtui.core.births import SAMPLE_FACTOR

    rate = max(1.0, load) / e2e_s
    births = SAMPLE_FACTOR * need
    w = window_s
    while w < MAX_WINDOW_S and (step_s(w, load, e2e_s, tail, births, warmup_s, drains, need)
                                > STEP_OVER_WINDOW * (warmup_s + w)):
        w = ROUND_S * (math.floor(w / ROUND_S + 1e-9) + 1)
    if w <= window_s:
        return window_s, ""
    bound = f"stays within {STEP_OVER_WINDOW:g} x (warm-up + window)"
    if drains:
        return w, (f"the shortest whose step, at the KV wall where every other step starts from an idle server "
                   f"(its first sends spread over one {e2e_s:.1f} s request), {bound}")
    if w < need / rate or tail != "births":
        return w, (f"the shortest whose step, going on until it has sent the {need} requests the SLO's percentiles "
                   f"need ({rate:.2g} sent a second: {need / rate:.0f} s), {bound}")
    counted = births if rate * w >= births else int(rate * w)
    return w, (f"the shortest whose step, with its wait for the {counted} whole requests it counts ({rate:.1f} sent "
               f"a second), {bound}")


def suggest_window(sc: Scenario, calibration: Any = None,
                   nvml: Callable[[], tuple[str | None, str]] | None = None) -> WindowChoice | None:
    """The window for `sc`'s first mode with a predicted knee, at its knee and the first load above it
    (the two loads a search ends on), where it is longer than sc.ramp.window_s. The modes before it,
    predicted to meet the SLO at no load, are named in `no_knee` (then a choice may keep the window).

    None where nothing is to change: an open loop, no prediction (the GPU or
    the model is not in the catalogue, or the simulator cannot model the mode), or a knee whose
    requests the window already holds. Where a TPOT target bounds a request's duration at the knee
    (about output × the limit), one simulated load first: the lowest at which the window holds its
    whole requests. If that passes, the knee is above it and the window stands (a fraction of the
    full prediction's cost, which `kvtui init` pays on every scenario it writes)."""
    from kvtui.core.births import SAMPLE_FACTOR
    from kvtui.core.protocol import mean_length, tail_for
    from kvtui.core.stats import PCTS, min_samples_for
    from kvtui.errors import KvtuiError
    from kvtui.explore.prediction import Simulator, _sim_scenario, predict_mode, predicted_at, resolve_target
    from kvtui.simulator.engine.budget import SimulationCut
    from kvtui.simulator.engine.fastrun import SimConfigError
    from kvtui.simulator.model.roofline import as_calibration

    r = sc.ramp
    if r.load != "concurrency" or not sc.modes:
        return None
    cal = as_calibration(calibration)
    nvml = nvml or (lambda: (None, "kvtui init predicts for the scenario's GPU"))
    out = mean_length(sc.workload.output_tokens)
    need = max([min_samples_for(PCTS[p]) for _, p, _ in sc.slo.targets()] + [r.min_samples])
    tail = tail_for(sc)
    tpot = next((v for m, p, v in sc.slo.targets() if m == "tpot"), None)
    # The first mode whose prediction has a knee: where the baseline meets the SLO at no load (a small
    # GPU: llama-3.1-8b bf16 on an L4 reads ~70 ms a token alone), the lowest knee is the next mode's.
    no_knee: list[tuple[str, str]] = []

    def standing() -> WindowChoice | None:
        """The window stands: None, or where modes were predicted to meet the SLO at no load, a choice of
        the window as it is that says so (kvtui init writes it in the scenario)."""
        if not no_knee:
            return None
        return WindowChoice(window_s=r.window_s, why="", load=0.0, e2e_s=0.0, no_knee=tuple(no_knee))

    for mode in sc.modes:
        try:
            if tail == "births" and tpot:
                e2e_top = max(0.0, out - 1) * float(tpot) / 1e3
                if 0 < e2e_top < r.window_s:
                    target = resolve_target(sc, mode, nvml)
                    if target.why:
                        return standing()
                    n_hi = math.ceil(SAMPLE_FACTOR * need * e2e_top / (r.window_s - e2e_top))
                    if Simulator(_sim_scenario(sc, target), mode, cal, True).step(float(n_hi))["passed"]:
                        return standing()
            pred = predict_mode(sc, mode, cal, nvml=nvml)
        except (SimConfigError, SimulationCut, KvtuiError):
            return standing()
        knee = pred.get("knee")
        if not pred.get("covered"):
            return standing()
        if not knee or not predicted_at(pred, knee):
            lowest = min((float(c["load"]) for c in pred.get("curve") or []), default=None)
            if pred.get("first_fail") is not None and lowest is not None and pred["first_fail"] <= lowest:
                no_knee.append((mode.name, _failing(predicted_at(pred, lowest), lowest)))
                continue  # no load passes in this mode: size for the next
            return standing()
        # At the KV wall (the first load above the knee preempts) every step after a preemption drains.
        fail = predicted_at(pred, pred["first_fail"]) if pred.get("first_fail") else None
        drains = bool(fail and fail.get("limited_by") == "kv_wall")
        # A search ends by measuring the knee and the first load above it (and their repeats): half its
        # steps are at the first fail, whose requests last longer. The window is sized for both loads.
        best: WindowChoice | None = None
        for at in (knee, pred.get("first_fail")):
            if not at:
                continue
            load = float(at)
            e2e = _duration_at(predicted_at(pred, load), load, out)
            if e2e is None:
                continue
            w, why = window_for(load, e2e, tail, need, r.window_s, r.warmup_s, drains)
            if w > r.window_s and (best is None or w > best.window_s):
                best = WindowChoice(window_s=w, why=why, load=load, e2e_s=e2e, at_fail=at != knee, mode=mode.name)
        return replace(best, no_knee=tuple(no_knee)) if best else standing()
    return standing()


def _failing(point: dict[str, Any] | None, load: float) -> str:
    """What the prediction fails on at `load`: "TPOT p95 ~70 ms > 50 ms at 1 request at a time"."""
    d = (point or {}).get("deciding") or {}
    at = f"at {load:g} request{'s' if load != 1 else ''} at a time"
    if not d.get("target") or d.get("value") is None:
        return f"fails {at}"
    target = str(d["target"])
    if not target.endswith("_ms"):  # a rate or a count (errors, preemptions per request)
        return f"{target.replace('_', ' ')} {float(d['value']):.3g} > {float(d['limit']):g} {at}"
    name = target.removesuffix("_ms").replace("_", " ").upper().replace(" P", " p")
    return f"{name} ~{float(d['value']):.0f} ms > {float(d['limit']):g} ms {at}"


def _duration_at(point: dict[str, Any] | None, load: float, out: float) -> float | None:
    """A request's duration (s) at a predicted point: Little's law in the closed loop (`load` requests
    of `out` tokens at its output tok/s), else TTFT + (out − 1) × TPOT; None where neither is known."""
    if not point:
        return None
    tok_s = point.get("output_tok_s") or 0.0
    if tok_s > 0:
        return float(load * out / tok_s)
    e2e = ((point.get("ttft_p95_ms") or 0.0) + max(0.0, out - 1) * (point.get("tpot_p95_ms") or 0.0)) / 1e3
    return float(e2e) if e2e > 0 else None
