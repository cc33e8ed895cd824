"""The workers' status messages, typed (kvtui.runtime.load.protocol.WorkerStatus), summed, and read by the
step's phases and the live look's cohort bound: plain values, no process."""

from __future__ import annotations

import pickle

from kvtui.runtime.load.generator import LoadGenerator, StepParams, cohort_bound
from kvtui.runtime.load.protocol import StatusTotals, WorkerStatus, sum_status


def test_statuses_are_summed_over_the_active_workers_only():
    a = WorkerStatus(step=3, phase="tail", inflight=4, window_started=10, window_no_first=1, warm_slots=4,
                     window_births=(1.0, 2.0), window_live_births=(2.0,), completed=7, sent=11)
    b = WorkerStatus(step=3, phase="window", inflight=3, window_started=8, warm_slots=3, excess=1,
                     window_live_births=(1.5,), client_failure="a load task failed")
    c = WorkerStatus(step=3, inflight=99, error_burst=True)  # not active: not counted
    tot = sum_status({0: a, 1: b, 2: c}, [0, 1])
    assert (tot.inflight, tot.window_started, tot.window_no_first, tot.warm_slots, tot.excess) == (7, 18, 1, 7, 1)
    assert tot.window_births == (1.0, 2.0) and sorted(tot.window_live_births) == [1.5, 2.0]
    assert not tot.error_burst and tot.client_failure == "a load task failed"
    assert sum_status({}, [0, 1]) == StatusTotals()


def test_a_status_crosses_the_pipe_as_it_is():
    s = WorkerStatus(step=1, phase="window", t=12.5, window_live_births=(3.0, 4.0))
    assert pickle.loads(pickle.dumps(s)) == s


def test_the_cohort_bound_waits_for_every_worker_and_takes_the_earliest_request_in_flight():
    assert cohort_bound({0: WorkerStatus(t=10.0)}, [0, 1]) is None  # worker 1 has not reported
    st = {0: WorkerStatus(t=10.0, window_live_births=(7.5, 8.0)), 1: WorkerStatus(t=9.0)}
    assert cohort_bound(st, [0, 1]) == 7.5
    assert cohort_bound({0: WorkerStatus(t=10.0), 1: WorkerStatus(t=9.0)}, [0, 1]) == 9.0


def test_the_phases_read_warm_slots_and_the_tail_from_the_statuses():
    p = StepParams("m", 0, load=4, closed=True, warmup_s=1, window_s=5, tail="full")
    tail = {0: WorkerStatus(phase="tail", warm_slots=2), 1: WorkerStatus(phase="window", warm_slots=2)}
    prog = LoadGenerator._progress(sum_status(tail, [0, 1]), tail, [0, 1], p, cont=False)
    assert prog.warm and not prog.tail_seen  # 4 warm slots of 4; worker 1 has not heard the tail yet
    held = {0: WorkerStatus(phase="tail", warm_slots=4, excess=1)}
    assert not LoadGenerator._progress(sum_status(held, [0]), held, [0], p, cont=True).warm  # an excess slot
