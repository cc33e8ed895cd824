import math

from hypothesis import given
from hypothesis import strategies as st

from kvtui.core.stats import min_samples_for, percentile, summarize


def test_percentile_matches_numpy_linear_interpolation():
    xs = [1.0, 2.0, 3.0, 4.0, 10.0]
    # numpy.percentile(xs, [50, 90, 95, 99]) → 3.0, 7.6, 8.8, 9.76
    assert percentile(xs, 0.50) == 3.0
    assert math.isclose(percentile(xs, 0.90), 7.6)
    assert math.isclose(percentile(xs, 0.95), 8.8)
    assert math.isclose(percentile(xs, 0.99), 9.76)


def test_failures_count_as_infinite_latency():
    s = summarize([0.1] * 90, failures=10)  # 10 % failed
    assert s["n"] == 100 and s["failures"] == 10
    assert s["p50"] == 100.0
    assert math.isinf(s["p95"])  # more than 5 % failures: p95 is infinite
    assert s["mean"] == 100.0  # the mean is over finished requests


def test_percentile_refused_when_under_sampled():
    s = summarize([0.01] * 30)
    assert s["p50"] == 10.0 and s["p90"] == 10.0
    assert s["p95"] is None  # 30 < 40 needed
    assert s["p99"] is None
    assert min_samples_for(0.99) == 200 and min_samples_for(0.95) == 40


@given(st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), min_size=1, max_size=300),
       st.floats(min_value=0, max_value=1))
def test_percentile_within_bounds_and_monotone(xs, q):
    xs = sorted(xs)
    v = percentile(xs, q)
    assert xs[0] - 1e-9 <= v <= xs[-1] + 1e-9
    assert percentile(xs, min(1.0, q + 0.1)) >= v - 1e-9
