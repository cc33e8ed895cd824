"""Readable axis ticks: round numbers (1, 2, 2.5, 5 × 10ⁿ), labels without trailing zeros.

plotext's own ticks divide the range evenly ("22275.0 / 11137.5", or "11.000 11.050" for a
single step); charts hand these to `xticks`/`yticks` instead.
"""

from __future__ import annotations

import math


def nice_step(span: float, n: int) -> float:
    raw = span / max(1, n)
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for f in (1, 2, 2.5, 5, 10):
        if f * mag >= raw:
            return f * mag
    return 10 * mag


def tick_label(v: float, unit: str = "") -> str:
    """12000 → 12k, 2500 → 2.5k, 0.25 → 0.25, 150 → 150."""
    a = abs(v)
    if a >= 1000:
        s = f"{v / 1000:.1f}".rstrip("0").rstrip(".") + "k"
    elif a >= 1 or a == 0:
        s = f"{v:.1f}".rstrip("0").rstrip(".")
    else:
        s = f"{v:.2g}"
    return s + unit


def nice_ticks(lo: float, hi: float, n: int = 4, unit: str = "",
               integer: bool = False) -> tuple[list[float], list[str]]:
    """Round tick positions inside [lo, hi] (about n of them) and their labels. `integer`: an axis
    of whole numbers (a concurrency, a request count): its ticks are whole too, never "11 11.1 11.1"."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [], []
    if hi <= lo:
        return [lo], [tick_label(lo, unit)]
    step = nice_step(hi - lo, n)
    if integer:
        step = max(1.0, math.ceil(step))
    first = math.ceil(lo / step - 1e-9) * step
    vals: list[float] = []
    v = first
    while v <= hi + step * 1e-9 and len(vals) < 50:
        vals.append(round(v, 10))
        v += step
    return vals, [tick_label(x, unit) for x in vals]
