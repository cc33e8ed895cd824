"""Equal quality, shown: TOST on the paired difference, the items it would take, and the cost range.

**Equivalence (TOST, 95 %).** Two one-sided tests at α = 0.05 against a margin of ±m points
are the same as asking whether the paired difference's 90 % interval lies inside (−m, +m). The
interval is `stats.paired_difference`'s (discordant pairs carry the variance; widened by one pair
for continuity), so 0 discordant items of 20 is not read as certainty. "Not shown" is not
"different": it says the n is too small to rule a drop of m points out.

**Items needed.** The smallest n at which the same observed rates (discordance and Δ) would give a
90 % interval inside the margin; none when |Δ| is already at or past the margin (no n shows it).

**Cost range at equal quality.** The quality-adjusted $/Mtok is the plain figure × reference
accuracy ÷ the mode's (never below the plain figure). Both factors carry an interval:
- capacity: a knee known to lie in [lo, hi] (the search's interval, `modes[].knee_interval`)
  moves $/Mtok by knee/hi … knee/lo (throughput scales with the load at the knee, to first order);
- quality: the mode's accuracy is the reference's + Δ, Δ anywhere in its 95 % interval.
The range is the product of the two ranges' ends. A knee without an interval is taken as exact,
and the result says so.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from kvtui.io.snapshot.schema import CostRange, RowSuite
from kvtui.quality.stats import paired_difference

Z90 = 1.6448536269514722  # two-sided 90 % = each one-sided test at 5 %
MAX_ITEMS = 1_000_000


def tost(b: int, c: int, n: int, margin_pt: float) -> dict[str, Any]:
    """Is the mode within ±margin_pt of the reference on these n paired items (TOST, α = 0.05 each side)?"""
    out: dict[str, Any] = {"margin_pt": margin_pt, "n": n, "test": "TOST, 95 %"}
    if n <= 0 or margin_pt <= 0:
        out.update(shown=False, ci90_pt=None, items_needed=None)
        return out
    d, lo, hi = paired_difference(b, c, n, z=Z90)
    shown = 100 * lo > -margin_pt and 100 * hi < margin_pt
    out.update(shown=shown, delta_pt=round(100 * d, 2), ci90_pt=[round(100 * lo, 2), round(100 * hi, 2)],
               items_needed=None if shown else items_needed(b, c, n, margin_pt))
    return out


def _half(rate: float, d: float, n: float) -> float:
    return Z90 * math.sqrt(max(0.0, rate - d * d) / n) + 1.0 / n


def items_needed(b: int, c: int, n: int, margin_pt: float) -> int | None:
    """Smallest n' at which the observed rates would show equivalence within ±margin_pt; None if no n' does."""
    if n <= 0 or margin_pt <= 0:
        return None
    rate, d, m = (b + c) / n, (c - b) / n, margin_pt / 100.0
    room = m - abs(d)
    if room <= 0:
        return None

    def fits(k: float) -> bool:
        return _half(rate, d, k) < room

    hi = max(1, n)
    while not fits(hi):
        hi *= 2
        if hi > MAX_ITEMS:
            return None
    lo = 1
    while lo < hi:  # the half-width falls with n: bisect for the first n' that fits
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _factor(ref_acc: float, delta: float) -> float | None:
    """reference ÷ mode accuracy, never below 1; None when the mode's accuracy could be 0."""
    acc = ref_acc + delta
    if delta >= 0:
        return 1.0
    return ref_acc / acc if acc > 0 else None


