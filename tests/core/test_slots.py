"""Which slots a closed loop starts and retires (kvtui.core.slots), on plain numbers: the rules the
live workers and the simulator's clients share."""

from __future__ import annotations

from kvtui.core.slots import retire_order, stagger_at, tokens_left


def test_new_slots_are_spread_evenly_over_the_stagger():
    assert [stagger_at(2.0, k, 4) for k in range(4)] == [0.0, 0.5, 1.0, 1.5]
    assert stagger_at(2.0, 0, 0) == 0.0  # no slot: no division by zero
    assert stagger_at(0.0, 3, 4) == 0.0


def test_tokens_left_counts_the_first_token_and_the_gaps():
    assert tokens_left(100, 0, False) == 100  # nothing streamed yet
    assert tokens_left(100, 0, True) == 99  # the first token
    assert tokens_left(100, 9, True) == 90  # ten tokens in
    assert tokens_left(None, 4, True) == -5  # no expected length: counted as nearest its end


def test_a_step_down_retires_idle_slots_then_the_requests_nearest_their_end():
    slots = [(0, 50, True), (1, None, True), (2, 5, True), (3, 5, False), (4, 20, True), (5, None, True)]
    order = retire_order(slots)
    assert order == [1, 5, 2, 4, 0, 3]  # idle (in order), admitted by tokens left, then not admitted
    # A step from 6 slots down to 2 keeps the two furthest from their end.
    assert order[len(slots) - 2:] == [0, 3]


def test_ties_keep_the_order_they_were_given():
    assert retire_order([(7, 3, True), (2, 3, True), (9, 3, True)]) == [7, 2, 9]
    assert retire_order([]) == []
