"""The sequential test's looks at a live step's window (docs/PROTOCOL.md, item 4), as the offline
simulator takes them (kvtui.simulator.engine.continuous): every `window_s / 10` from the window's start,
on the window's requests **cohort by cohort**: only those sent before the earliest one still
streaming count, so no look favours the quick ones. PASS or FAIL beyond doubt (the union bound
over 16 looks with protocol.LOOKS_SHARE of 1 − confidence, and the 10 % margin of
kvtui.core.sequential) closes the window there; the step then holds its tail as after a window
that closed by time, so its figures are the same estimator's over the requests that started in the
shortened window, and the records file says so (each record keeps the phase it was sent in).

The load generator asks (`run_step(window_look=…)`) with the time before which every window
request sent has finished and reached the parent (kvtui.runtime.load.generator.cohort_bound); the records
come through `add`, as they stream in.
"""

from __future__ import annotations

from typing import Iterable

from kvtui.core.looks import LookSchedule, decided_why, look_every
from kvtui.core.record import Record
from kvtui.core.samples import slo_samples
from kvtui.core.sequential import SequentialTest


class LiveLook:
    """One live step's looks. `time_scale`: wall seconds per modelled second (a simulator in slow
    motion); the samples and the look times are in modelled seconds, as the SLO is."""

    def __init__(self, test: SequentialTest, step: int, need: int, window_s: float, time_scale: float = 1.0):
        self.test = test
        self.step = step
        self.need = need
        self.look_s = look_every(window_s) * time_scale  # wall seconds between looks (kvtui.core.looks)
        self.ts = time_scale or 1.0
        self.window: list[Record] = []  # this step's window requests that have finished, as they came
        self._looks = LookSchedule(self.look_s)  # on the window's elapsed seconds

    def add(self, recs: Iterable[Record]) -> None:
        self.window.extend(r for r in recs if r.step == self.step and r.phase == "window")

    def __call__(self, elapsed_s: float, bound: float) -> str | None:
        """Why the verdict is decided on the cohort sent before `bound` (wall clock), or None."""
        if not self._looks.due(elapsed_s):
            return None
        # A closed slot's record carries its send time (t_intended = t_sent once it ended); every
        # request sent before `bound` has finished, so this is a prefix of the window by send time.
        cohort = [r for r in self.window if r.t_intended < bound]
        if len(cohort) < self.need:
            return None
        xs = {k: [v / self.ts for v in vals] for k, vals in slo_samples(cohort).items()}
        verdict = self.test.look(elapsed_s / self.ts, xs)
        if verdict is None:
            return None
        return decided_why(verdict, len(cohort))