def cost_range(usd: float | None, ref_acc: float | None, delta_ci: tuple[float, float] | None,
               knee: float | None = None, knee_interval: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The quality-adjusted $/Mtok as a range: {"lo", "hi", "knee_exact", "quality_open"}, and
    "knee_open" where the knee's interval has no lower end (`hi` null).

    `delta_ci` is the (mode − reference) accuracy difference's 95 % interval, as fractions;
    `knee_interval` {"lo", "hi"} in the knee's load units. None when there is no plain figure."""
    if usd is None or not math.isfinite(usd):
        return None
    cap_lo = cap_hi = 1.0
    exact = True
    knee_open = False
    if knee and isinstance(knee_interval, dict):
        klo, khi = knee_interval.get("lo"), knee_interval.get("hi")
        if isinstance(klo, (int, float)) and isinstance(khi, (int, float)) and 0 < klo <= knee <= khi:
            cap_lo, cap_hi, exact = knee / khi, knee / klo, False
        elif klo is None and isinstance(khi, (int, float)) and 0 < knee <= khi:
            # the knee's lower end is unknown (no measured load sure to pass): the cost has no top
            cap_lo, exact, knee_open = knee / khi, False, True
    q_lo = q_hi = 1.0
    open_top = False
    if ref_acc and delta_ci is not None:
        f_best, f_worst = _factor(ref_acc, delta_ci[1]), _factor(ref_acc, delta_ci[0])
        q_lo = f_best if f_best is not None else 1.0
        if f_worst is None:
            open_top = True
        else:
            q_hi = f_worst
    out = {"lo": round(usd * cap_lo * q_lo, 6), "hi": None if open_top or knee_open else round(usd * cap_hi * q_hi, 6),
           "knee_exact": exact, "quality_open": open_top}
    if knee_open:
        out["knee_open"] = True
    return out


def pooled_pairs(ref: dict[str, Any], mode: dict[str, Any]) -> tuple[int, int, int]:
    """(b, c, n) over every ground-truth task both ran, paired by item key (agreement left out)."""
    from kvtui.quality.verdict import _paired

    b = c = n = 0
    for name, t in mode.items():
        if name == "agreement" or name not in ref or not isinstance(t, dict):
            continue
        bb, cc, nn = _paired(ref[name], t)
        b, c, n = b + bb, c + cc, n + nn
    return b, c, n


def range_text(rng: CostRange | Mapping[str, Any] | None) -> str:
    """' ($0.41–0.47 q-adjusted; knee taken as exact)' for a cost_range, '' without one."""
    if not rng:
        return ""
    r = CostRange.of(rng)
    if r.lo is None:
        return ""
    hi = f"{r.hi:.3f}" if r.hi is not None else (
        "open (the knee's lower end is unknown)" if r.knee_open and not r.quality_open
        else "open (the mode's accuracy may be 0)")
    note = "; knee taken as exact" if r.knee_exact else ""
    return f" (q-adjusted ${r.lo:.3f}–{hi}{note})"


def statement(mode: str, reference: str | None, eq: dict[str, Any], task: str | None = None) -> str:
    """The equivalence in words, per task or pooled:
    'fp8-kv is within 2 pt of bf16 on gsm8k (TOST, 95 %, n = 300)', or
    'fp8-kv within 2 pt of bf16 on gsm8k: not shown at n = 20 (Δ 90 % interval −9.0…+1.0 pt); about 410 items
    needed'."""
    ref = reference or "the reference"
    on = f" on {task}" if task else ""
    if eq.get("shown"):
        return f"{mode} is within {eq['margin_pt']:g} pt of {ref}{on} (TOST, 95 %, n = {eq.get('n')})"
    ci = eq.get("ci90_pt") or [None, None]
    ci_s = f" (Δ 90 % interval {ci[0]:+.1f}…{ci[1]:+.1f} pt)" if ci[0] is not None else ""
    need = (f"about {eq['items_needed']:,} items needed" if eq.get("items_needed")
            else "no n shows it: the observed Δ is at or past the margin")
    return f"{mode} within {eq['margin_pt']:g} pt of {ref}{on}: not shown at n = {eq.get('n')}{ci_s}; {need}"


def task_statements(mode: str, reference: str | None, suite: RowSuite | Mapping[str, Any]) -> list[str]:
    """One statement per ground-truth task that has a TOST (compare.py's per-task `equivalence`)."""
    tasks = RowSuite.of(suite).tasks or {}
    return [statement(mode, reference, v["equivalence"], name) for name, v in tasks.items()
            if name != "agreement" and isinstance(v, dict) and isinstance(v.get("equivalence"), dict)
            and v["equivalence"].get("n")]
