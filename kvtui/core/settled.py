"""Whether a knee step's verdict is settled without a repeat (`ramp.confirm_when = "doubt"`).

The search confirms its knee by measuring again the last pass and the first fail
(kvtui.core.search). A repeat guards a verdict that sampling noise could flip. Two things
settle a verdict without one, and `settled_reason` names which (None: in doubt, repeat it):

- **The sequential test** (kvtui.core.sequential) decided every latency target at
  `ramp.confidence` over the step's window samples, each ≥ 10 % clear of its limit: PASS when
  every target is decided PASS, FAIL when one is decided FAIL.
  - **A PASS whose own samples are too few to decide** (a per-request target, TTFT, TPOT or
    E2E, with n below the count at which even no sample above the limit decides: 78 for a p95
    with two targets; 41–52 window requests at 8k / 512) is decided on its own samples pooled
    with those of every load measured above it in the mode (`pooled_pass`). The search already
    takes a request's latency to grow with the load (a pass above a fail is noise; the knee's
    interval is a monotone fit), so a higher load's samples are above the limit at least as often:
    if the lower load's share above the limit reached 1 − q, the pooled count would be drawn at
    least as high, and the same binomial test at the same α′ keeps its error rate. Its own test
    could not decide PASS at any count, so it spent none of α′. Every pooled step must have read
    the target ≥ 10 % clear of its limit, and judged its whole window or stopped early at a FAIL
    (its looks' samples). An early stop is chosen by its outcome: a FAIL's by slow samples, which
    adds to the count above the limit where the targets move together (a load that stalls decode
    also queues prefills); a PASS's, by quick ones, is never pooled. On the H200 at 8k / 512 (ITL
    p95 ≤ 100 ms) three of the four knees' passes were repeated for this alone: TTFT p95 ~300–490 ms
    against 3 s, from 41–52 samples (docs/results/h200-8k512-itl100.md). A pass measured before
    the loads above it is settled when they come (`resettled`).
- **The KV cache's arithmetic**, for the preemption target (`slo.max_preemptions_per_request = 0`)
  of a fixed-length workload, from the KV tokens the server itself reported:
  - a FAIL with preemptions is settled when the load's steady state cannot fit: N requests
    hold N × (prompt + output / 2) tokens on average (their positions spread over a request's
    life), more than the cache. Every repeat would preempt.
  - a PASS without preemption is settled when N requests at their *full* length
    (prompt + output) fit. A steady state needs N × output / 2 tokens less than that on
    average, a cushion far beyond the sum of N prompts' ± jitter, so no repeat would preempt.
  - Between the two bounds (the wall's noisy side) a load may preempt in one window and not the
    next. Its step watches longer (kvtui.core.protocol.watch_window: max(2 × window_s, one
    request's duration), no early verdict from latencies), and a PASS that watched the whole of it
    without a preemption is settled: it watched as long as the step and a repeat would together,
    over a whole turnover. Cut short, it is in doubt. Above the upper bound, a PASS contradicts
    the arithmetic and is always repeated; its longer window is there to see the preemption.

Everything else (an error, a goodput floor, a client flag, a verdict the test left open) is in
doubt, and is repeated as before. `ramp.confirm_when = "always"` (the default) repeats every
knee step, as the careful method does.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from kvtui.core.search import Search
from kvtui.core.sequential import binom_cdf, decide
from kvtui.core.stats import PCTS
from kvtui.io.scenario.schema import Scenario


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


def _clean(step: Mapping[str, Any]) -> bool:
    """A verdict the server's latencies carry (no client flag, not aborted, no error burst)."""
    return not (step.get("flags") or step.get("aborted") or step.get("error_burst") or step.get("remeasured"))


def _clear(step: Mapping[str, Any], target: str, bound: float) -> bool:
    """Whether the step measured `target` (e.g. "ttft_p95_ms") at or under `bound`."""
    value = next((c.get("value") for c in step.get("checks") or [] if c.get("target") == target), None)
    return isinstance(value, (int, float)) and value <= bound


