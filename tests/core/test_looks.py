"""When the sequential test looks (kvtui.core.looks), on plain numbers: the schedule the live look
and the simulator's continuous client share, and the words a decided look records."""

from __future__ import annotations

from kvtui.core.looks import LookSchedule, decided_why, look_every


def test_a_look_every_tenth_of_the_window_half_a_second_at_least():
    assert look_every(20.0) == 2.0
    assert look_every(3.0) == 0.5


def test_looks_are_due_once_per_interval_from_the_windows_start():
    looks = LookSchedule(2.0, start=100.0)
    assert not looks.due(101.9)
    assert looks.due(102.3)  # the first look; the next is 2 s after this one
    assert not looks.due(104.2)
    assert looks.due(104.3)
    assert [looks.due(t) for t in (104.4, 106.3, 106.4)] == [False, True, False]


def test_a_decided_look_says_which_verdict_and_on_how_many():
    assert decided_why(True) == "the sequential test decided PASS"
    assert decided_why(False, 48) == "the sequential test decided FAIL on a cohort of 48 requests"
