"""Modes side by side against the baseline: the comparative answer a run exists for.

Everything here is a pure function of a snapshot document (`doc["modes"]` and
`doc["scenario"]`), so a replayed, imported or diffed snapshot gets exactly the numbers
the live run printed. The arithmetic, per mode:

- **best**: the mode's max load at the SLO (`best_concurrency`, from the search).
- **at the knee**: the *passing* steps at the best load (the search step and its
  confirmation repeat; never a step cut short by a stop, whose in-flight requests were
  cancelled). Preemptions, KV use and prefix-cache hit rate at the knee are the maximum
  over those steps.
- **@SLO rates and cost**: output / input / total tok/s and error rate, averaged over the
  steps of the *fastest* load that met the SLO (`peak_load`): the knee, or a lower load
  whose every step passed and whose mean output tok/s beats the knee's by more than
  `PEAK_MARGIN` (5 %: on a plateau, repeats of one load differ by a few per cent, and a
  lower load picked by that noise would move every published figure). They differ where the
  KV cache binds: past the KV wall vLLM preempts and recomputes prefills, so more requests
  at once can still meet the SLO yet deliver fewer tokens (H200, KV limited to 25 %, fp8 KV:
  148 concurrent at 2,759 tok/s, 132 at 4,144 — docs/RESULTS.md). The cheapest
  tokens within the SLO are at the fastest load; the knee's own figure is `knee_output_tok_s`.
- **next step**: the first failing load above the best (`search.first_fail`): what
  limited it (`limited_by`) and its preemptions — why the mode could not go higher.
- **peak GPU GiB**: the largest `gpu_mem_used_gib_max` over all the mode's steps.
- **×**: mode ÷ baseline (max load, output tok/s @SLO, KV tokens).
- **$/Mtok**: GPU cost per million tokens at the fastest load, output and input separately:

      usd_per_mtok_out = gpu_hourly_usd × gpus / 3600 / output_tok_s × 10⁶ × billed_share

  All GPU time is attributed to the tokens counted (the usual way to quote serving cost),
  so $/Mtok out and $/Mtok in are each "what a million of them cost if they carried the
  whole bill". The step's token rates count only tokens of requests that delivered them
  (failed requests add none), so with `cost.count_failed = true` (the default) the GPU
  time burnt by failed requests — and by the retries a client would send — is billed to
  the successful tokens: billed_share = 1. With `count_failed = false` that time is left
  out: billed_share = 1 − error rate at the fastest load.
  `gpus` is `cost.gpus`, or the server's tensor_parallel_size when 0.
- **Δ cost**: mode's $/Mtok ÷ baseline's − 1.

The baseline is the first mode in the scenario's order (else the snapshot's) that has a
result; when the first mode has none the note says which mode stood in.
"""

from __future__ import annotations

from typing import Any

from kvtui.core import knee_interval
from kvtui.core.results import ModeResult, StepResult
from kvtui.io.scenario.schema import Scenario
from kvtui.io.snapshot.schema import Step


def measured_steps(mode: dict[str, Any]) -> list[dict[str, Any]]:
    """The mode's steps that ran to their end (`evaluate.ran_to_its_end`)."""
    return [s.raw for s in ModeResult.from_dict(mode).measured_steps]


def passing_at(step: Step, load: float | None) -> bool:
    """Whether `step` ran to its end at `load` and passed: at the best load, a knee step (what every
    "at the knee" figure averages)."""
    return load is not None and step.ran_to_its_end and step.load == load and bool(step.passed)


def _passing_at(mode: ModeResult, load: float | None) -> list[StepResult]:
    return [s for s in mode.steps if passing_at(s.typed, load)]


def _knee(mode: ModeResult) -> list[StepResult]:
    return _passing_at(mode, mode.best)


def knee_steps(mode: dict[str, Any]) -> list[dict[str, Any]]:
    """The passing steps at the mode's best load (what every "at the knee" figure averages)."""
    return [s.raw for s in _knee(ModeResult.from_dict(mode))]


PEAK_MARGIN = 0.05


