"""The sequential test (kvtui.core.sequential): exact maths, and its error rate by simulation."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kvtui.core.sequential import SequentialTest, binom_cdf, decide, per_test_alpha, quantile_bounds


def test_binomial_cdf_matches_the_sum() -> None:
    for n, p in ((10, 0.3), (40, 0.05), (200, 0.5)):
        for x in (0, 1, n // 3, n - 1, n):
            exact = sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(x + 1))
            assert abs(binom_cdf(x, n, p) - exact) < 1e-9


def test_clear_cases_decide_and_close_ones_do_not() -> None:
    a = per_test_alpha(0.95, 20, 2)
    assert decide(400, 0, 0.95, a) is True  # none above the limit in 400: p95 is below it
    assert decide(400, 120, 0.95, a) is False  # 30 % above: p95 is above it
    assert decide(400, 20, 0.95, a) is None  # 5 % above: exactly the boundary
    assert decide(20, 0, 0.95, a) is None  # too few to say (0.95**20 = 36 %)


def test_quantile_bounds_bracket_the_sample_quantile() -> None:
    xs = sorted(float(i) for i in range(1000))
    lo, hi = quantile_bounds(xs, 0.95, 0.01)
    assert lo is not None and hi is not None and lo < 950 < hi


def _wrong_rate(theta: float, q: float, confidence: float, looks: int, n_per_look: int, trials: int,
                seed: int) -> float:
    """Share of simulated steps whose early verdict is wrong; samples: 1.0 above the limit w.p. theta."""
    rng = random.Random(seed)
    truth_pass = theta <= 1 - q
    wrong = 0
    for _ in range(trials):
        t = SequentialTest([("ttft", q, 0.5)], confidence=confidence, max_looks=looks, min_samples=n_per_look)
        xs: list[float] = []
        for k in range(looks):
            xs += [1.0 if rng.random() < theta else 0.0 for _ in range(n_per_look)]
            v = t.look(float(k), {"ttft": xs})
            if v is not None:
                # at the boundary itself both verdicts count as wrong: the test must not be sure of either
                if v != truth_pass or theta == 1 - q:
                    wrong += 1
                break
    return wrong / trials


@settings(max_examples=20, deadline=None)
@given(theta=st.sampled_from([0.05, 0.055, 0.045, 0.07, 0.03]), looks=st.integers(2, 8),
       n_per_look=st.integers(20, 60), confidence=st.sampled_from([0.9, 0.95]), seed=st.integers(0, 10_000))
def test_error_rate_holds_at_the_stated_confidence_with_peeking(theta: float, looks: int, n_per_look: int,
                                                                confidence: float, seed: int) -> None:
    trials = 400
    rate = _wrong_rate(theta, 0.95, confidence, looks, n_per_look, trials, seed)
    alpha = 1 - confidence
    slack = 3 * math.sqrt(alpha * (1 - alpha) / trials)  # Monte Carlo noise
    assert rate <= alpha + slack, (rate, alpha)


def test_peeking_without_the_union_bound_would_break_it() -> None:
    """The same looks at α each (no correction) err more often: the bound is what keeps the rate."""
    rng = random.Random(3)
    wrong = 0
    trials = 400
    for _ in range(trials):
        xs: list[float] = []
        for _k in range(12):
            xs += [1.0 if rng.random() < 0.05 else 0.0 for _ in range(40)]
            v = decide(len(xs), sum(1 for x in xs if x > 0.5), 0.95, 0.05)
            if v is not None:
                wrong += 1
                break
    assert wrong / trials > 0.05
    assert _wrong_rate(0.05, 0.95, 0.95, 12, 40, trials, 3) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / trials)


def test_a_step_passes_early_only_when_every_target_is_decided() -> None:
    t = SequentialTest([("ttft", 0.95, 100.0), ("tpot", 0.95, 10.0)], max_looks=4, min_samples=40)
    assert t.look(1.0, {"ttft": [1.0] * 500, "tpot": [9.0] * 30}) is None  # tpot under its minimum
    assert t.look(2.0, {"ttft": [1.0] * 500, "tpot": [9.0] * 500}) is True
    rec = t.record(stopped_early=True)
    assert rec["stopped_early"] and rec["verdict"] is True and rec["looks"] == 2
    f = SequentialTest([("ttft", 0.95, 100.0)], max_looks=4, min_samples=40)
    assert f.look(1.0, {"ttft": [math.inf] * 60}) is False  # failed requests count as +inf
