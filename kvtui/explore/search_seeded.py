"""The search seeded by the prediction (kvtui.explore.prediction): start where the knee should be.

It first measures the predicted knee k and the next load above it, k + resolution (only when k
passed: above a failing load the next fails too). When k passes and k + resolution fails, as
predicted, the bracket is already as narrow as the resolution allows: both are repeated (the
confirmation, as in every search) and it stops — four steps. When not, it gallops from there
(steps of a tenth of the predicted knee, doubling, never below the resolution's doubling:
a prediction's error is relative) while passes (or fails) go on, then bisects the bracket, then
confirms: a prediction off by a share costs about log2 of that share's steps, never a walk
from ramp.start.

`hint(load)` takes a new estimate of the knee (the prediction refitted on the steps measured
so far): the next probe inside the open range goes there first. Any probe strictly inside the
range keeps the answer exact, so a wrong hint costs a step, never the answer.

The guarantees of kvtui.explore.search hold: on a monotone curve the answer is the linear
ramp's (the highest passing load whose next load at the resolution fails), the confirmation
repeats the last pass and the first fail, and a repeat that flips moves the bracket and
counts (more than one flip: noisy).
"""

from __future__ import annotations

from kvtui.explore.search import _Base, resolution
from kvtui.scenario.schema import Ramp

GALLOP_FIRST = 0.1  # the first gallop step, as a share of the predicted knee


class SeededSearch(_Base):
    name = "seeded"

    def __init__(self, ramp: Ramp, closed: bool = True, confirm: bool | None = None, knee: float | None = None):
        super().__init__(ramp, closed, confirm)
        k = self.lo if knee is None or knee <= 0 else min(self.hi, max(self.lo, self._q(knee)))
        self.seed = k
        r = self._res(k)
        up = min(self.hi, self._q(k + r))
        self.queue: list[float] = [k] + ([up] if up > k else [])
        self.gallop = 0  # the current gallop's exponent
        self.target: float | None = None
        self.phase = "seed"

    def _res(self, x: float) -> float:
        r = resolution(self.ramp, x, self.closed)
        return max(1.0, float(round(r))) if self.closed else r

    def _gallop_step(self, x: float) -> float:
        # A prediction's error is relative (a GPU 20 % slower moves the knee by about that much):
        # the first step is a tenth of the seed, doubling; never below the resolution's doubling.
        return max(self._res(x) * (2 ** self.gallop), self.seed * GALLOP_FIRST * (2 ** (self.gallop - 1)))

    def hint(self, knee: float | None) -> None:
        """A refitted estimate of the knee: the next probe inside the open range goes there."""
        self.target = None if knee is None else self._q(knee)

    def _advance(self, load: float, ok: bool) -> None:
        if self.queue:
            if not ok and load == self.seed:
                self.queue.clear()  # the predicted knee fails: the load above it would too (monotone)
            else:
                return  # the seed pair is measured before anything is decided
        self.phase = self._phase_from_bracket()

    def _use_target(self, lo: float, hi: float) -> float | None:
        t, self.target = self.target, None
        if t is not None and lo < t < hi:
            return t
        return None

    def _next(self) -> float | None:
        s = self.s
        if self.queue:
            return self.queue.pop(0)
        if self.phase == "seed":
            self._advance(0.0, True)  # the seed pair is in: decide the phase from it
        if self.phase == "grow":
            top = s.best if s.best is not None else self.lo
            if top >= self.hi:
                s.reached_max = True
                s.done = True
                return None
            t = self._use_target(top, self.hi + 1)
            if t is not None:
                return min(self.hi, t)
            self.gallop += 1
            step = self._gallop_step(top)
            return min(self.hi, self._q(max(top + step, top + 1 if self.closed else top + step)))
        if self.phase == "shrink":
            bottom = s.fail if s.fail is not None else self.hi
            if bottom <= self.lo:
                s.done = True  # even ramp.start fails
                return None
            t = self._use_target(self.lo - 1, bottom)
            if t is not None:
                return max(self.lo, t)
            self.gallop += 1
            step = self._gallop_step(bottom)
            return max(self.lo, self._q(bottom - step))
        self.gallop = 0
        if s.best is not None and s.fail is not None and s.fail - s.best > resolution(self.ramp, s.best, self.closed):
            t = self._use_target(s.best, s.fail)
            if t is not None:
                return t
        mid = self._bracket_next()
        if mid is not None:
            return mid
        return self._start_confirm()


def seeded_by_default(engine: str, fast: bool) -> bool:
    """Where `search = "auto"` (the default) means the seeded search, when a prediction exists:
    a real server (vllm, external), whose steps cost GPU minutes, and the offline demo (`--fast`).
    The live simulator keeps the fast search (its steps cost seconds; CI runs many of them)."""
    return fast or engine in ("vllm", "external")


def choose_search(ramp: Ramp, closed: bool, guess: float | None, prediction: dict | None, engine: str,
                  fast: bool) -> _Base:
    """The search a mode runs: `ramp.search` as written; "auto" = seeded where a prediction covers
    the mode (and `seeded_by_default`), else fast from the KV-bound guess."""
    from kvtui.explore.search import FastSearch, LinearSearch

    covered = bool(prediction and prediction.get("covered"))
    want = ramp.search
    if want == "linear":
        return LinearSearch(ramp, closed)
    if covered and (want == "seeded" or (want == "auto" and seeded_by_default(engine, fast))):
        assert prediction is not None
        return SeededSearch(ramp, closed, knee=prediction.get("knee") or ramp.start)
    return FastSearch(ramp, closed, guess=guess)