def _peak(mode: ModeResult) -> list[StepResult]:
    best = mode.best
    knee = _knee(mode)
    if best is None:
        return knee
    by_load: dict[float, list[StepResult]] = {}
    for s in mode.measured_steps:
        if s.load is not None and s.load < best:
            by_load.setdefault(s.load, []).append(s)
    knee_rate = _mean(_vals(knee, "output_tok_s"))
    top, top_rate = knee, knee_rate
    for load in sorted(by_load, reverse=True):
        ss = by_load[load]
        rate = _mean(_vals(ss, "output_tok_s"))
        if not all(s.passed for s in ss) or rate is None:
            continue
        if (knee_rate is None or rate > knee_rate * (1 + PEAK_MARGIN)) and (top_rate is None or rate > top_rate):
            top, top_rate = ss, rate
    return top


def peak_steps(mode: dict[str, Any]) -> list[dict[str, Any]]:
    """The steps of the fastest load that met the SLO (what the "@SLO" rates and $/Mtok average):
    the knee's passing steps, or those of a lower load whose every measured step passed and whose
    mean output tok/s beats the knee's by more than PEAK_MARGIN. Loads above the knee never count
    (a pass there was a flip)."""
    return [s.raw for s in _peak(ModeResult.from_dict(mode))]


def _next(mode: ModeResult) -> list[StepResult]:
    fail = mode.first_fail
    if fail is None:
        return []
    return [s for s in mode.measured_steps if s.load == fail and s.passed is False]


def next_steps(mode: dict[str, Any]) -> list[dict[str, Any]]:
    """The failing steps at the first failing load above the best."""
    return [s.raw for s in _next(ModeResult.from_dict(mode))]


def _vals(steps: list[StepResult], key: str) -> list[float]:
    return [v for v in (s.number(key) for s in steps) if v is not None]


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _max(xs: list[float]) -> float | None:
    return max(xs) if xs else None


def _round(x: float | None, n: int = 4) -> float | None:
    return None if x is None else round(x, n)


def usd_per_mtok(tok_s: float | None, gpu_hourly: float, gpus: int, billed_share: float = 1.0) -> float | None:
    """GPU dollars per million tokens at `tok_s` tokens/s (None when there is no rate or no price)."""
    if not tok_s or tok_s <= 0 or not gpu_hourly or gpu_hourly <= 0:
        return None
    return gpu_hourly * gpus / 3600.0 / tok_s * 1e6 * billed_share


def cost_settings(scenario: dict[str, Any] | Scenario) -> dict[str, Any]:
    if not isinstance(scenario, dict):  # its fields, not a whole to_dict() per mode (10,000 modes: seconds)
        c = scenario.cost
        return {"gpu_hourly_usd": c.gpu_hourly_usd or 0.0, "gpus": int(c.gpus or scenario.server.tensor_parallel_size
                                                                       or 1), "count_failed": c.count_failed}
    sc = scenario
    cost = sc.get("cost") or {}
    gpus = cost.get("gpus") or (sc.get("server") or {}).get("tensor_parallel_size") or 1
    return {"gpu_hourly_usd": cost.get("gpu_hourly_usd") or 0.0, "gpus": int(gpus),
            "count_failed": cost.get("count_failed", True)}


def peak_per_gpu(mode: dict[str, Any]) -> list[float] | None:
    """Peak memory of each GPU the mode used (tensor parallel: one figure per GPU), from the
    NVML series; None when the series has no per-GPU samples."""
    peaks: dict[int, float] = {}
    for row in mode.get("series") or []:
        for g in row.get("gpus") or []:
            v = g.get("mem_used_gib")
            if v is not None:
                i = int(g.get("index", 0))
                peaks[i] = max(peaks.get(i, 0.0), float(v))
    return [round(peaks[i], 2) for i in sorted(peaks)] or None