def pooled_pass(step: Mapping[str, Any], higher: Sequence[Mapping[str, Any]], sc: Scenario) -> str | None:
    """How the per-request latency targets that a PASS's own samples were too few to decide are
    decided PASS with the samples of the loads measured above it (module docstring); None where
    one is not, or where a target was undecided for another reason than its count."""
    seq = step.get("sequential") or {}
    rows = seq.get("targets") or []
    targets = sc.slo.targets()
    alpha = seq.get("alpha_per_look")
    if (step.get("passed") is not True or seq.get("stopped_early") or len(rows) != len(targets)
            or not isinstance(alpha, (int, float)) or not higher):
        return None
    margin = float(seq.get("margin") or 0.0)
    notes = []
    for j, (row, (metric, pct, limit)) in enumerate(zip(rows, targets)):
        if row.get("decided") is True:
            continue
        q = PCTS[pct]
        n, above = int(row.get("n") or 0), int(row.get("above") or 0)
        if row.get("target") != metric or row.get("decided") is False or n < int(seq.get("min_samples") or 0):
            return None
        if binom_cdf(0, n, 1.0 - q) <= alpha:
            return None  # its own test could have decided it: its doubt stands
        key = f"{metric}_{pct}_ms"
        if not all(_clear(h, key, float(limit) * (1.0 - margin)) for h in (step, *higher)):
            return None  # one not clear of its limit (or not measured): no evidence to pool
        pool_n, pool_above, loads = n, above, []
        for h in higher:
            hseq = h.get("sequential") or {}
            hrows = hseq.get("targets") or []
            if (hseq.get("stopped_early") and hseq.get("verdict") is not False) or len(hrows) != len(targets) \
                    or hrows[j].get("target") != metric:
                return None  # a PASS that stopped early was stopped by its quick samples: not pooled
            pool_n += int(hrows[j].get("n") or 0)
            pool_above += int(hrows[j].get("above") or 0)
            loads.append(float(h.get("load") or 0))
        if decide(pool_n, pool_above, q, float(alpha)) is not True:
            return None
        at = ", ".join(f"{x:g}" for x in sorted(set(loads)))
        notes.append(f"{metric} on {pool_n} samples pooled with {at}'s: a higher load is no faster")
    return "; ".join(notes) if notes else None


def resettled(steps: Sequence[dict[str, Any]], server: Mapping[str, Any],
              sc: Scenario) -> list[tuple[dict[str, Any], str]]:
    """The mode's passes in doubt that the loads measured above them now settle (pooled_pass), each
    with why: only a load's latest verdict (the search keeps one per load), and only a pass."""
    judged = [s for s in steps if s.get("why") in ("search", "confirm") and s.get("passed") is not None
              and isinstance(s.get("load"), (int, float))]
    out = []
    for i, s in enumerate(judged):
        load = s["load"]
        if s["passed"] is not True or s.get("settled") or any(t["load"] == load for t in judged[i + 1:]):
            continue
        higher = [t for t in judged if t["load"] > load and _clean(t)]
        why = settled_reason(s, server, sc, higher) if higher else None
        if why:
            out.append((s, why))
    return out


def settle_passes(steps: Sequence[dict[str, Any]], server: Mapping[str, Any], sc: Scenario, search: Search) -> None:
    """Under "doubt", after each judged step (a run's, or a resumed run's replay of its kept ones, so
    that both settle the same passes): the passes the loads above them now settle, in the steps
    (`settled`) and in the search (kvtui.core.search: settle), so the confirmation skips them."""
    if sc.ramp.confirm_when != "doubt":
        return
    for st, why in resettled(steps, server, sc):
        st["settled"] = why
        search.settle(float(st["load"]), why)


def settled_reason(step: Mapping[str, Any], server: Mapping[str, Any], sc: Scenario,
                   higher: Sequence[Mapping[str, Any]] = ()) -> str | None:
    """Why this judged step's verdict needs no repeat (module docstring), or None. `higher`: the
    mode's judged steps at loads above it (a PASS's too few samples pooled with theirs)."""
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
        pooled = pooled_pass(step, higher, sc) if lat is None and higher else None
        if lat is not True and pooled is None:
            return None
        if (step.get("errors") or 0) > 0 or sc.slo.min_goodput:
            return None
        why = f"every latency target decided PASS at {conf}" + (f" ({pooled})" if pooled else "")
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
    kvtui.core.protocol.watch_window planned (None: no watch planned, or cut short)."""
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
