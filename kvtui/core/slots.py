"""Which slots a closed loop starts and retires, for every transport: the live workers
(kvtui.runtime.load.worker) and the simulator's clients (kvtui.simulator.engine.continuous, .fast).

- New slots' first sends are spread over the step's start: the k-th of n at `spread_s × k / n`
  (`stagger_at`); the spread itself is the ramp's (kvtui.core.protocol.ramp_for) or, where none
  is known, each transport's short default.
- A step down retires the slots nearest their end first, so the load is down to the new count
  soonest (`retire_order`): an idle slot first (nothing to wait for), then by output tokens left;
  a request the server has not admitted yet (the simulator knows; over HTTP every request in flight
  counts as admitted) is the furthest from its end.
"""

from __future__ import annotations

from typing import Iterable


def stagger_at(spread_s: float, k: int, n: int) -> float:
    """Seconds after the step's start at which the k-th of n new slots sends its first request."""
    return spread_s * k / max(1, n)


def tokens_left(expected_output_tokens: int | None, itl_count: int, has_first_token: bool) -> int:
    """Output tokens a request in flight still has to stream (its first token and its gaps so far)."""
    done = (itl_count + 1) if has_first_token else 0
    return (expected_output_tokens or 0) - done


def retire_order(slots: Iterable[tuple[int, int | None, bool]]) -> list[int]:
    """The slots, first to retire first. Each is (slot, output tokens left or None when idle, admitted);
    ties keep the order given."""
    def key(s: tuple[int, int | None, bool]) -> tuple[int, int]:
        _slot, left, admitted = s
        if left is None:
            return (0, 0)
        return (1 if admitted else 2, left)

    return [s[0] for s in sorted(slots, key=key)]