def mode_summary(mode: dict[str, Any], scenario: dict[str, Any] | Scenario) -> dict[str, Any]:
    """One mode's comparison figures (absolute; the ratios are added by `compare_modes`)."""
    cs = cost_settings(scenario)
    m = ModeResult.from_dict(mode)
    best = mode.get("best_concurrency")
    at = _knee(m)
    peak = _peak(m)
    nxt = _next(m)
    steps = m.steps
    out_tok = _mean(_vals(peak, "output_tok_s"))
    in_tok = _mean(_vals(peak, "input_tok_s"))
    total_tok = _mean(_vals(peak, "total_tok_s"))
    err = _mean(_vals(peak, "error_rate"))  # what the billed share of the @SLO cost discounts
    billed = 1.0 if cs["count_failed"] else 1.0 - (err or 0.0)
    server = m.server
    info = m.engine_info
    load_kind = next((s.load_kind for s in steps if s.load_kind), None) or "concurrency"
    mems = _vals(steps, "gpu_mem_used_gib_max")
    return {
        "mode": mode.get("name"),
        "engine": info.get("engine") or mode.get("engine"),
        "version": info.get("version"),
        "simulated": m.simulated,
        "dummy_weights": bool(info.get("dummy_weights")),
        "load_kind": load_kind,
        "best": best,
        # no measured load failed above the best: the knee is a floor, shown "≥ N" by every view
        "best_lower_bound": lower_bound(mode),
        "search": m.search.get("describe"),
        "knee_steps": len(at),
        "knee_output_tok_s": _round(_mean(_vals(at, "output_tok_s")), 1),
        "peak_load": peak[0].raw.get("load") if peak else None,
        "output_tok_s": _round(out_tok, 1),
        "input_tok_s": _round(in_tok, 1),
        "total_tok_s": _round(total_tok, 1),
        "error_rate_at_knee": _round(_mean(_vals(at, "error_rate")), 4),
        "error_rate_at_peak": _round(err, 4),
        "preemptions_at_knee": _max(_vals(at, "preemptions")),
        "prefix_cache_hit_rate_at_knee": _round(_max(_vals(at, "prefix_cache_hit_rate")), 4),
        "kv_cache_usage_at_knee": _round(_max(_vals(at, "kv_cache_usage_max")), 4),
        "next_load": m.search.get("first_fail"),
        # The last failing step at that load decided (the confirmation); every distinct limit of those
        # steps is kept, so the answer never names one the dashboard's step rows contradict.
        "knee_limited_by": nxt[-1].raw.get("limited_by") if nxt else None,
        "knee_limits": sorted({str(s.raw.get("limited_by")) for s in nxt if s.raw.get("limited_by")}),
        "preemptions_next": _max(_vals(nxt, "preemptions")),
        "peak_gpu_mem_gib": _round(max(mems), 2) if mems else None,
        "peak_gpu_mem_gib_per_gpu": peak_per_gpu(mode),
        "weights_gib": server.get("weights_gib"),
        "kv_cache_gib": server.get("kv_cache_gib"),
        "kv_tokens": server.get("kv_cache_tokens"),
        "billed_share": round(billed, 4),
        "usd_per_mtok_out": _round(usd_per_mtok(out_tok, cs["gpu_hourly_usd"], cs["gpus"], billed)),
        "usd_per_mtok_in": _round(usd_per_mtok(in_tok, cs["gpu_hourly_usd"], cs["gpus"], billed)),
        "warnings": list(server.get("warnings") or []),
        "error": m.error_message,
        "complete": mode.get("complete"),
        # the knee's interval, from the steps' pass probabilities (new runs; absent before: the
        # exports of an older snapshot stay as they were)
        **({"knee_interval": ki} if (ki := knee_interval.for_mode(mode.get("steps") or [], best)) else {}),
    }


NOTHING_MEASURED = "stopped before any step finished: nothing was measured, no verdict"


def _finished_steps(mode: dict[str, Any]) -> list[Any]:
    """The mode's steps that ran to their end (a verdict rests on them)."""
    from kvtui.io.snapshot.schema import Mode

    return Mode.of(mode).measured_steps


def lower_bound(mode: dict[str, Any]) -> bool:
    """Whether the mode's knee is a lower bound (`Mode.limit_is_higher`: every load it measured
    above the best passed, or none was measured above it)."""
    from kvtui.io.snapshot.schema import Mode

    return Mode.of(mode).limit_is_higher


def ratio_bound(r: dict[str, Any], base: dict[str, Any] | None) -> str | None:
    """How the max-load × reads when a knee is a floor: "≥" (this row's knee a floor, the
    baseline's bounded), "≤" (the other way), "?" (both floors: no ratio is known), None (both bounded)."""
    if base is None or r is base or r.get("best") is None or base.get("best") is None:
        return None
    mine, theirs = bool(r.get("best_lower_bound")), bool(base.get("best_lower_bound"))
    if mine and theirs:
        return "?"
    return "≥" if mine else "≤" if theirs else None


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b:
        return None
    return round(a / b, 3)


