"""Search strategies on known latency curves: the fast search must find the linear ramp's knee."""

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kvtui.core.search import FastSearch, LinearSearch, make_search, ramp_levels
from kvtui.io.scenario.schema import Ramp


def drive(search, passes):
    loads = []
    while (x := search.next()) is not None:
        loads.append(x)
        search.record(x, passes(x))
        assert len(loads) < 2000
    return search.result(), loads


@settings(max_examples=200, deadline=None)
@given(knee=st.integers(min_value=0, max_value=300), guess=st.one_of(st.none(), st.integers(1, 600)),
       hi=st.integers(min_value=8, max_value=256))
def test_fast_finds_the_same_knee_as_linear_ramp(knee, guess, hi):
    ramp = Ramp(start=1, max=hi, step="+1", resolution=1)
    lin, lin_loads = drive(LinearSearch(ramp), lambda x: x <= knee)
    fast, fast_loads = drive(FastSearch(ramp, guess=guess), lambda x: x <= knee)
    assert fast.best == lin.best
    assert fast.first_fail == lin.first_fail
    assert fast.reached_max == lin.reached_max
    expected = None if knee < 1 else min(knee, hi)
    assert fast.best == expected
    assert fast.flips == 0 and not fast.noisy
    assert len(fast_loads) <= 2 * math.ceil(math.log2(hi)) + 8  # logarithmic, whatever the guess
    if 64 <= knee < hi:
        assert len(fast_loads) * 3 < len(lin_loads)  # "far fewer steps"


def test_confirmation_repeats_pass_and_fail():
    ramp = Ramp(start=1, max=64, resolution=1)
    res, loads = drive(FastSearch(ramp, guess=10), lambda x: x <= 13)
    assert res.best == 13 and res.first_fail == 14 and res.confirmed
    assert sorted(loads[-2:]) == [13, 14]
    # The pass it repeats is never the step just before (a repeat of the step before starts from
    # an idle server under the continuous protocol; after another load it continues from it).
    assert loads[-2] != loads[-3]


def test_the_confirmation_never_repeats_the_search_s_last_step_first():
    ramp = Ramp(start=1, max=64, resolution=1)
    orders = set()
    for guess in range(8, 20):
        res, loads = drive(FastSearch(ramp, guess=guess), lambda x: x <= 13)
        assert res.best == 13 and res.first_fail == 14 and res.confirmed
        search, confirm = loads[:-2], loads[-2:]
        assert sorted(confirm) == [13, 14] and confirm[0] != search[-1]
        orders.add(tuple(confirm))
    assert orders == {(13, 14), (14, 13)}  # both orders occur, each after the other load


def test_a_flip_on_confirmation_moves_the_bracket_and_is_counted():
    ramp = Ramp(start=1, max=64, resolution=1)
    seen = {}

    def noisy(x):  # 13 passes the first time, fails on its repeat
        seen[x] = seen.get(x, 0) + 1
        return x <= 12 or (x == 13 and seen[x] == 1)

    res, loads = drive(FastSearch(ramp, guess=10), noisy)
    assert res.best == 12 and res.first_fail == 13
    assert res.flips == 1 and not res.noisy


def test_noise_that_flips_twice_is_called_noisy():
    ramp = Ramp(start=1, max=64, resolution=1)
    rng = random.Random(4)
    res, _ = drive(FastSearch(ramp, guess=10), lambda x: x <= 10 or (x < 20 and rng.random() < 0.5))
    assert res.best is not None
    if res.flips > 1:
        assert res.noisy and "noisy" in res.describe()


def test_no_load_passes():
    res, loads = drive(make_search(Ramp(start=1, max=64), True, guess=32), lambda x: False)
    assert res.best is None and res.first_fail == 1
    assert "no load met the SLO" in res.describe()


def test_everything_passes_reports_max_reached():
    res, _ = drive(make_search(Ramp(start=1, max=64), True, guess=5), lambda x: True)
    assert res.best == 64 and res.reached_max


