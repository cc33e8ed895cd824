"""An open loop's gaps (kvtui.core.arrivals), drawn the same way by the live workers and the simulator."""

from __future__ import annotations

import random

import pytest

from kvtui.core.arrivals import ArrivalGaps


def _draw(kind: str, rate: float, burst: int, seed: int, n: int) -> list[float]:
    g = ArrivalGaps(kind, rate, burst, random.Random(seed))
    return [g.next() for _ in range(n)]


def test_poisson_gaps_are_the_generators_own_exponential_draws():
    # the very calls the workers and the simulator made before they shared this: no Poisson figure moves
    rng = random.Random(7)
    assert _draw("poisson", 4.0, 8, 7, 50) == [rng.expovariate(4.0) for _ in range(50)]


def test_constant_gaps_are_one_over_the_rate():
    assert _draw("constant", 8.0, 8, 1, 20) == [0.125] * 20


def test_bursty_sends_bursts_of_burst_size_at_the_rate_on_average():
    gaps = _draw("bursty", 10.0, 5, 3, 50_000)
    assert all(g == 0.0 for k, g in enumerate(gaps) if k % 5)  # inside a burst: at once
    assert all(g > 0.0 for g in gaps[::5])  # between bursts: an exponential gap
    assert sum(gaps) / len(gaps) == pytest.approx(1 / 10.0, rel=0.03)  # the rate holds on average


def test_a_kind_without_gaps_of_its_own_is_poisson_and_a_rate_must_be_positive():
    assert _draw("trace", 4.0, 8, 2, 10) == _draw("poisson", 4.0, 8, 2, 10)
    with pytest.raises(ValueError, match="rate > 0"):
        ArrivalGaps("poisson", 0.0, 8, random.Random(0))
    with pytest.raises(ValueError, match="burst_size >= 1"):
        ArrivalGaps("bursty", 4.0, 0, random.Random(0))
