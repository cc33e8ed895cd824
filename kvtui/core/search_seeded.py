"""The search seeded by the prediction (kvtui.explore.prediction): start where the knee should be,
and let the prediction, refitted after each judged step, choose every next probe.

The prediction says "the knee is k": k passes, k + resolution fails. So the probe it chooses is
the one of that pair not yet measured, bracketed by what was measured (never outside
[highest pass, lowest fail]):
  - k strictly inside the open bracket: measure k;
  - k at or below the highest pass (the prediction was too low): the load just above that pass,
    highest pass + resolution (with the knee right there, it fails and the bracket is closed);
  - k at or above the lowest fail (too high): the load just below it, lowest fail − resolution.
When the prediction is right this is four steps: k, k + resolution, and the confirmation's two
repeats. When it is wrong, `hint(knee)` gives the refit's new estimate (kvtui.explore.refit, after
every judged step: kvtui.explore.predict_loop.after_step) and the next probe follows it, instead
of a gallop past it and a bisection back.

A prediction that keeps missing must not cost more than the fallback would: after MISSES_TRUSTED
verdicts in a row against the prediction that chose them, the fallback chooses (a gallop of steps
relative to the seed while every probe passes or fails, a bisection of the bracket once there is
one) until a verdict agrees with the prediction again. A search guided by a wrong prediction
thus stays logarithmic in the range, and any probe strictly inside the bracket keeps the answer
exact: a wrong prediction costs steps, never the answer.

The guarantees of kvtui.core.search hold: on a monotone curve the answer is the linear
ramp's (the highest passing load whose next load at the resolution fails), the confirmation
repeats the last pass and the first fail, and a repeat that flips moves the bracket and
counts (more than one flip: noisy).
"""

from __future__ import annotations

from typing import Any

from kvtui.core.search import _Base, resolution
from kvtui.io.scenario.schema import Ramp

GALLOP_FIRST = 0.1  # the first gallop step, as a share of the predicted knee
MISSES_TRUSTED = 2  # verdicts in a row against the prediction before the fallback chooses


class SeededSearch(_Base):
    name = "seeded"

    def __init__(self, ramp: Ramp, closed: bool = True, confirm: bool | None = None, knee: float | None = None):
        super().__init__(ramp, closed, confirm)
        k = self.lo if knee is None or knee <= 0 else min(self.hi, max(self.lo, self._q(knee)))
        self.seed = k
        self.knee = k  # the prediction now: the seed, then each refit's knee (hint)
        self.misses = 0  # verdicts in a row against the prediction that chose the probe
        self.chosen_by = "prediction"  # who chose the probe in flight: "prediction" or "fallback"
        self.gallop = 0  # the current gallop's exponent
        self.phase = "seed"

    def _res(self, x: float) -> float:
        r = resolution(self.ramp, x, self.closed)
        return max(1.0, float(round(r))) if self.closed else r

    def _gallop_step(self, x: float) -> float:
        # A prediction's error is relative (a GPU 20 % slower moves the knee by about that much):
        # the first step is a tenth of the seed, doubling; never below the resolution's doubling.
        return max(self._res(x) * (2 ** self.gallop), self.seed * GALLOP_FIRST * (2 ** (self.gallop - 1)))

    def hint(self, knee: float | None) -> None:
        """The refitted prediction's knee: it chooses the next probe (None: the prediction stands)."""
        if knee is not None:
            self.knee = self._q(knee)

    @property
    def trusted(self) -> bool:
        return self.misses < MISSES_TRUSTED

    def _advance(self, load: float, ok: bool) -> None:
        agrees = ok == (load <= self.knee)  # the verdict the prediction that chose this probe gave
        if not agrees:
            self.misses += 1
        elif self.chosen_by == "prediction":
            self.misses = 0
        else:  # the fallback's probe agreed: one more miss and the fallback chooses again
            self.misses = min(self.misses, MISSES_TRUSTED - 1)
        self.phase = self._phase_from_bracket()

    def _aim(self, lo: float | None, hi: float | None) -> float:
        """The probe the prediction chooses inside the open bracket (lo, hi) (None: unbounded)."""
        k = self.knee
        if lo is not None and k <= lo:
            return self._q(lo + self._res(lo))
        if hi is not None and k >= hi:
            return self._q(hi - self._res(hi))
        return k

    def _next(self) -> float | None:
        s = self.s
        if not s.history:
            self.chosen_by = "prediction"
            return self.seed
        lo, hi = s.best, s.fail
        t = self._aim(lo, hi)
        self.chosen_by = "prediction" if self.trusted else "fallback"
        if self.phase == "grow":
            top = lo if lo is not None else self.lo
            if top >= self.hi:
                s.reached_max = True
                s.done = True
                return None
            if not self.trusted:
                self.gallop += 1
                t = max(t, self._q(top + self._gallop_step(top)))
            return min(self.hi, max(t, top + 1 if self.closed else self._q(top + self._res(top))))
        if self.phase == "shrink":
            bottom = hi if hi is not None else self.hi
            if bottom <= self.lo:
                s.done = True  # even ramp.start fails
                return None
            if not self.trusted:
                self.gallop += 1
                t = min(t, self._q(bottom - self._gallop_step(bottom)))
            return max(self.lo, min(t, bottom - 1 if self.closed else self._q(bottom - self._res(bottom))))
        self.gallop = 0
        mid = self._bracket_next()  # None: the bracket is as narrow as the resolution allows
        if mid is None:
            return self._start_confirm()
        assert lo is not None and hi is not None
        if self.trusted and lo < t < hi:
            return t
        self.chosen_by = "fallback"
        return mid


def rehint(search: Any, step: dict[str, Any]) -> None:
    """Replaying a finished step (a resumed run, the progress plan): tell a seeded search the knee
    the prediction gave when that step's load was chosen (kept in step["predicted"]["knee"]), so
    the replayed search asks for the loads the run measured."""
    pred = step.get("predicted")
    if isinstance(search, SeededSearch) and isinstance(pred, dict) and "knee" in pred:
        knee = pred["knee"]  # None: the prediction said no load passes
        search.hint(float(knee) if isinstance(knee, (int, float)) else 0.0)


def choose_search(ramp: Ramp, closed: bool, guess: float | None, prediction: dict | None) -> _Base:
    """The search a mode runs: `ramp.search` as written; "auto" = seeded where a prediction covers
    the mode, on every engine (the live simulator, the TUI's demo, and `--fast` on the same scenario
    start at the same load, the predicted knee), else fast from the KV-bound guess."""
    from kvtui.core.search import FastSearch, LinearSearch

    covered = bool(prediction and prediction.get("covered"))
    want = ramp.search
    if want == "linear":
        return LinearSearch(ramp, closed)
    if covered and (want == "seeded" or want == "auto"):
        assert prediction is not None
        return SeededSearch(ramp, closed, knee=prediction.get("knee") or ramp.start)
    return FastSearch(ramp, closed, guess=guess)