def test_a_step_list_that_ends_below_max_with_every_load_passing_says_the_limit_is_higher():
    """The H200 quality run listed "16,32,64,128,256" under a max of 512: every load passed, and the
    answer read "256 at the SLO" with no caveat, as if 256 were the knee."""
    from kvtui.report.answer import build_answer

    res, loads = drive(LinearSearch(Ramp(start=16, max=512, step="16,32,64,128,256"), confirm=False), lambda x: True)
    assert loads == [16, 32, 64, 128, 256] and res.best == 256 and res.first_fail is None and res.reached_max
    res, _ = drive(LinearSearch(Ramp(start=16, max=512, step="16,32,64,128,256"), confirm=False), lambda x: x < 100)
    assert res.best == 64 and not res.reached_max  # a failure bounds it: no caveat
    doc = {"modes": [{"name": "bf16", "best_concurrency": 256, "steps": [],
                      "search": {"best": 256, "first_fail": None, "reached_max": True}}]}
    assert "bf16: every load it measured passed (up to 256); the limit is higher" in build_answer(doc)["caveats"]
    # A snapshot written before the search set it: derived from a best with no failure above it.
    doc["modes"][0]["search"] = {"best": 256, "first_fail": None}
    assert "bf16: every load it measured passed (up to 256); the limit is higher" in build_answer(doc)["caveats"]
    doc["modes"][0]["search"] = {"best": 256, "first_fail": 512}
    assert not [c for c in build_answer(doc)["caveats"] if "the limit is higher" in c]


def test_ramp_levels():
    assert ramp_levels(Ramp(start=1, max=40, step="double")) == [1, 2, 4, 8, 16, 32, 40]
    assert ramp_levels(Ramp(start=4, max=20, step="+8")) == [4, 12, 20]
    assert ramp_levels(Ramp(start=1, max=100, step="8, 16,64")) == [8, 16, 64]
    assert ramp_levels(Ramp(start=1, max=10, step="x3")) == [1, 3, 9, 10]
    assert ramp_levels(Ramp(load="rate", start=0.5, max=2, step="double"), closed=False) == [0.5, 1.0, 2.0]


def test_resolution_is_relative_and_the_same_rule_for_every_mode():
    ramp = Ramp(start=1, max=1024)
    res, loads = drive(FastSearch(ramp, guess=100), lambda x: x <= 300)
    assert res.best is not None and res.first_fail is not None
    assert res.first_fail - res.best <= max(1, res.best // 16)
    assert res.best <= 300 < res.first_fail


def test_doubt_does_not_repeat_a_knee_load_whose_verdicts_disagree():
    """The H200 at 8k / 512, ITL p95 ≤ 100 ms (docs/results/h200-8k512-itl100.md): fp8-w+kv's 28
    failed (104.8 ms), passed its repeat (99.6), and the search went on: 36 failed, settled; then the
    confirmation repeated 28 (103.8: fail), 20 and 28 again (98.1: pass), 8 steps. Under "doubt" a
    knee load that has passed and failed is not repeated once more (another coin): 5 steps, the same
    knee, called noisy; under "always" (the careful method) the confirmation goes on as before."""
    from kvtui.core.search import FLIPPED
    from kvtui.core.search_seeded import SeededSearch

    def run(when: str) -> tuple:
        verdicts = {20.0: [True] * 9, 28.0: [False, True, False, True, False, True], 36.0: [False] * 9}
        s = SeededSearch(Ramp(start=8, max=256, resolution=8, confirm_when=when), knee=20)
        loads = []
        while (x := s.next()) is not None and len(loads) < 20:
            loads.append(x)
            s.record(x, verdicts[x].pop(0), "itl decided FAIL at 95%" if x == 36.0 else None)
        return s.result(), loads

    res, loads = run("doubt")
    assert loads == [20, 28, 20, 28, 36]
    assert (res.best, res.first_fail, res.flips) == (28, 36, 1) and res.noisy
    assert res.settled == {28.0: FLIPPED, 36.0: "itl decided FAIL at 95%"}
    assert res.describe() == ("28 (next 36 fails), settled without a repeat, 28 passed and failed (not repeated "
                              "again), pass/fail flipped 1× — noisy")
    careful, loads = run("always")
    assert loads[:6] == [20, 28, 20, 28, 36, 28] and len(loads) > 6 and not careful.settled
