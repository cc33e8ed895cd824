"""When the sequential test looks at a step's window, and what a decided look says.

Every `look_every(window_s)` (a tenth of the window, 0.5 s at least) from the window's start, a
transport looks at the window's requests cohort by cohort (those sent before the earliest one still
unfinished, so no look favours the quick ones) and asks kvtui.core.sequential whether the verdict is
decided beyond doubt. The live look (kvtui.explore.live_look) keeps the schedule on the window's
elapsed wall seconds, the simulator's continuous client (kvtui.simulator.engine.continuous) on its
virtual time; both through `LookSchedule`, and both record the same words (`decided_why`).
"""

from __future__ import annotations


def look_every(window_s: float) -> float:
    """Seconds between looks for a window of `window_s`."""
    return max(0.5, window_s / 10)


class LookSchedule:
    """Looks every `every_s` from `start`; `due(t)` is True once per interval (and moves it on)."""

    def __init__(self, every_s: float, start: float = 0.0):
        self.every_s = every_s
        self.next = start + every_s

    def due(self, t: float) -> bool:
        if t < self.next:
            return False
        self.next = t + self.every_s
        return True


def decided_why(verdict: bool, cohort: int | None = None) -> str:
    """A step's early_stop.why for a look that decided (`cohort`: the requests it decided on, where said)."""
    why = f"the sequential test decided {'PASS' if verdict else 'FAIL'}"
    return why if cohort is None else f"{why} on a cohort of {cohort} requests"
