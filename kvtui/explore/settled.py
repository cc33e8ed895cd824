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
  - a PASS without preemption is settled only when N requests at their *full* length
    (prompt + output) fit. A steady state needs N × output / 2 tokens less than that on
    average, a cushion far beyond the sum of N prompts' ± jitter, so no repeat would preempt.
    Between the two bounds a load may preempt in one window and not the next: in doubt.

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
            need = load * (lengths[0] + lengths[1])
            if need > kv:
                return None
            why += f"; {load:g} × {lengths[0] + lengths[1]:,.0f} full-length tokens = {need:,.0f} ≤ {kv:,} KV tokens"
        return why
    if lat is False:
        rows = (step.get("sequential") or {}).get("targets") or []
        failed = [r.get("target") for r in rows if r.get("decided") is False]
        return f"{', '.join(str(t) for t in failed)} decided FAIL at {conf}"
    pc = checks.get("preemptions_per_request")
    if pc is not None and pc.get("ok") is False and pre and kv and lengths is not None \
            and sc.slo.max_preemptions_per_request == 0:
        mean = lengths[0] + lengths[1] / 2
        need = load * mean
        if need > kv:
            return (f"the KV wall: {load:g} × {mean:,.0f} mean tokens in flight = {need:,.0f} > {kv:,} KV tokens "
                    f"({pre:g} preemptions)")
    return None