def _change(a: float | None, b: float | None) -> float | None:
    return round(a / b - 1, 4) if a is not None and b else None


def add_ratios(r: dict[str, Any], base: dict[str, Any] | None) -> dict[str, Any]:
    """× and Δ of row `r` against row `base` (in place; None where either side lacks the figure)."""
    if base is None:
        r.update(best_x=None, tok_s_x=None, kv_tokens_x=None, cost_out_change=None, cost_in_change=None)
        return r
    r["best_x"] = _ratio(r["best"], base["best"])
    bound = ratio_bound(r, base)
    if bound is not None or "best_x_bound" in r:
        r["best_x_bound"] = bound
    r["tok_s_x"] = _ratio(r["output_tok_s"], base["output_tok_s"])
    r["kv_tokens_x"] = _ratio(r["kv_tokens"], base["kv_tokens"])
    r["cost_out_change"] = _change(r["usd_per_mtok_out"], base["usd_per_mtok_out"])
    r["cost_in_change"] = _change(r["usd_per_mtok_in"], base["usd_per_mtok_in"])
    return r


def _quality(doc: dict[str, Any], rows: list[dict[str, Any]]) -> str | None:
    """Quality guard: each mode's fixed-prompt outputs against the first mode that collected some."""
    from kvtui.explore.quality import compare_quality, thresholds

    modes = doc.get("modes", [])
    if not any(m.get("quality") for m in modes):
        for r in rows:
            r["quality"] = None
        return None
    th = thresholds(doc.get("scenario") or {})
    ref = next((m for m in modes if (m.get("quality") or {}).get("outputs")), None)
    for m, r in zip(modes, rows):
        q = m.get("quality")
        if not q:
            r["quality"] = None
        elif q.get("skipped"):
            r["quality"] = {"skipped": q["skipped"]}
        elif ref is None:
            r["quality"] = {"skipped": "no mode collected outputs to compare against"}
        elif m is ref:
            r["quality"] = {"reference": True, "prompts": len(q.get("outputs") or [])}
        else:
            r["quality"] = compare_quality(ref["quality"], q, th)
        _suite(doc, ref, m, r, th)
    return ref.get("name") if ref else None


def _suite(doc: dict[str, Any], ref: dict[str, Any] | None, m: dict[str, Any], r: dict[str, Any],
           th: dict[str, float]) -> None:
    """The quality suite's verdicts (kvtui.quality.verdict) and the quality-adjusted $/Mtok."""
    from kvtui.explore.quality import compare_quality
    from kvtui.quality.verdict import compare_suites, reference_summary

    q = r.get("quality")
    tasks = (m.get("quality") or {}).get("tasks")
    r["usd_per_mtok_out_qadj"] = r["usd_per_mtok_in_qadj"] = None
    if not q or q.get("skipped") or not tasks:
        return
    ref_tasks = (ref.get("quality") or {}).get("tasks") if ref else None
    if m is ref or not ref_tasks:
        suite = reference_summary(tasks)
    else:
        sc = doc.get("scenario") or {}
        tol = float(((sc.get("quality") or {}) if isinstance(sc, dict) else {}).get("tolerance_pt", 2.0) or 0.0)
        suite = compare_suites(ref_tasks, tasks, tol, agreement=lambda a, b: compare_quality(a, b, th))
        if suite.get("flagged"):
            bad = [f"{name} {v['delta_pt']:+.1f} pt" for name, v in suite["tasks"].items()
                   if isinstance(v, dict) and v.get("verdict") == "regression"]
            q["flagged"] = True
            q["why"] = "; ".join([w for w in [q.get("why"), "accuracy regression: " + ", ".join(bad)] if w])
    suite["wall_s"] = ((m.get("quality") or {}).get("suite") or {}).get("wall_s")
    q["suite"] = suite
    f = suite.get("cost_factor")
    if f is not None:
        for k in ("out", "in"):
            v = r.get(f"usd_per_mtok_{k}")
            r[f"usd_per_mtok_{k}_qadj"] = None if v is None else v * f
    _equal_quality(ref_tasks if m is not ref else None, tasks, m, r, suite, doc)
    knee = (m.get("quality") or {}).get("at_knee")
    if isinstance(knee, dict):  # the answers under the knee's load against alone (kvtui.explore.knee_quality)
        v = knee.get("vs_alone") or {}
        q["at_knee"] = {"skipped": knee.get("skipped"), "load": knee.get("load"), "changed": v.get("changed"),
                        "compared": v.get("compared"), "delta_pt": v.get("delta_pt"),
                        "delta_ci_pt": v.get("delta_ci_pt"), "p_value": v.get("p_value"), "verdict": v.get("verdict"),
                        "preemptions": knee.get("preemptions"),
                        "top1_agreement": ((v.get("tasks") or {}).get("agreement") or {}).get("top1_agreement")}


