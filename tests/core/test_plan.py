"""The progress plan ("step n of about m") is the search's own: replayed on the verdicts so far, played out."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kvtui.core.search import make_search
from kvtui.explore.plan import steps_left
from kvtui.io.scenario.schema import Ramp


def run(ramp, knee, guess=None):
    """The steps a real search takes on a curve that passes up to `knee`, as the snapshot keeps them."""
    search, steps = make_search(ramp, True, guess=guess), []
    while (x := search.next()) is not None:
        why = "confirm" if search.s.confirming else "search"
        steps.append({"load": x, "passed": x <= knee, "why": why})
        search.record(x, x <= knee)
    return steps


@settings(max_examples=60, deadline=None)
@given(knee=st.integers(1, 300), hi=st.integers(8, 256), strategy=st.sampled_from(["fast", "linear"]),
       step=st.sampled_from(["double", "x1.5", "+8"]))
def test_the_plan_ends_with_the_search_and_is_exact_when_the_knee_is_where_it_aims(knee, hi, strategy, step):
    ramp = Ramp(start=1, max=hi, step=step, search=strategy)
    steps = run(ramp, knee, guess=knee)
    # Told where the knee is (the guess the search starts from), the plan is the run, step for step.
    assert steps_left(ramp, [], guess=knee) == len(steps)
    # Whatever it assumed on the way, the plan always has the search's next step, and none once it is done.
    for i in range(len(steps)):
        assert steps_left(ramp, steps[:i], guess=knee) >= 1
    assert steps_left(ramp, steps, guess=knee) == 0


def test_a_bracket_plans_its_bisection_and_the_two_confirmations():
    ramp = Ramp(start=1, max=256, resolution=1)
    # fast search from 1: 1 2 4 … 64 pass, 128 fails → bisect [64, 128] down to 1, then confirm 2 loads
    done = [{"load": float(2 ** i), "passed": True, "why": "search"} for i in range(7)]
    done.append({"load": 128.0, "passed": False, "why": "search"})
    assert steps_left(ramp, done) == 6 + 2
    # Hand-driven steps and loads the client failed are not verdicts: the plan ignores them.
    noise = [{"load": 3.0, "passed": False, "why": "manual"}, {"load": 5.0, "passed": False, "why": "hold"}]
    assert steps_left(ramp, noise + done) == 8
    # The snapshot's ramp (a dict, with keys the schema may not know) plans the same.
    assert steps_left({"start": 1, "max": 256, "resolution": 1, "future_key": 1}, done) == 8


def test_linear_ramp_after_its_first_fail_plans_the_confirmations_only():
    ramp = Ramp(start=1, max=64, step="double", search="linear")
    done = [{"load": x, "passed": x <= 8, "why": "search"} for x in (1.0, 2.0, 4.0, 8.0, 16.0)]
    assert steps_left(ramp, done) == 2  # 8 again, 16 again
