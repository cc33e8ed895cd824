"""The continuous protocol's decisions about a step (docs/PROTOCOL.md), apart from how it is run.

- `drain_reason`: whether a step must start from an idle server, and why; only where the
  protocol needs one: the mode's first step, a step up (a continued one reads fast), a
  confirmation that repeats the step just before (it must not inherit the state of the step it
  confirms; one that steps down from another load continues), after a preemption storm (a KV
  cache full of recomputing requests would shape the next step's figures);
- `sequential_for`: the step's sequential test (kvtui.explore.sequential) for the scenario's SLO,
  never deciding on fewer samples than the classic rule asks of a knee step.
"""

from __future__ import annotations

from typing import Any

from kvtui.explore.sequential import SequentialTest
from kvtui.explore.stats import PCTS
from kvtui.scenario.schema import Scenario

MAX_LOOKS = 16  # looks per step (window and tail): the union bound's divisor (each look at α / (looks × targets))
MARGIN = 0.10  # an early verdict's p95 is ≥ 10 % clear of its limit (kvtui.explore.sequential)
STORM = 1.0  # preemptions per window request that mark a preemption storm


def drain_reason(index: int, why: str, prev: dict[str, Any] | None, load: float | None = None) -> str | None:
    """Why this step starts from an idle server (None: it continues from the step before)."""
    if prev is None or index == 0:
        return "the mode's first step"
    if load is not None and load > (prev.get("load") or 0):
        # Continued, a step up read fast: its new requests are a cohort born together and the
        # batch holds too little context (a linear ramp passed 160 where the classic step failed
        # 128, tests/core/test_continuous.py), even after every slot turned over once.
        return "a step up starts from an idle server (a continued one reads fast)"
    if why == "confirm" and (load is None or load == prev.get("load")):
        # A repeat must not inherit the state of the step it repeats. A confirmation that steps
        # *down* from another load (the seeded search's "confirm the pass" after its first fail)
        # inherits that other step's requests, not the confirmed step's: it is as independent of
        # the first measurement as a drained one, and saves the ramp from zero.
        return "a confirmation is measured independently of the step before"
    pre, n = prev.get("preemptions"), prev.get("requests") or 0
    if pre and n and pre / n >= STORM:
        return f"a preemption storm in the step before ({pre} preemptions, {n} requests)"
    if pre and pre > 0:
        # Any preemption: the step before hit the KV wall, and its preempted requests, recomputed
        # in this step, would shape it (offline, a step down to 103 after 111's 33 preemptions saw
        # 8 of its own and failed a confirmation the drained step passes: scripts/h200_answer.sh SIM=1).
        return f"the step before hit the KV wall ({pre:g} preemptions): its recomputation would shape this step"
    if prev.get("aborted") or prev.get("error_burst"):
        return "the step before ended abnormally"
    return None


def sequential_for(sc: Scenario, need: int) -> SequentialTest:
    """The sequential test on the SLO's latency targets (percentiles), at ramp.confidence."""
    targets = [(m, PCTS[p], float(lim)) for m, p, lim in sc.slo.targets()]
    return SequentialTest(targets, confidence=sc.ramp.confidence, max_looks=MAX_LOOKS, min_samples=need,
                          margin=MARGIN)
