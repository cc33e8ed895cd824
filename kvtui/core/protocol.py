"""The continuous protocol's decisions about a step (docs/PROTOCOL.md), apart from how it is run.

- `drain_reason`: whether a step must start from an idle server, and why; only where the
  protocol needs one: the mode's first step, a confirmation that repeats the step just before
  (it must not inherit the state of the step it confirms; one that steps down from another load
  continues), after the KV wall (a cache full of recomputing requests would shape the next
  step's figures) or an abnormal end. A step up continues from the requests in flight;
- `ramp_for`: how the slots a step adds start, and when its window may open (`RampPlan`): births
  spread at the steady state's rate, so the window measures the load's steady state rather than
  a cohort born together (the classic step's 1 s stagger read TPOT p95 5–7 % and TTFT p95 60–90 %
  above the steady state, bench/protocol_bias.py);
- `e2e_estimate_s`: the request duration that rate needs, from the mode's measured steps or
  its prediction;
- `preemption_decides`: whether a preemption decides a step's FAIL outright, so that the step ends
  there (the SLO allows none; the server's counter only goes up);
- `sequential_for`: the step's sequential test (kvtui.core.sequential) for the scenario's SLO,
  never deciding on fewer samples than the classic rule asks of a knee step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from kvtui.core.sequential import SequentialTest
from kvtui.core.stats import PCTS
from kvtui.io.scenario.schema import Scenario

MAX_LOOKS = 16  # looks per step (window and tail): the union bound's divisor (each look at α / (looks × targets))
MARGIN = 0.10  # an early verdict's p95 is ≥ 10 % clear of its limit (kvtui.core.sequential)
STORM = 1.0  # preemptions per window request that mark a preemption storm
# A step spends 1 − ramp.confidence on two kinds of look, a union bound over both: this share on
# its looks during the window and tail (MAX_LOOKS of them, each may end the step early), the rest
# on one look at its end (what settles a verdict, kvtui.core.settled). The end look keeps most
# of it: at 8k / 512 a window holds ~80 requests, and a p95 PASS at one look needs 0.95^n ≤ α′
# (n ≥ 78 with 3/4 of α over two targets, n ≥ 72 with all of it); an early verdict mid-window
# needs n ≥ 153 at this share, so it comes only where a window holds many requests.
LOOKS_SHARE = 0.25


def drain_reason(index: int, why: str, prev: dict[str, Any] | None, load: float | None = None) -> str | None:
    """Why this step starts from an idle server (None: it continues from the step before)."""
    if prev is None or index == 0:
        return "the mode's first step"
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


def tail_for(sc: Scenario, closed: bool = True) -> str:
    """The step's tail rule (kvtui.core.window_stats.tail_rule): "full" for TPOT/E2E where
    `ramp.births` is off or the loop is open."""
    from kvtui.core.window_stats import tail_rule

    rule = tail_rule(m for m, _, _ in sc.slo.targets())
    return "full" if rule == "births" and not (sc.ramp.births and closed) else rule


def preemption_decides(sc: Scenario) -> bool:
    """Whether one preemption decides a step's FAIL, so that the step ends there rather than run its window out: the
    SLO allows none (`slo.max_preemptions_per_request = 0`). A step's preemptions are the server's counter from the
    step's start to its end (kvtui.core.evaluate), and a counter only goes up: the rest of the window could count
    more, never fewer, so its verdict would be the same FAIL. What it would add is the failing load's latencies over
    a full window; the step records that it stopped (`early_stop`), and its percentiles say "—" where they lack
    samples. Whether the FAIL needs a repeat is unchanged (kvtui.core.settled: the KV cache's arithmetic, else
    the confirmation)."""
    return sc.slo.max_preemptions_per_request == 0


def sequential_for(sc: Scenario, need: int, looks: int = MAX_LOOKS, share: float = LOOKS_SHARE) -> SequentialTest:
    """The sequential test on the SLO's latency targets (percentiles), planned for `looks` looks
    with `share` of 1 − ramp.confidence (LOOKS_SHARE: the looks that may end a step early, live
    (kvtui.explore.live_look) and offline alike; end_look takes the rest)."""
    targets = [(m, PCTS[p], float(lim)) for m, p, lim in sc.slo.targets()]
    return SequentialTest(targets, confidence=sc.ramp.confidence, max_looks=looks, min_samples=need,
                          margin=MARGIN, share=share)


def end_look(sc: Scenario, recs: Iterable[Any], need: int, tail: str, births_end: float | None,
             window_s: float, looked: bool = True) -> dict[str, object]:
    """The sequential test's record of one look at a step's window requests once the step has
    ended (kvtui.core.settled reads it): with the share of 1 − ramp.confidence that the step's
    looks left (`looked`: the step took looks that could have ended it, LOOKS_SHARE spent), else
    all of it (a watch takes none). A held step's window requests are mostly still
    streaming (a request outlives a window): their cut copies count for TTFT and ITL, as in the step's
    own figures (window_stats); TPOT and E2E over the requests the births rule counts."""
    from kvtui.core.births import born_by
    from kvtui.core.samples import slo_samples

    test = sequential_for(sc, need, looks=1, share=1.0 - LOOKS_SHARE if looked else 1.0)
    window = [x for x in recs if x.phase == "window"]
    xs = slo_samples(window, cut=True)
    if tail == "births" and births_end is not None:
        born = slo_samples(x for x in window if born_by(x.t_intended, births_end))
        xs["tpot"], xs["e2e"] = born["tpot"], born["e2e"]
    test.look(max(0.0, window_s), xs)
    return test.record(False)


def step_sequential(sc: Scenario, test: SequentialTest | None, ended_it: bool, recs: Iterable[Any], need: int,
                    tail: str, births_end: float | None, window_s: float, looked: bool) -> dict[str, object]:
    """A continuous step's `sequential` record, live and offline alike: the looks' own where one of
    them ended the step (`ended_it`), else end_look with the confidence they left."""
    if ended_it and test is not None:
        return test.record(True)
    return end_look(sc, recs, need, tail, births_end, window_s, looked)


@dataclass(frozen=True)
class RampPlan:
    """How a step's new slots start and when its window may open.

    stagger_s: the new slots' first sends are spread over this many seconds.
    settle: "time": the window opens `warmup_s` after the last new slot sent (and, on a step down,
    once the requests in flight are down to the load); "turnover": as the classic step, once every
    slot has also finished a request at this load (used where no request duration is known, so
    that births cannot be spread at the steady state's rate).
    """

    stagger_s: float
    settle: str  # "time" | "turnover"
    e2e_est_s: float | None
    why: str
    # The step's window where it must last longer than `ramp.window_s` (modelled s), and why
    # (`watch_window`): None, the scenario's window.
    window_s: float | None = None
    window_why: str | None = None

    def window(self, scenario_window_s: float) -> float:
        """The step's window (modelled s): the watch's where one was planned, else the scenario's."""
        return self.window_s if self.window_s else scenario_window_s

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"stagger_s": round(self.stagger_s, 3), "settle": self.settle,
                             "e2e_est_s": None if self.e2e_est_s is None else round(self.e2e_est_s, 3),
                             "why": self.why}
        if self.window_s is not None:
            d["window_s"], d["window_why"] = round(self.window_s, 3), self.window_why
        return d


