"""Percentiles with their sample counts, numpy's default (linear) interpolation, no numpy.

A failed request counts as +inf latency, so a step with more than 5 % failures has an
infinite p95. A percentile is refused (None) when too few samples stand behind it.
"""

from __future__ import annotations

import math
from typing import Iterable

PCTS = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}


def min_samples_for(q: float) -> int:
    """Samples needed before pNN means anything: 2 beyond the percentile's tail (p99 → 200)."""
    return max(3, math.ceil(2 / (1 - q)))


def percentile(sorted_xs: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy.percentile's default)."""
    if not sorted_xs:
        return math.nan
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    a, b = sorted_xs[lo], sorted_xs[hi]
    if math.isinf(a) or math.isinf(b):
        return b if pos > lo else a
    return a + (b - a) * (pos - lo)


def summarize(values: Iterable[float], scale: float = 1000.0, failures: int = 0) -> dict:
    """{p50, p90, p95, p99, mean, n, failures} in ms (by default); pNN None when under-sampled.

    `failures` adds that many +inf samples (failed requests count as infinite latency).
    The mean is over finite values only.
    """
    xs = sorted(v * scale for v in values if v is not None)
    finite_n = len(xs)
    mean = sum(xs) / finite_n if finite_n else None
    allx = xs + [math.inf] * failures
    n = len(allx)
    out: dict = {"n": n, "failures": failures, "mean": _r(mean)}
    for name, q in PCTS.items():
        out[name] = _r(percentile(allx, q)) if n >= min_samples_for(q) else None
    return out


def _r(x: float | None) -> float | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    if math.isinf(x):
        return math.inf
    return round(x, 3)
