"""A sequential test on a step's SLO quantiles: stop the step once PASS or FAIL is beyond doubt.

Distribution-free. For a target "pNN ≤ L" let θ = P(one sample > L); the target holds iff
θ ≤ 1 − q (q = 0.95 for p95). After n samples with x above L, x ~ Binomial(n, θ):

- PASS is decided when P(X ≤ x | θ = 1 − q) ≤ α′: so few exceedances are unlikely at the
  boundary, and less likely still for any θ beyond it;
- FAIL is decided when P(X ≥ x | θ = 1 − q) ≤ α′.

Peeking is paid for by a union bound: a step plans at most `max_looks` looks and has `targets`
targets, so each (look, target) test runs at α′ = (1 − confidence) / (max_looks × targets); the
chance that any early verdict of the step is wrong is then ≤ 1 − confidence (Bonferroni over the
looks and the targets, whatever their correlation). A step needs every target PASS-decided to
pass early, and any one FAIL-decided to fail early; otherwise it runs its full window and is
judged as always. No look happens before `min_samples` (never fewer than the classic rule's
sample count for the percentile: kvtui.core.stats.min_samples_for, and ramp.min_samples).

The bounds reported with each look are the order statistics that bracket the quantile at the same
α′: [x_(l), x_(u)] with P(X_(l) ≤ ξ_q ≤ X_(u)) ≥ 1 − 2α′ (ξ_q the true quantile).

Assumes the samples are exchangeable draws from the step's steady state (the warm-up is over).
They are not independent: requests that share a batch share its slowness, and a cohort born
together (after a drain) can read 5 % off the step's full-window p95 while the binomial test is
sure. So a step also asks its early verdict's sample quantile to clear the limit by `margin`
(kvtui.core.protocol: 10 %); near the limit the step runs its full window, as before.
Pure functions: tests/core/test_sequential.py checks the error rate by simulation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence


def binom_cdf(x: int, n: int, p: float) -> float:
    """P(X ≤ x) for X ~ Binomial(n, p), in log space (n in the thousands)."""
    if x < 0:
        return 0.0
    if x >= n:
        return 1.0
    if p <= 0:
        return 1.0
    if p >= 1:
        return 0.0
    lp, lq = math.log(p), math.log1p(-p)
    lgn = math.lgamma(n + 1)
    terms = [lgn - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lp + (n - k) * lq for k in range(x + 1)]
    m = max(terms)
    return min(1.0, math.exp(m) * sum(math.exp(t - m) for t in terms))


def binom_sf(x: int, n: int, p: float) -> float:
    """P(X ≥ x)."""
    return 1.0 - binom_cdf(x - 1, n, p) if x > 0 else 1.0


def per_test_alpha(confidence: float, max_looks: int, targets: int) -> float:
    """α′ of one (look, target) test under the union bound."""
    return (1.0 - confidence) / max(1, max_looks) / max(1, targets)


def decide(n: int, exceed: int, q: float, alpha: float) -> bool | None:
    """True: "pq ≤ limit" decided; False: "pq > limit" decided; None: not yet (exceed of n above the limit)."""
    if n <= 0:
        return None
    b = 1.0 - q
    if binom_cdf(exceed, n, b) <= alpha:
        return True
    if binom_sf(exceed, n, b) <= alpha:
        return False
    return None


def _cdf_table(n: int, p: float) -> list[float]:
    """[P(Bin(n, p) ≤ k) for k = 0..n], by the pmf's recursion in log space (O(n))."""
    if p <= 0 or p >= 1:
        return [1.0 if (p <= 0 or k == n) else 0.0 for k in range(n + 1)]
    lp, lq = math.log(p), math.log1p(-p)
    logs = [n * lq]
    for k in range(1, n + 1):
        logs.append(logs[-1] + math.log(n - k + 1) - math.log(k) + lp - lq)
    m = max(logs)
    pm = [math.exp(x - m) for x in logs]
    tot = sum(pm)
    out, acc = [], 0.0
    for x in pm:
        acc += x
        out.append(min(1.0, acc / tot))
    return out