MAX_STAGGER_S = 120.0  # a longer request than this is spread over 2 minutes: the steady state comes later


def classic_stagger_s(warmup_s: float) -> float:
    """The short spread of a step's first sends where no request duration is known (a "turnover"
    ramp): what every step of the retired classic protocol used, as kvtui.simulator.engine.fast.simulate_step
    still does."""
    return min(1.0, warmup_s / 2) if warmup_s > 0 else 0.0


def ramp_for(load: float, prev_load: float | None, drained: bool, e2e_s: float | None,
             warmup_s: float) -> RampPlan:
    """The ramp of a closed-loop step at `load` (module docstring).

    In a steady closed loop of N slots whose requests last E2E seconds, a request starts every
    E2E / N seconds. From an idle server the N first sends are spread over one E2E, so the batch
    holds requests at every position by the time the window opens, and the window need not wait
    for every slot to turn over. A step up spreads its ΔN new slots over ΔN / N × E2E: the rate the
    new slots would start at in the steady state. A step down starts nothing: the excess slots
    finish the requests nearest their end and send no other.
    """
    base = classic_stagger_s(warmup_s)
    n = max(1, int(round(load)))
    if drained or prev_load is None:
        if not e2e_s or e2e_s <= 0:
            return RampPlan(base, "turnover", None, "from an idle server, no request duration known yet: "
                                                    "every slot turns over once before the window")
        return RampPlan(min(MAX_STAGGER_S, e2e_s), "time", e2e_s,
                        f"from an idle server: {n} first sends spread over one request ({e2e_s:.1f} s)")
    old = max(0, int(round(prev_load)))
    if n <= old:
        return RampPlan(0.0, "time", e2e_s, f"a step down from {old}: the {old - n} requests nearest their end "
                                            "finish and are not replaced")
    if not e2e_s or e2e_s <= 0:
        return RampPlan(base, "turnover", None, f"a step up from {old}, no request duration known: "
                                                "every slot turns over once before the window")
    spread = min(MAX_STAGGER_S, max(base, e2e_s * (n - old) / n))
    return RampPlan(spread, "time", e2e_s, f"a step up from {old}: {n - old} new slots spread over {spread:.1f} s "
                                           "(the steady state's rate of starts)")


