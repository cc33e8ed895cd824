"""The search seeded by the prediction: the linear ramp's knee on monotone curves, whatever the prior."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from kvtui.core.search import FastSearch, LinearSearch
from kvtui.core.search_seeded import SeededSearch, choose_search
from kvtui.io.scenario.schema import Ramp


def drive(search, passes):
    loads = []
    while (x := search.next()) is not None:
        loads.append(x)
        search.record(x, passes(x))
        assert len(loads) < 500
    return search.result(), loads


@settings(max_examples=300, deadline=None)
@given(knee=st.integers(min_value=0, max_value=300), hi=st.integers(min_value=8, max_value=256),
       prior=st.one_of(st.none(), st.integers(-5, 600)), err=st.floats(-0.5, 1.0), use_err=st.booleans())
def test_seeded_finds_the_linear_ramps_knee_with_right_and_wrong_priors(knee, hi, prior, err, use_err):
    ramp = Ramp(start=1, max=hi, step="+1", resolution=1)
    guess = knee * (1 + err) if use_err else prior  # a relative error, or any prior at all
    lin, _ = drive(LinearSearch(ramp), lambda x: x <= knee)
    seeded, loads = drive(SeededSearch(ramp, knee=guess), lambda x: x <= knee)
    assert (seeded.best, seeded.first_fail, seeded.reached_max) == (lin.best, lin.first_fail, lin.reached_max)
    assert seeded.best == (None if knee < 1 else min(knee, hi))
    assert seeded.flips == 0 and not seeded.noisy
    assert len(loads) <= 4 * math.ceil(math.log2(hi)) + 6  # logarithmic, however wrong the prior


@settings(max_examples=200, deadline=None)
@given(knee=st.integers(min_value=2, max_value=240), res=st.sampled_from([1, 2, 4, 16]))
def test_a_right_prediction_takes_four_steps_with_confirmation(knee, res):
    ramp = Ramp(start=1, max=256, resolution=res)
    seeded, loads = drive(SeededSearch(ramp, knee=knee), lambda x: x <= knee)
    assert seeded.best == knee and seeded.confirmed
    assert loads == [knee, knee + res, knee, knee + res]


@settings(max_examples=200, deadline=None)
@given(knee=st.integers(min_value=16, max_value=200), res=st.sampled_from([1, 2, 4]),
       err=st.floats(-0.3, 0.3))
def test_resolution_answer_matches_the_fast_search(knee, res, err):
    """At a resolution r both searches stop with fail − pass ≤ r around the true knee."""
    ramp = Ramp(start=1, max=256, resolution=res)
    fast, _ = drive(FastSearch(ramp, guess=knee * 2), lambda x: x <= knee)
    seeded, _ = drive(SeededSearch(ramp, knee=knee * (1 + err)), lambda x: x <= knee)
    for r in (fast, seeded):
        assert r.best <= knee < r.first_fail and r.first_fail - r.best <= res


def test_a_flip_on_confirmation_moves_the_bracket_and_is_counted():
    ramp = Ramp(start=1, max=64, resolution=1)
    seen: dict[float, int] = {}

    def passes(x):  # 20 passes once, then fails: noise at the knee
        seen[x] = seen.get(x, 0) + 1
        return x < 20 or (x == 20 and seen[x] == 1)

    res, loads = drive(SeededSearch(ramp, knee=20), passes)
    assert loads[:3] == [20, 21, 20]
    assert res.flips >= 1 and res.best == 19 and res.first_fail == 20


def test_a_hint_goes_first_and_a_wrong_one_costs_no_answer():
    ramp = Ramp(start=1, max=256, resolution=1)
    s = SeededSearch(ramp, knee=100)
    assert s.next() == 100
    s.record(100, True)
    assert s.next() == 101
    s.record(101, True)
    s.hint(140)  # the refit says: about 140
    assert s.next() == 140
    s.record(140, False)
    s.hint(500)  # outside the bracket: ignored
    res, _ = drive(s, lambda x: x <= 133)
    assert res.best == 133 and res.first_fail == 134


def test_auto_is_seeded_for_real_engines_and_fast_runs_only_where_predicted():
    ramp = Ramp(start=1, max=64, search="auto")
    covered = {"covered": True, "knee": 12}
    # Every engine, the live simulator too (issue 49): it starts where --fast starts, at the predicted knee.
    assert choose_search(ramp, True, 30, covered).name == "seeded"
    assert choose_search(ramp, True, 30, {"covered": False}).name == "fast"
    assert choose_search(Ramp(search="seeded"), True, 30, covered).name == "seeded"
    assert choose_search(Ramp(search="fast"), True, 30, covered).name == "fast"
    assert choose_search(Ramp(search="linear"), True, 30, covered).name == "linear"


def test_the_progress_plan_of_a_seeded_mode_is_the_seeded_search():
    from kvtui.explore.plan import steps_left

    ramp = Ramp(start=1, max=256, resolution=4)
    assert steps_left(ramp, [], seed=100) == 4
    done = [{"load": 100, "passed": True, "why": "search"}, {"load": 104, "passed": False, "why": "search"}]
    assert steps_left(ramp, done, seed=100) == 2  # the confirmation's two repeats
