"""Continuous live steps in the load generator (kvtui.runtime.load.generator: hold_at_end, continue_from).

Real parts: the simulator (`kvtui sim serve`, the physical model of an H200) over loopback HTTP,
real worker processes. A step of 8 slots ends held; a step of 4 continues from its requests in
flight (a step down: the excess finish and are not replaced), with no drain and no cancel between.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from sim_server import serving_sim

from kvtui.core.record import Record
from kvtui.io.scenario.schema import Length, Workload
from kvtui.runtime.load.generator import LoadGenerator, StepParams, WorkerConfig
from kvtui.runtime.load.protocol import StatusTotals
from kvtui.runtime.load.workload import TokenSpace

KEY = "test-key-continued"


@pytest.fixture(scope="module")
def sim():
    with serving_sim(KEY) as base:
        yield base


def _cfg(base: str, out: Length | None = None) -> WorkerConfig:
    # 96 output tokens: each request streams for a good part of a second, so a step's end always
    # finds requests in flight.
    w = Workload(prompt_tokens=Length(value=256), output_tokens=out or Length(value=96), jitter=0.0)
    return WorkerConfig(base_url=base, model="llama-3.1-8b", headers={"Authorization": f"Bearer {KEY}"},
                        workload=dataclasses.asdict(w), space=dataclasses.asdict(TokenSpace.synthetic()),
                        max_model_len=4096, salt=11, seed=0, request_timeout_s=60)


def _params(index: int, load: int, **kw: Any) -> StepParams:
    return StepParams("m", index, load, True, warmup_s=0.5, window_s=1.5, min_window_requests=4, **kw)


def _covered(recs: list[Record], t0: float, t1: float, t_open: float) -> bool:
    """Whether some request was in flight at every instant of [t0, t1] (a request still open at the
    end counts until t_open)."""
    spans = sorted((r.t_sent, r.t_last if r.t_last is not None else t_open) for r in recs if r.t_sent)
    reach = t0
    for a, b in spans:
        if a > reach:
            if a >= t1:
                break
            return False
        reach = max(reach, b)
    return reach >= t1


def test_a_continued_step_down_goes_on_from_the_requests_in_flight(sim):
    statuses: list[StatusTotals] = []
    streamed: list[Record] = []
    # Requests of 0.4 to 3 s (against a status every 0.2 s), of random lengths so that the slots do
    # not finish in lock-step: the moment the warm-up rule opens the window is seen.
    with LoadGenerator(_cfg(sim, Length(dist="uniform", min=64, max=512)), processes=2) as lg:
        r1 = lg.run_step(_params(0, 8, hold_at_end=True), on_records=streamed.extend)
        assert r1.held and not r1.aborted and lg.held is not None
        assert lg.held.in_flight == len(r1.carried_out) > 0
        # No warm-up time: the window opens on the warm-up rule alone (the excess finished, every
        # kept slot finished a request), which the assertions below then see.
        r2 = lg.run_step(dataclasses.replace(_params(1, 4, continue_from=True), warmup_s=0.0),
                         on_records=streamed.extend,
                         on_status=lambda _phase, _elapsed_s, tot: statuses.append(tot))
        assert lg.held is None  # step 2 was not asked to hold: it stopped
    assert r2.continued and r2.continued_why is None
    assert r2.continued_from is not None and (r2.continued_from["step"], r2.continued_from["load"]) == (0, 8)
    assert r2.continued_from["in_flight"] > 0

    # Requests of step 1 ended during step 2, each recorded once, with the step and phase it was sent in.
    assert r2.carried_in and all(r.step == 0 for r in r2.carried_in)
    assert any(r.t_last is not None and r.t_last > r2.t_start for r in r2.carried_in)
    assert all(r.step == 1 for r in r2.records) and all(r.step == 0 for r in r1.records)
    # Nothing was cancelled at the boundary: step 1's requests all ran to their end.
    assert not [r for r in r1.records + r2.carried_in if r.error == "cancelled"]
    assert all(r.ok for r in r1.records + r2.carried_in)
    # Each cut copy step 1 kept (its view of a request in flight at its end) is of a request that
    # then ended in step 2, under the same id, with more tokens than the copy saw.
    later = {r.id: r for r in r2.carried_in}
    for c in r1.carried_out:
        assert c.error == "cancelled" and c.detail == "carried into the next step" and c.step == 0
        assert c.id in later and len(later[c.id].itl) >= len(c.itl)

    # The server never went idle between the two steps, nor inside step 2.
    every = r1.records + r2.carried_in + r2.records
    assert _covered(every, r1.t_window_start, r2.t_window_end, r2.t_end)
    assert statuses and min(s.inflight for s in statuses) > 0

    # The step down: the window opened once the excess had finished and every kept slot had
    # finished a request at the new load — every carried request ended before it, and at most 4 ran.
    assert all(r.t_last is not None and r.t_last <= r2.t_window_start for r in r2.carried_in)
    at_open = [r for r in every if r.t_sent <= r2.t_window_start and (r.t_last is None or r.t_last > r2.t_window_start)]
    assert len(at_open) <= 4
    window = [r for r in r2.records if r.phase == "window"]
    assert len(window) > 0 and all(r.ok for r in window)

    # Every request has one record and one id over the pair; the file saw each once.
    ids = [r.id for r in every]
    assert len(ids) == len(set(ids))
    assert sorted(r.id for r in streamed) == sorted(ids)
    assert r2.counter_next > r1.counter_next


def test_a_continued_step_after_an_aborted_step_starts_fresh(sim):
    seen: list[str] = []  # the phases reported: the user stops the step once its window is open
    with LoadGenerator(_cfg(sim), processes=1) as lg:
        r1 = lg.run_step(_params(0, 8, hold_at_end=True), on_status=lambda phase, _elapsed_s, _tot: seen.append(phase),
                         should_stop=lambda: "stopped by the user" if "window" in seen else None)
        assert r1.aborted == "stopped by the user" and not r1.held and lg.held is None
        r2 = lg.run_step(_params(1, 4, continue_from=True))
    assert not r2.continued and r2.continued_from is None and not r2.carried_in
    assert r2.continued_why is not None and "ended abnormally" in r2.continued_why
    assert "stopped by the user" in r2.continued_why
    # Step 1's requests in flight were cancelled at its end; step 2 sent all of its own.
    assert any(r.error == "cancelled" for r in r1.records)
    assert all(r.t_sent >= r2.t_start for r in r2.records)
    assert [r for r in r2.records if r.phase == "window"]
    ids = [r.id for r in r1.records + r2.records]
    assert len(ids) == len(set(ids))


def test_a_held_step_that_is_not_continued_is_released_with_unique_ids(sim):
    with LoadGenerator(_cfg(sim), processes=2) as lg:
        r1 = lg.run_step(_params(0, 4, hold_at_end=True))
        assert r1.held
        released = lg.release()
        assert lg.held is None and lg.release() == []
        r2 = lg.run_step(_params(1, 4, continue_from=True))
    # Released: every request still in flight was cancelled, recorded under the step it was sent in.
    assert released and all(r.step == 0 for r in released)
    assert {c.id for c in r1.carried_out} <= {r.id for r in released}
    assert any(r.error == "cancelled" for r in released)
    assert not r2.continued and r2.continued_why is not None and "released" in r2.continued_why
    assert all(r.t_sent >= r2.t_start for r in r2.records)
    # Requests sent while held (after step 1's end) took counters the next step does not reuse.
    ids = [r.id for r in r1.records + released + r2.records]
    assert len(ids) == len(set(ids))


def test_a_continued_step_up_adds_slots(sim):
    # The API adds slots on a continued step up (the protocol drains before one: kvtui.core.protocol).
    with LoadGenerator(_cfg(sim), processes=1) as lg:
        r1 = lg.run_step(_params(0, 2, hold_at_end=True))
        r2 = lg.run_step(_params(1, 5, continue_from=True))
    assert r1.held and r2.continued
    window = [r for r in r2.records if r.phase == "window"]
    assert window
    at_open = [r for r in r1.records + r2.carried_in + r2.records
               if r.t_sent <= r2.t_window_start and (r.t_last is None or r.t_last > r2.t_window_start)]
    assert 1 <= len(at_open) <= 5
    ids = [r.id for r in r1.records + r2.carried_in + r2.records]
    assert len(ids) == len(set(ids))


def test_a_step_held_at_its_first_tokens_hands_its_cut_window_requests_on(sim):
    # tail "first_token" (a TTFT/ITL SLO): the held step ends while its window requests still
    # stream. Its cut copies carry their tokens so far (window_stats counts them); the requests end
    # in the next step, which counts none of them: its own tail waits for its own window requests.
    long = Length(dist="uniform", min=256, max=512)
    with LoadGenerator(_cfg(sim, long), processes=1) as lg:
        r1 = lg.run_step(_params(0, 6, hold_at_end=True, tail="first_token"))
        r2 = lg.run_step(_params(1, 6, continue_from=True))
    cut = [c for c in r1.carried_out if c.phase == "window"]
    assert r1.held and cut and all(c.t_first is not None for c in cut)
    assert r2.continued
    ended = {r.id: r for r in r2.carried_in}
    assert all(ended[c.id].phase == "window" and ended[c.id].step == 0 and ended[c.id].ok for c in cut)
    window = [r for r in r2.records if r.phase == "window"]
    # Step 2's full tail: every request that started in its window ran to its end.
    assert window and all(r.ok and r.t_last is not None for r in window)


def test_every_record_carries_the_whole_steps_load_not_its_workers_share(sim):
    # 3 slots on 2 workers are shares of 2 and 1: each record said its worker's share (2 or 1).
    with LoadGenerator(_cfg(sim), processes=2) as lg:
        res = lg.run_step(_params(0, 3))
    assert res.records and {r.load for r in res.records} == {3.0}


def test_a_step_continued_after_a_pause_still_counts_its_own_window(sim):
    # Between steps (the run evaluates and journals the step) the held step's slots and reporter go
    # on; the continued step's window still waits for its own 12 starts, not the held step's count.
    import time

    with LoadGenerator(_cfg(sim), processes=2) as lg:
        p0 = StepParams("m", 0, 8, True, warmup_s=0.05, window_s=0.05, min_window_requests=12, hold_at_end=True,
                        max_window_factor=1000)
        first = lg.run_step(p0)
        assert first.held and sum(1 for r in first.records if r.phase == "window") >= 12
        time.sleep(1.0)  # the run evaluates and journals the step: statuses pile up
        p1 = StepParams("m", 1, 4, True, warmup_s=0.05, window_s=0.05, min_window_requests=12, continue_from=True,
                        max_window_factor=1000)
        second = lg.run_step(p1)
    assert second.continued
    assert sum(1 for r in second.records if r.phase == "window") >= 12


def test_a_births_tail_waits_for_the_window_requests_sent_by_its_cutoff_only(sim):
    # tail "births" (a TPOT/E2E SLO, kvtui.core.births): requests of about 2-4 s; the cutoff 2.5 s
    # before the window's end. The step ends once every window request sent by the cutoff has
    # finished (and each has its first token), not one whole request after the window: those sent
    # later are still streaming then, carried on into the next step (by their cut copies here).
    long = Length(dist="uniform", min=256, max=512)
    with LoadGenerator(_cfg(sim, long), processes=2) as lg:
        r = lg.run_step(StepParams("m", 0, 8, True, warmup_s=0.5, window_s=9.0, min_window_requests=4,
                                   tail="births", births_s=2.5, hold_at_end=True))
    assert r.held and not r.aborted
    assert r.t_births_end == pytest.approx(r.t_window_end - 2.5)
    window = [x for x in r.records if x.phase == "window"]
    born = [x for x in window if x.t_intended <= r.t_births_end]
    assert len(born) >= 8 and all(x.ok and x.t_last is not None and x.t_last <= r.t_end for x in born)
    late = [c for c in r.carried_out if c.phase == "window"]
    assert late and all(c.t_intended > r.t_births_end and c.t_first is not None for c in late)


def test_a_births_cutoff_never_takes_fewer_requests_than_the_rule_and_no_estimate_waits_for_all(sim):
    # The cutoff 5.9 s before the end of a 6 s window: fewer than 2 × 4 window requests were sent by
    # then, so the cutoff moves to the 8th one's send (births.SAMPLE_FACTOR × the rule's count).
    long = Length(dist="uniform", min=256, max=512)
    with LoadGenerator(_cfg(sim, long), processes=2) as lg:
        r = lg.run_step(StepParams("m", 0, 8, True, warmup_s=0.5, window_s=6.0, min_window_requests=4,
                                   tail="births", births_s=5.9, hold_at_end=True))
        window = sorted((x for x in r.records + r.carried_out if x.phase == "window"), key=lambda x: x.t_intended)
        assert r.held and r.t_births_end == pytest.approx(window[7].t_intended)
        assert all(x.ok and x.t_last is not None for x in window[:8])
        # No request duration known (a first step with no prediction): every window request counts,
        # and the step holds until each has finished (the whole tail).
        r2 = lg.run_step(StepParams("m", 1, 8, True, warmup_s=0.5, window_s=3.0, min_window_requests=4,
                                    tail="births", births_s=None, hold_at_end=True))
    assert r2.held and r2.t_births_end is None
    window = [x for x in r2.records if x.phase == "window"]
    assert window and all(x.ok and x.t_last is not None for x in window)
    assert not [c for c in r2.carried_out if c.phase == "window"]


def test_a_step_whose_verdict_is_decided_ends_there_as_a_normal_step(sim):
    """`decided` (a preemption where the SLO allows none, kvtui.core.protocol.preemption_decides)
    is asked once a window request was sent; the step then ends at once, held like a normal end, its
    window cut short, and `run.decided` says why. Not asked in the warm-up."""
    asked: list[str] = []

    def decided() -> str | None:
        asked.append("x")
        return "decided: a preemption"

    with LoadGenerator(_cfg(sim), processes=1) as lg:
        r = lg.run_step(dataclasses.replace(_params(0, 6, hold_at_end=True), window_s=30.0), decided=decided)
        assert lg.held is not None  # held, as a step that ends normally
    assert r.decided == "decided: a preemption" and not r.aborted and r.held
    assert len(asked) == 1  # ended at the first answer
    # The by-time rule cannot close a 30 s window before 30 s: it closed on `decided` (no speed threshold).
    assert r.t_window_end - r.t_window_start < 30.0
    window = [x for x in r.records + r.carried_out if x.phase == "window"]
    assert window  # a window request was sent before it was asked


def test_a_window_look_sees_only_whole_cohorts_and_its_verdict_closes_the_window(sim):
    """`window_look(elapsed, bound)` (the live sequential test, kvtui.explore.live_look) is asked in
    the window with a bound before which every window request sent has finished and reached
    on_records: checked here at every ask against the step's own records, over two worker processes.
    Its verdict closes the window there; the tail then runs as usual and the step ends held."""
    import time

    got: dict[str, Record] = {}
    asks: list[tuple[float, float, set[str]]] = []  # (when, bound, window ids delivered by then)

    def on_records(recs: list[Record]) -> None:
        got.update((r.id, r) for r in recs)

    def look(elapsed: float, bound: float) -> str | None:
        delivered = {i for i, r in got.items() if r.phase == "window" and r.step == 0}
        asks.append((time.monotonic(), bound, delivered))
        # Decided once 12 window requests have ended: more than the births rule's 2 × 4, so the tail's
        # cutoff is a send time (on a slow machine 2 s of window once held 8 or fewer, and no cutoff)
        return "decided: test" if elapsed >= 2.0 and len(asks) >= 10 and len(delivered) >= 12 else None

    long = Length(dist="uniform", min=128, max=384)
    with LoadGenerator(_cfg(sim, long), processes=2) as lg:
        r = lg.run_step(StepParams("m", 0, 8, True, warmup_s=0.5, window_s=30.0, min_window_requests=4,
                                   tail="births", births_s=1.0, hold_at_end=True),
                        on_records=on_records, window_look=look)
        assert lg.held is not None
    assert r.window_decided == "decided: test" and not r.decided and not r.aborted and r.held
    # Closed by the look, not by time (a 30 s window), and the births tail ran after it.
    assert r.t_window_end - r.t_window_start < 30.0 and r.t_births_end is not None
    window = [x for x in r.records + r.carried_out if x.phase == "window"]
    assert len(asks) >= 10 and window
    cohorts = 0
    for when, bound, delivered in asks:
        before = [x for x in window if x.t_intended < bound]
        # each one sent before the bound had ended by the ask, and its record had been delivered
        assert all(x.ok and x.t_last is not None and x.t_last <= when for x in before)
        assert {x.id for x in before} <= delivered
        cohorts += bool(before)
    assert cohorts  # some ask saw a cohort (not vacuous)
    # No window request was sent after the window closed.
    assert all(x.t_intended <= r.t_window_end for x in window)


def test_a_request_sent_after_the_window_closed_is_a_tail_request():
    """The parent closes a window by a message: a worker may send one more request as a window one
    before it hears. The parent files it as a tail request, by its own clock (the one the workers'
    send times are in), so no window request was sent after the window's end."""
    def rec(t: float, phase: str = "window") -> Record:
        return Record(id=f"r{t}", mode="m", step=0, load=8, phase=phase, t_intended=t, t_sent=t)

    late, inside, warm = rec(100.004), rec(99.9), rec(100.01, "warmup")
    for r in (late, inside, warm):
        LoadGenerator._after_window(r, 100.0)
    assert (late.phase, inside.phase, warm.phase) == ("tail", "window", "warmup")
    early = rec(100.004)
    LoadGenerator._after_window(early, None)  # the window has not closed yet
    assert early.phase == "window"