def quantile_bounds(sorted_xs: Sequence[float], q: float, alpha: float) -> tuple[float | None, float | None]:
    """Order statistics bracketing the q-quantile, each side at level alpha (None: beyond the sample).

    X_(l) ≤ ξ_q with probability ≥ 1 − alpha for the largest l with P(Bin(n, q) ≤ l − 1) ≤ alpha, and
    X_(u) ≥ ξ_q likewise for the smallest u with P(Bin(n, q) ≤ u − 1) ≥ 1 − alpha."""
    n = len(sorted_xs)
    if not n:
        return None, None
    cdf = _cdf_table(n, q)
    lo = next((sorted_xs[k - 1] for k in range(n, 0, -1) if cdf[k - 1] <= alpha), None)
    hi = next((sorted_xs[k - 1] for k in range(1, n + 1) if cdf[k - 1] >= 1 - alpha), None)
    return lo, hi


@dataclass
class TargetLook:
    target: str
    n: int
    exceed: int
    decided: bool | None
    lower_ms: float | None
    upper_ms: float | None
    samples: list[float] = field(default_factory=list, repr=False)
    q: float = 0.95

    def to_dict(self) -> dict[str, object]:
        return {"target": self.target, "n": self.n, "above": self.exceed, "decided": self.decided,
                "bounds_ms": [_r(self.lower_ms), _r(self.upper_ms)]}


@dataclass
class Look:
    t: float  # seconds into the window
    verdict: bool | None
    targets: list[TargetLook] = field(default_factory=list)


@dataclass
class SequentialTest:
    """The step's plan: its targets (metric, q, limit ms), confidence, looks and minimum samples."""

    targets: list[tuple[str, float, float]]
    confidence: float = 0.95
    max_looks: int = 20
    min_samples: int = 40
    margin: float = 0.0  # an early verdict's quantile must clear the limit by this share (0: the test alone)
    # The part of 1 − confidence this test may spend (a step's looks and its end look share it:
    # kvtui.core.protocol.LOOKS_SHARE); 1: all of it.
    share: float = 1.0
    looks: list[Look] = field(default_factory=list)

    @property
    def alpha(self) -> float:
        return self.share * per_test_alpha(self.confidence, self.max_looks, len(self.targets))

    def look(self, t: float, samples_ms: Mapping[str, Iterable[float]]) -> bool | None:
        """One look at the samples so far (ms; +inf for a failed request): the early verdict or None.
        Looks past max_looks decide nothing (the union bound has spent its budget)."""
        if len(self.looks) >= self.max_looks or not self.targets:
            return None
        a = self.alpha
        rows = []
        verdict: bool | None = True
        for name, q, limit in self.targets:
            xs = sorted(samples_ms.get(name, ()))
            n = len(xs)
            exceed = sum(1 for x in xs if x > limit)
            d = decide(n, exceed, q, a) if n >= self.min_samples else None
            if d is not None and self.margin > 0:
                # Latencies within a step are correlated (the requests share one batch), so the
                # binomial test alone is over-confident on a cohort born together: an early verdict
                # also needs the sample's quantile clear of the limit by `margin`.
                from kvtui.core.stats import percentile

                v = percentile(xs, q)
                if (d and v > limit * (1 - self.margin)) or (not d and v < limit * (1 + self.margin)):
                    d = None
            row = TargetLook(name, n, exceed, d, None, None, q=q)
            row.samples = xs  # the bounds are worked out once, for the look a step keeps (record)
            rows.append(row)
            if d is False:
                verdict = False
            elif d is None and verdict is True:
                verdict = None
        self.looks.append(Look(t, verdict, rows))
        return verdict

    def record(self, stopped_early: bool) -> dict[str, object]:
        """What a step keeps of its sequential test (the snapshot's steps[].sequential)."""
        last = self.looks[-1] if self.looks else None
        for row in last.targets if last else []:
            row.lower_ms, row.upper_ms = quantile_bounds(row.samples, row.q, self.alpha)
        return {
            "stopped_early": stopped_early,
            "verdict": last.verdict if (last and stopped_early) else None,
            "confidence": self.confidence,
            "share": self.share,
            "alpha_per_look": self.alpha,
            "looks": len(self.looks),
            "max_looks": self.max_looks,
            "min_samples": self.min_samples,
            "margin": self.margin,
            "at_s": round(last.t, 3) if last else None,
            "targets": [x.to_dict() for x in last.targets] if last else [],
        }


def _r(x: float | None) -> float | None:
    if x is None:
        return None
    return x if math.isinf(x) else round(x, 3)
