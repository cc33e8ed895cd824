"""Whether a knee step's verdict is settled without a repeat (`ramp.confirm_when = "doubt"`).

The search confirms its knee by measuring again the last pass and the first fail
(kvtui.explore.search). A repeat guards a verdict that sampling noise could flip. Two things
settle a verdict without one, and `settled_reason` names which (None: in doubt, repeat it):

- **The sequential test** (kvtui.explore.sequential) decided every latency target at
  `ramp.confidence` over the step's window samples, each ≥ 10 % clear of its limit: PASS when
  every target is decided PASS, FAIL when one is decided FAIL.
- **The KV cache's arithmetic**, for the preemption target (`slo.max_preemptions_per_request = 0`)
  of a fixed-length workload, from the KV tokens the server itself reported:
  - a FAIL with preemptions is settled when the load's steady state cannot fit: N requests
    hold N × (prompt + output / 2) tokens on average (their positions spread over a request's
    life), more than the cache. Every repeat would preempt.
  - a PASS without preemption is settled when N requests at their *full* length
    (prompt + output) fit. A steady state needs N × output / 2 tokens less than that on
    average, a cushion far beyond the sum of N prompts' ± jitter, so no repeat would preempt.
  - Between the two bounds (the wall's noisy side) a load may preempt in one window and not the
    next. Its step watches longer (kvtui.explore.protocol.watch_window: max(2 × window_s, one
    request's duration), no early verdict from latencies), and a PASS that watched the whole of it
    without a preemption is settled: it watched as long as the step and a repeat would together,
    over a whole turnover. Cut short, it is in doubt. Above the upper bound, a PASS contradicts
    the arithmetic and is always repeated; its longer window is there to see the preemption.

Everything else (an error, a goodput floor, a client flag, a verdict the test left open) is in
doubt, and is repeated as before. `ramp.confirm_when = "always"` (the default) repeats every
knee step, as the careful method does.
"""

from __future__ import annotations

from typing import Any, Mapping

from kvtui.scenario.schema import Scenario


def _latency_decided(step: Mapping[str, Any], n_targets: int) -> bool | None:
    """The sequential test's verdict over every latency target (None: not decided)."""
    seq = step.get("sequential") or {}
    rows = seq.get("targets") or []
    if n_targets == 0:
        return True
    if len(rows) != n_targets:
        return None
    decided = [r.get("decided") for r in rows]
    if any(d is False for d in decided):
        return False
    return True if all(d is True for d in decided) else None


def _fixed_lengths(sc: Scenario) -> tuple[float, float] | None:
    """(prompt, output) tokens of a one-turn fixed-length workload whose outputs run to their length."""
    w = sc.workload
    if w.turns != 1 or not w.ignore_eos or w.prompt_tokens.dist != "fixed" or w.output_tokens.dist != "fixed":
        return None
    return float(w.prompt_tokens.value), float(w.output_tokens.value)


def settled_reason(step: Mapping[str, Any], server: Mapping[str, Any], sc: Scenario) -> str | None:
    """Why this judged step's verdict needs no repeat (module docstring), or None."""
    passed = step.get("passed")
    if passed is None or step.get("flags") or step.get("aborted") or step.get("error_burst"):
        return None
    checks = {c.get("target"): c for c in step.get("checks") or []}
    n_lat = len(sc.slo.targets())
    lat = _latency_decided(step, n_lat)
    conf = f"{sc.ramp.confidence:.0%}"
    load = float(step.get("load") or 0)
    kv = server.get("kv_cache_tokens")
    lengths = _fixed_lengths(sc)
    pre = step.get("preemptions")
    if passed:
        if lat is not True:
            return None
        if (step.get("errors") or 0) > 0 or sc.slo.min_goodput:
            return None
        why = f"every latency target decided PASS at {conf}"
        if "preemptions_per_request" in checks:
            if pre or not kv or lengths is None:
                return None
            over = kv_overflow(sc, server, load, whole=True)
            if over is None:
                need = load * (lengths[0] + lengths[1])
                return why + (f"; {load:g} × {lengths[0] + lengths[1]:,.0f} full-length tokens = {need:,.0f} ≤ "
                              f"{kv:,} KV tokens")
            seen = _watched_s(step)
            if seen is None or kv_overflow(sc, server, load, whole=False) is not None:
                # Not watched whole; or the load's steady state cannot fit at all, and a PASS that the
                # arithmetic contradicts is repeated however long it watched.
                return None
            return why + (f"; {over}, and no preemption in {seen:.1f} s watched (a whole turnover, as long as the "
                          "step and a repeat would watch together)")
        return why
    if lat is False:
        rows = (step.get("sequential") or {}).get("targets") or []
        failed = [r.get("target") for r in rows if r.get("decided") is False]
        return f"{', '.join(str(t) for t in failed)} decided FAIL at {conf}"
    pc = checks.get("preemptions_per_request")
    if pc is not None and pc.get("ok") is False and pre and sc.slo.max_preemptions_per_request == 0:
        over = kv_overflow(sc, server, load, whole=False)
        if over is not None:
            return f"the KV wall: {over} ({pre:g} preemptions)"
    return None


def _watched_s(step: Mapping[str, Any]) -> float | None:
    """How long the step's window watched for a preemption, where it ran the whole watch that
    kvtui.explore.protocol.watch_window planned (None: no watch planned, or cut short)."""
    ramp = step.get("ramp") or {}
    planned, seen = ramp.get("window_s"), ramp.get("watched_s")
    if not isinstance(planned, (int, float)) or not isinstance(seen, (int, float)) or step.get("stopped_early"):
        return None
    return float(seen) if seen >= planned else None


def kv_overflow(sc: Scenario, server: Mapping[str, Any], load: float, whole: bool) -> str | None:
    """Why `load` requests do not fit the KV cache the server reported (None: they do, or the
    workload's lengths or the cache are not known). `whole`: at their full length, prompt + output
    (what a PASS is settled by); else on average over their life, prompt + output / 2, N requests at
    every position (the steady state: what settles a preempted FAIL)."""
    kv, lengths = server.get("kv_cache_tokens"), _fixed_lengths(sc)
    if not kv or lengths is None or load <= 0:
        return None
    per = lengths[0] + (lengths[1] if whole else lengths[1] / 2)
    need = load * per
    if need <= kv:
        return None
    what = "full-length tokens" if whole else "mean tokens in flight"
    return f"{load:g} × {per:,.0f} {what} = {need:,.0f} > {kv:,} KV tokens"
