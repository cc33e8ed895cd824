"""Recovery when the prediction is wrong (issue 28, item 5): after each judged step the refitted
prediction chooses the next probe, bracketed by what was measured, and the answer stays the
linear ramp's whatever the prediction says (right, ±30 %, arbitrary, changing every step)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from kvtui.core.search import FastSearch, LinearSearch
from kvtui.core.search_seeded import SeededSearch
from kvtui.explore.plan import replayed
from kvtui.io.scenario.schema import Ramp


def drive(search, knee, refit):
    """Run `search` against a monotone curve (pass iff load <= knee); after each judged step the
    prediction's knee is `refit(search, load, passed)` (None: unchanged), as predict_loop does.
    Returns the result, the loads, and the steps as a run stores them (predicted.knee kept)."""
    loads, steps = [], []
    while (x := search.next()) is not None:
        confirming = search.s.confirming
        ok = x <= knee
        k = getattr(search, "knee", None)
        steps.append({"load": x, "passed": ok, "why": "confirm" if confirming else "search",
                      "predicted": {"passed": k is not None and x <= k, "knee": k}})
        if not confirming:  # every probe outside the confirmation lies inside the open bracket
            s = search.s
            assert s.best is None or x > s.best
            assert s.fail is None or x < s.fail
        loads.append(x)
        search.record(x, ok)
        new = refit(search, x, ok)
        if new is not None:
            search.hint(new)
        assert len(loads) < 500
    return search.result(), loads, steps


def linear_answer(hi, knee):
    lin = LinearSearch(Ramp(start=1, max=hi, step="+1", resolution=1))
    while (x := lin.next()) is not None:
        lin.record(x, x <= knee)
    return lin.result()


@settings(max_examples=400, deadline=None)
@given(knee=st.integers(min_value=0, max_value=300), hi=st.integers(min_value=8, max_value=256),
       prior=st.one_of(st.none(), st.integers(-5, 600), st.floats(0.7, 1.3)),
       hints=st.lists(st.one_of(st.none(), st.integers(-10, 700), st.floats(0.5, 1.5)), max_size=40),
       style=st.sampled_from(["exact", "lag", "arbitrary", "none"]))
def test_whatever_the_prediction_says_the_answer_is_the_linear_ramps(knee, hi, prior, hints, style):
    """Floats are relative errors of the true knee, ints arbitrary knees; `lag` is a refit that only
    ever catches up with the highest pass (the worst honest refit)."""
    ramp = Ramp(start=1, max=hi, step="+1", resolution=1)
    seed = knee * prior if isinstance(prior, float) else prior
    todo = list(hints)

    def refit(search, load, ok):
        if style == "none":
            return None
        if style == "exact":
            return knee
        if style == "lag":
            s = search.s
            return s.best if s.best is not None else (s.fail or 1) - 1
        h = todo.pop(0) if todo else None
        return knee * h if isinstance(h, float) else h

    lin = linear_answer(hi, knee)
    res, loads, _ = drive(SeededSearch(ramp, knee=seed), knee, refit)
    assert (res.best, res.first_fail, res.reached_max) == (lin.best, lin.first_fail, lin.reached_max)
    assert res.flips == 0 and (res.confirmed or res.reached_max or res.best is None)
    assert len(loads) <= 4 * math.ceil(math.log2(hi)) + 6  # logarithmic, however wrong the prediction


@settings(max_examples=300, deadline=None)
@given(knee=st.integers(min_value=40, max_value=400), err=st.sampled_from([-0.3, -0.2, 0.2, 0.3]),
       res=st.sampled_from([1, 4, 16]))
def test_a_refit_that_finds_the_knee_closes_the_bracket_at_once(knee, err, res):
    """The prior 30 % off, the refit right after its first miss: the seed pair, the refitted knee's
    pair at most, and the confirmation — never the gallop past it and the bisection back."""
    ramp = Ramp(start=1, max=512, resolution=res)
    seed = round(knee * (1 + err))
    got, loads, _ = drive(SeededSearch(ramp, knee=seed), knee, lambda s, x, ok: knee)
    assert got.best is not None and got.best <= knee < got.first_fail and got.confirmed
    assert len(loads) <= 6
    fast, fast_loads, _ = drive(FastSearch(ramp, guess=seed), knee, lambda s, x, ok: None)
    assert fast.best == got.best or abs(fast.best - got.best) < res
    assert len(loads) <= len(fast_loads)


@settings(max_examples=200, deadline=None)
@given(knee=st.integers(min_value=5, max_value=250), prior=st.integers(1, 300),
       hints=st.lists(st.integers(1, 300), min_size=1, max_size=30), cut=st.integers(0, 12))
def test_a_replayed_search_asks_for_the_loads_the_run_measured(knee, prior, hints, cut):
    """Resume and the progress plan replay the finished steps: told each step's predicted knee
    again, the replayed search asks for the same loads, and for the same next one."""
    ramp = Ramp(start=1, max=256, resolution=2)
    todo = list(hints)
    live = SeededSearch(ramp, knee=prior)
    _, loads, steps = drive(live, knee, lambda s, x, ok: todo.pop(0) if todo else None)
    cut = min(cut, len(steps))
    again = replayed(ramp, steps[:cut], seed=float(prior))
    if cut < len(steps):
        from kvtui.core.search_seeded import rehint

        rehint(again, steps[cut])
        assert again.next() == loads[cut]
