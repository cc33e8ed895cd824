"""The knee's interval (issue 28, item 4): bootstrap pass probabilities, an isotonic fit, lo/hi."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kvtui.core import knee_interval as ki
from kvtui.core.stats import PCTS


@settings(max_examples=300, deadline=None)
@given(vals=st.lists(st.one_of(st.floats(0, 100), st.just(math.inf)), max_size=80),
       limit=st.floats(0, 100), pct=st.sampled_from(sorted(PCTS)))
def test_the_rank_verdict_is_the_sorted_percentiles(vals, limit, pct):
    """A resample is judged from counts (no sort): the same verdict as the percentile itself."""
    q = PCTS[pct]
    n, le, top, low = ki._tally(vals, limit)
    assert ki.rank_passes(n, le, top, low, q, limit) == ki.pct_passes(vals, q, limit)


def _reqs(rng, n, ttft_ms, fail_share=0.0):
    return [ki.Req(ok=rng.random() >= fail_share, ttft=rng.expovariate(1 / ttft_ms), tpot=20.0, e2e=100.0,
                   itl=[rng.uniform(10, 30) for _ in range(5)]) for _ in range(n)]


def test_a_step_far_from_its_limit_is_sure_and_one_at_it_is_a_coin():
    rng = random.Random(1)
    targets = [ki.Target("ttft", "p95", 300.0), ki.Target("itl", "p95", 40.0)]
    far = _reqs(rng, 300, 30.0)  # p95 ≈ 90 ms against 300
    over = _reqs(rng, 300, 300.0)  # p95 ≈ 900 ms
    assert ki.step_pass_probability(far, targets, seed=3) == 1.0
    assert ki.step_pass_probability(over, targets, seed=3) == 0.0
    # At the limit: the p95 of the sample sits on it; resamples fall either side.
    at = _reqs(rng, 300, 100.0)
    p95 = sorted(r.ttft for r in at)[int(0.95 * 299)]
    p = ki.step_pass_probability(at, [ki.Target("ttft", "p95", p95)], seed=3)
    assert 0.2 < p < 0.8
    # Same seed, same answer; errors count against it as evaluate_step counts them.
    assert ki.step_pass_probability(at, [ki.Target("ttft", "p95", p95)], seed=3) == p
    assert ki.step_pass_probability(_reqs(rng, 300, 30.0, fail_share=0.2), targets, max_error_rate=0.05) == 0.0
    assert ki.step_pass_probability([], targets) is None


@settings(max_examples=300, deadline=None)
@given(ys=st.lists(st.floats(0, 1), min_size=1, max_size=30), ws=st.lists(st.floats(0.1, 10), min_size=30, max_size=30))
def test_isotonic_fit_never_rises_keeps_the_weighted_mean_and_leaves_a_falling_curve_alone(ys, ws):
    w = ws[:len(ys)]
    fit = ki.isotonic_decreasing(list(range(len(ys))), ys, w)
    assert len(fit) == len(ys)
    assert all(a >= b - 1e-12 for a, b in zip(fit, fit[1:]))
    assert math.isclose(sum(f * x for f, x in zip(fit, w)), sum(y * x for y, x in zip(ys, w)), rel_tol=1e-9, abs_tol=1e-9)
    falling = sorted(ys, reverse=True)
    assert ki.isotonic_decreasing(list(range(len(ys))), falling) == falling


def test_the_interval_of_a_sure_knee_is_the_knee_and_doubt_widens_it_both_ways():
    sure = [(40, 1.0, 100), (46, 1.0, 100), (52, 0.0, 100)]
    got = ki.knee_interval(sure, 46)
    assert (got["lo"], got["hi"]) == (46, 46) and got["method"] == "bootstrap-isotonic"
    assert ki.fmt_knee(46.0, got) == "46"  # beyond doubt: the knee alone
    doubt = [(40, 1.0, 100), (46, 0.6, 100), (52, 0.3, 100), (58, 0.0, 100)]
    got = ki.knee_interval(doubt, 46)
    assert (got["lo"], got["hi"]) == (40, 52)
    assert ki.fmt_knee(46.0, got) == "46 [40–52]"
    # a repeat that flipped: the two verdicts at 46 pool, and a pass above a fail is pooled down
    flip = [(40, 1.0, 100), (46, 1.0, 100), (46, 0.0, 100), (52, 0.95, 50), (58, 0.0, 100)]
    got = ki.knee_interval(flip, 40)
    fitted = dict((x, p) for x, p in got["pass_probability"])
    assert fitted[46] == fitted[52] and got["lo"] == 40 and got["hi"] == 52
    assert ki.knee_interval(sure, None) is None and ki.fmt_knee(46.0, None) == "46"


def test_a_knee_no_measured_load_is_sure_of_has_no_lower_end():
    """The H200's fp8-kv at 8k / 512, ITL p95 ≤ 100 ms: 26 passed twice, once sure (1.0) and once
    not (0.735: its token gaps sat at the p95's cliff); nothing below 26 was measured. The interval's
    lower end is unknown, never the knee itself."""
    got = ki.knee_interval([(26, 1.0, 50), (34, 0.0, 49), (26, 0.735, 48)], 26)
    assert got["lo"] is None and got["hi"] == 26
    assert ki.fmt_knee(26.0, got) == "26 [?–26]"
    assert ki.describe("26 (next 34 fails), confirmed", 26.0, got) == "26 [?–26] (next 34 fails), confirmed"
    from kvtui.quality.equivalence import cost_range, range_text
    rng = cost_range(0.5, None, None, 26.0, got)
    assert rng["hi"] is None and rng["knee_open"] and not rng["knee_exact"] and rng["lo"] == 0.5
    assert "open (the knee's lower end is unknown)" in range_text(rng)


def test_a_mode_without_pass_probabilities_has_no_interval():
    """Snapshots from before: no step has one, so the mode has none (its exports stay as they were)."""
    steps = [{"load": 4, "passed": True, "why": "search"}, {"load": 8, "passed": False, "why": "search"}]
    assert ki.for_mode(steps, 4) is None
    steps[0]["pass_probability"] = {"p": 1.0, "n_boot": 200, "requests": 50}
    steps[1]["pass_probability"] = {"p": 0.2, "n_boot": 200, "requests": 50}
    steps.append({"load": 6, "passed": None, "why": "search", "pass_probability": {"p": 0.9}})  # undecided: not judged
    got = ki.for_mode(steps, 4)
    assert got is not None and (got["lo"], got["hi"]) == (4, 8) and got["n_boot"] == 200
