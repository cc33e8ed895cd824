"""Small, exact statistics for accuracies on n items (no SciPy needed)."""

from __future__ import annotations

import math

Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """95 % Wilson score interval of k successes in n (well-behaved at 0 and n, unlike k/n ± …)."""
    if n <= 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    lo, hi = max(0.0, centre - half), min(1.0, centre + half)
    # At k = 0 and k = n the bound is exactly 0 (1); floating point leaves 1e-17 of it.
    return (0.0 if k == 0 else lo, 1.0 if k == n else hi)


def mcnemar_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: b items right only in the reference, c right only in the mode."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_difference(b: int, c: int, n: int, z: float = Z95) -> tuple[float, float, float]:
    """(mode − reference) accuracy difference on the same n items, with its 95 % interval.

    b = right in the reference only, c = right in the mode only. The variance of the paired
    difference (c − b)/n is (b + c − (c − b)²/n)/n² (the discordant pairs carry it all); the
    interval is widened by one discordant pair's worth (a continuity correction) so that 0 of n
    discordant pairs is not read as certainty.
    """
    if n <= 0:
        return (0.0, -1.0, 1.0)
    d = (c - b) / n
    var = max(0.0, (b + c) - (c - b) ** 2 / n) / (n * n)
    half = z * math.sqrt(var) + 1.0 / n
    return (d, max(-1.0, d - half), min(1.0, d + half))