def _equal_quality(ref_tasks: dict[str, Any] | None, tasks: dict[str, Any], m: dict[str, Any], r: dict[str, Any],
                   suite: dict[str, Any], doc: dict[str, Any]) -> None:
    """TOST per task and pooled (margin: tolerance_pt), and the q-adjusted $/Mtok out as a range (equivalence.py)."""
    from kvtui.quality.equivalence import cost_range, pooled_pairs, tost
    from kvtui.quality.stats import paired_difference
    from kvtui.quality.verdict import pooled

    sc = doc.get("scenario") or {}
    margin = float(((sc.get("quality") or {}) if isinstance(sc, dict) else {}).get("tolerance_pt", 2.0) or 0.0)
    delta_ci = None
    if ref_tasks:
        for name, v in (suite.get("tasks") or {}).items():
            if name != "agreement" and isinstance(v, dict) and v.get("paired"):
                v["equivalence"] = tost(int(v["only_reference"]), int(v["only_mode"]), int(v["paired"]), margin)
        b, c, n = pooled_pairs(ref_tasks, tasks)
        if n:
            suite["equivalence"] = tost(b, c, n, margin)
            _, lo, hi = paired_difference(b, c, n)
            delta_ci = (lo, hi)
    else:
        suite["equivalence"] = {"reference": True, "margin_pt": margin}
    k_ref, n_ref = pooled(ref_tasks or tasks)
    # The interval the row shows beside the knee ("46 [40–52]"), else the one the search stored with the mode.
    knee_iv = next((v for v in (r.get("knee_interval"), m.get("knee_interval")) if isinstance(v, dict)), None)
    r["usd_per_mtok_out_qadj_range"] = cost_range(r.get("usd_per_mtok_out"), k_ref / n_ref if n_ref else None,
                                                  delta_ci, r.get("best"), knee_iv)


def compare_modes(doc: dict[str, Any], scenario: dict[str, Any] | Scenario | None = None) -> dict[str, Any]:
    """{"baseline", "note", "load_kind", "cost", "quality_reference", "rows"}: one row per mode, in the doc's order."""
    sc = scenario if scenario is not None else doc.get("scenario", {})
    if not isinstance(sc, dict):
        sc = sc.to_dict()  # once, not per mode
    rows = [mode_summary(m, sc) for m in doc.get("modes", [])]
    # The scenario's order decides the baseline (a journal rebuilt mid-resume lists kept modes first).
    sdict = sc if isinstance(sc, dict) else sc.to_dict()
    order = {m.get("name"): i for i, m in enumerate(sdict.get("modes") or []) if isinstance(m, dict)}
    ordered = sorted(rows, key=lambda r: order.get(r["mode"], len(order)))
    base = next((r for r in ordered if r["best"] is not None), None)
    note = None
    if not rows:
        note = "no mode ran"
    elif base is None and not any(_finished_steps(m) for m in doc.get("modes", []) if isinstance(m, dict)):
        note = NOTHING_MEASURED
    elif base is None:
        note = "no mode met the SLO: nothing to compare against"
    elif base is not ordered[0]:
        note = f"the first mode ({ordered[0]['mode']}) has no result; {base['mode']} is the baseline"
    for r in rows:
        add_ratios(r, base)
    kinds = {r["load_kind"] for r in rows}
    qref = _quality(doc, rows)
    return {
        "baseline": base["mode"] if base else None,
        "note": note,
        "load_kind": kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "concurrency"),
        "cost": cost_settings(sc),
        "quality_reference": qref,
        "rows": rows,
    }