def e2e_estimate_s(steps: Iterable[Mapping[str, Any]], curve: Iterable[Mapping[str, Any]] | None, load: float,
                   output_tokens: float) -> float | None:
    """A request's duration at `load`, in the units of the steps' latencies (ms → s): the measured
    step nearest in load (its E2E p50, scaled by the load ratio where it was measured at another,
    since decode time grows about linearly with the batch), else the prediction's TTFT and TPOT at
    the nearest load. None where neither says."""
    best: tuple[float, float] | None = None
    for st in steps:
        e2e = (st.get("e2e_ms") or {}).get("p50")
        at = st.get("load") if st.get("load") is not None else st.get("concurrency")
        if not isinstance(e2e, (int, float)) or not isinstance(at, (int, float)) or at <= 0 or e2e <= 0 \
                or e2e == float("inf"):
            continue
        d = abs(float(at) - load)
        if best is None or d < best[0]:
            best = (d, float(e2e) / 1e3 * max(0.5, min(2.0, load / float(at))))
    if best is not None:
        return best[1]
    near: tuple[float, float] | None = None
    for pt in curve or ():
        at, ttft, tpot = pt.get("load"), pt.get("ttft_p95_ms"), pt.get("tpot_p95_ms")
        if not (isinstance(at, (int, float)) and isinstance(ttft, (int, float)) and isinstance(tpot, (int, float))):
            continue
        d = abs(float(at) - load)
        if near is None or d < near[0]:
            near = (d, (float(ttft) + max(0.0, output_tokens - 1) * float(tpot)) / 1e3)
    return near[1] if near is not None and near[1] > 0 else None


def ramp_plan_for_step(sc: Scenario, md: Mapping[str, Any], load: float, prev: Mapping[str, Any] | None,
                       drained: bool) -> RampPlan:
    """`ramp_for` with the request duration the mode's steps so far or its prediction give."""
    pred = md.get("prediction") or {}
    curve = pred.get("curve") if isinstance(pred, Mapping) else None
    e2e = e2e_estimate_s(md.get("steps") or [], curve, load, mean_length(sc.workload.output_tokens))
    prev_load = None if prev is None else prev.get("load", prev.get("concurrency"))
    ramp = ramp_for(load, prev_load if isinstance(prev_load, (int, float)) else None, drained, e2e, sc.ramp.warmup_s)
    return watch_window(sc, md.get("server") or {}, load, ramp)


def watch_window(sc: Scenario, server: Mapping[str, Any], load: float, ramp: RampPlan) -> RampPlan:
    """The ramp with the step's window lengthened where the SLO allows no preemption and `load`
    requests at their full length do not fit the KV cache the server reported (the KV wall's noisy
    side: kvtui.core.settled). The window then lasts max(2 × window_s, one request's duration).

    - **Long enough for the batch to turn over.** A load at the wall preempts once its batch holds
      requests at every position of their life; until then (a step up whose new requests are still
      young) a window can see none and pass. On the H200 at 8k / 512
      (docs/results/h200-8k512-early.md) fp8-kv passed 214 and fp8-w+kv 231 in a 20 s window, both
      above the steady state's bound, and both preempted on their repeat: a repeat from an idle
      server, 58–75 s, where a longer window would have seen the preemption and ended there (the
      preemption stop), a FAIL the KV cache's arithmetic settles.
    - **As long as the step and its repeat would watch together.** What a repeat of such a PASS
      guards against is a preemption that did not come in time, not latency noise (the sequential
      test judges that). One window over a whole turnover and twice the scenario's window watches
      for it at least as long as two windows do, and a repeat from an idle server first ramps over
      one request's duration. A PASS that watched the whole window without a preemption is settled
      (kvtui.core.settled, with ramp.confirm_when = "doubt")."""
    if not preemption_decides(sc):
        return ramp
    from kvtui.core.settled import kv_overflow

    why = kv_overflow(sc, server, load, whole=True)
    if why is None:
        return ramp
    turnover = ramp.e2e_est_s or 0.0
    window = max(2 * sc.ramp.window_s, turnover)
    return replace(ramp, window_s=window,
                   window_why=f"{why}: the window watches {window:.1f} s for a preemption (max of twice "
                              f"ramp.window_s and one request, {turnover:.1f} s)")


def mean_length(length: Any) -> float:
    """A length distribution's mean (kvtui.io.scenario.schema.Length), for the request-duration estimate."""
    if length.dist == "fixed":
        return float(length.value)
    if length.dist == "uniform":
        return (float(length.min) + float(length.max or length.min)) / 2
    return float(length.mean or 0.0)
