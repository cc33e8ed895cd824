"""Find the highest load (concurrency or req/s) that meets the SLO.

Two strategies share one interface (`next()` → the next load or None, `record(load, passed)`):

- `LinearSearch`: the ramp the user wrote (`double`, `xN`, `+N`, or `a,b,c`), until the
  first failing step.
- `FastSearch`: start at a guess (the KV-bound concurrency the server reported, when it
  did), grow ×2 until the first failure (or shrink ÷2 until the first pass), then bisect
  between the last pass and the first fail down to the resolution.

Both then confirm: repeat the last pass and the first fail. A repeat that flips moves
the bracket and the search goes on; `flips` counts them and more than one is called noise.
The resolution is one rule for every mode, so the modes compare fairly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from kvtui.io.scenario.schema import Ramp

MAX_CONFIRM_ROUNDS = 3
# ramp.confirm_when = "doubt": a knee load that has already passed and failed is not repeated again.
# Its verdict sits on the limit itself (the H200 at 8k / 512, ITL p95 ≤ 100 ms: fp8-w+kv's 28 read
# 104.8, 99.6, 103.8 and 98.1 ms, one token gap in twenty either side of 5 % stalled); another repeat
# is another coin, and the knee's interval (kvtui.core.knee_interval) pools them all.
FLIPPED = "its verdicts disagree (passed and failed): a load on the limit, the knee's interval says how sure"


def ramp_levels(ramp: Ramp, closed: bool = True) -> list[float]:
    """The loads a linear ramp visits, from ramp.start to ramp.max (max included)."""
    rule = ramp.step.strip()
    lo, hi = float(ramp.start), float(ramp.max)
    if "," in rule or rule.replace(".", "", 1).isdigit():
        vals = sorted({float(x) for x in rule.split(",") if x.strip()})
        return [v for v in vals if lo <= v <= hi] or [lo]
    out = [lo]
    while out[-1] < hi:
        cur = out[-1]
        if rule == "double":
            nxt = cur * 2
        elif rule.startswith("x"):
            nxt = cur * float(rule[1:])
        else:
            nxt = cur + float(rule[1:])
        if closed:
            nxt = max(math.floor(nxt), int(cur) + 1)
        if nxt >= hi:
            out.append(hi)
            break
        out.append(nxt)
    return out


def resolution(ramp: Ramp, passed: float, closed: bool) -> float:
    """How close the last pass and the first fail must be for the search to stop."""
    if ramp.resolution > 0:
        return ramp.resolution
    if closed:
        return max(1.0, math.floor(passed / 16))
    return max(0.05, passed / 16)


@dataclass
class SearchResult:
    best: float | None = None  # highest passing load whose next step fails
    first_fail: float | None = None
    confirmed: bool = False
    flips: int = 0
    reached_max: bool = False  # every load up to ramp.max passed
    steps: int = 0
    # ramp.confirm_when = "doubt": the knee loads the confirmation did not repeat, and why each
    # verdict was settled without it (kvtui.core.settled)
    settled: dict[float, str] = field(default_factory=dict)

    @property
    def noisy(self) -> bool:
        return self.flips > 1 or FLIPPED in self.settled.values()

    def describe(self) -> str:
        if self.best is None:
            return "no load met the SLO" + (f" (first fail {self.first_fail:g})" if self.first_fail is not None else "")
        s = f"{self.best:g}"
        if self.reached_max:  # a lower bound: no load failed above it
            return f"≥ {s} (every load up to {s} passed: the knee lies higher)"
        if self.first_fail is not None:
            s += f" (next {self.first_fail:g} fails)"
        if self.confirmed:
            knee = [x for x in (self.best, self.first_fail) if x is not None]
            flipped = [x for x in knee if self.settled.get(x) == FLIPPED]
            unrepeated = [x for x in knee if x in self.settled and x not in flipped]
            if not unrepeated:
                s += ", confirmed"
            elif len(unrepeated) == len(knee) - len(flipped):
                s += ", settled without a repeat"
            else:
                s += f", confirmed ({', '.join(f'{x:g}' for x in unrepeated)} settled without a repeat)"
            if flipped:
                s += f", {', '.join(f'{x:g}' for x in flipped)} passed and failed (not repeated again)"
        if self.flips:
            s += f", pass/fail flipped {self.flips}×" + (" — noisy" if self.noisy else "")
        return s


@dataclass
class _State:
    history: list[tuple[float, bool]] = field(default_factory=list)
    best: float | None = None
    fail: float | None = None
    confirm_queue: list[float] = field(default_factory=list)
    confirm_rounds: int = 0
    flips: int = 0
    confirming: bool = False
    done: bool = False
    reached_max: bool = False
    settled: dict[float, str] = field(default_factory=dict)  # load → why its latest verdict needs no repeat
    skipped: dict[float, str] = field(default_factory=dict)  # the knee loads the confirmation did not repeat


class _Base:
    name = "base"

    def __init__(self, ramp: Ramp, closed: bool = True, confirm: bool | None = None):
        self.ramp = ramp
        self.closed = closed
        self.confirm = ramp.confirm if confirm is None else confirm
        self.only_doubt = getattr(ramp, "confirm_when", "always") == "doubt"
        self.lo = float(ramp.start)
        self.hi = float(ramp.max)
        self.s = _State()
        self.phase = "ramp"

    def _q(self, x: float) -> float:
        return float(round(x)) if self.closed else round(x, 3)

    def record(self, load: float, passed: bool | None, settled: str | None = None) -> None:
        """One judged step. `settled`: why its verdict needs no repeat (kvtui.core.settled), or None."""
        ok = bool(passed)  # undecided (too few samples) counts as a fail: the answer must be earned
        s = self.s
        s.history.append((load, ok))
        if settled and passed is not None:
            s.settled[load] = settled
        else:
            s.settled.pop(load, None)
        if s.confirming:
            self._record_confirm(load, ok)
            return
        if ok:
            if s.best is None or load > s.best:
                s.best = load
            if s.fail is not None and s.fail <= load:
                s.fail = None  # a pass above an earlier fail: noise, look above again
                s.flips += 1
        else:
            if s.fail is None or load < s.fail:
                s.fail = load
        self._advance(load, ok)

    def settle(self, load: float, why: str) -> None:
        """A pass settled after it was recorded, by what the loads above it measured since
        (kvtui.core.settled.resettled): only where it is still the load's latest verdict."""
        s = self.s
        verdicts = [ok for x, ok in s.history if x == load]
        if verdicts and verdicts[-1]:
            s.settled[load] = why
            if self.only_doubt and s.confirming and load in s.confirm_queue:
                # queued for its repeat before the repeat of a load above it made up the samples
                s.confirm_queue.remove(load)
                s.skipped[load] = why

    def _record_confirm(self, load: float, ok: bool) -> None:
        s = self.s
        if load == s.best and not ok:
            s.flips += 1
            s.fail = load
            below = [x for x, good in s.history if good and x < load]
            s.best = max(below) if below else None
            s.confirm_queue.clear()
            s.confirming = False
            self.phase = "bisect" if s.best is not None else "shrink"
        elif load == s.fail and ok:
            s.flips += 1
            s.best = load
            above = [x for x, good in s.history if not good and x > load]
            s.fail = min(above) if above else None
            s.confirm_queue.clear()
            s.confirming = False
            self.phase = "bisect" if s.fail is not None else "grow"
        if s.confirming and not s.confirm_queue:
            s.confirming = False
            s.done = True

    def _advance(self, load: float, ok: bool) -> None:
        raise NotImplementedError

    def _phase_from_bracket(self) -> str:
        """Bisect once the knee is bracketed; until then grow (no failure yet) or shrink."""
        s = self.s
        if s.best is not None and s.fail is not None:
            return "bisect"
        return "grow" if s.fail is None else "shrink"

    def _bracket_next(self) -> float | None:
        s = self.s
        if s.best is None or s.fail is None:
            return None
        if s.fail - s.best <= resolution(self.ramp, s.best, self.closed):
            return None
        mid = self._q((s.best + s.fail) / 2)
        if mid <= s.best or mid >= s.fail:
            return None
        return mid

    def _start_confirm(self) -> float | None:
        s = self.s
        if not self.confirm or s.confirm_rounds >= MAX_CONFIRM_ROUNDS or (s.best is None and s.fail is None):
            s.done = True
            return None
        s.confirm_rounds += 1
        s.confirming = True
        s.confirm_queue = [x for x in (s.best, s.fail) if x is not None]
        if len(s.confirm_queue) == 2 and s.history and s.history[-1][0] == s.confirm_queue[0]:
            # The last pass was the search's last step: repeat the first fail first. A repeat right
            # after the step it repeats must start from an idle server (kvtui.core.protocol
            # drain_reason), a ramp from zero; after a step at another load it may continue.
            s.confirm_queue.reverse()
        if self.only_doubt:
            s.skipped = {x: s.settled[x] if x in s.settled else FLIPPED for x in s.confirm_queue
                         if x in s.settled or {ok for load, ok in s.history if load == x} == {True, False}}
            s.confirm_queue = [x for x in s.confirm_queue if x not in s.skipped]
            if not s.confirm_queue:
                s.confirming = False
                s.done = True
                return None
        return s.confirm_queue.pop(0)

    def next(self) -> float | None:
        s = self.s
        if s.done:
            return None
        if s.confirming:
            if s.confirm_queue:
                self.phase = "confirm"
                return s.confirm_queue.pop(0)
            s.confirming = False
            s.done = True
            return None
        return self._next()

    def _next(self) -> float | None:
        raise NotImplementedError

    def result(self) -> SearchResult:
        s = self.s
        return SearchResult(
            best=s.best,
            first_fail=s.fail,
            confirmed=self.confirm and s.confirm_rounds > 0 and s.done,
            flips=s.flips,
            reached_max=s.reached_max,
            steps=len(s.history),
            settled=dict(s.skipped),
        )


class LinearSearch(_Base):
    name = "linear"

    def __init__(self, ramp: Ramp, closed: bool = True, confirm: bool | None = None, levels: list[float] | None = None):
        super().__init__(ramp, closed, confirm)
        self.levels = levels or ramp_levels(ramp, closed)
        self.i = 0
        self.stopped = False

    def _advance(self, load: float, ok: bool) -> None:
        if not ok:
            self.stopped = True

    def _next(self) -> float | None:
        s = self.s
        if not self.stopped and s.fail is None and self.i < len(self.levels):
            x = self.levels[self.i]
            self.i += 1
            return x
        # Every load passed: at ramp.max, or where the step list ends below it ("16,…,256" under a
        # max of 512). Either way no failure bounds the knee, and the answer must say the limit is higher.
        if s.fail is None and s.best is not None and (s.best >= self.hi or self.i >= len(self.levels)):
            s.reached_max = True
            s.done = True
            return None
        return self._start_confirm()


class FastSearch(_Base):
    name = "fast"

    def __init__(self, ramp: Ramp, closed: bool = True, confirm: bool | None = None, guess: float | None = None):
        super().__init__(ramp, closed, confirm)
        g = self.lo if not guess or guess <= 0 else min(self.hi, max(self.lo, self._q(guess)))
        self.first = g
        self.started = False
        self.phase = "guess"

    def _advance(self, load: float, ok: bool) -> None:
        self.phase = self._phase_from_bracket()

    def _next(self) -> float | None:
        s = self.s
        if not self.started:
            self.started = True
            return self.first
        if self.phase == "grow":
            top = s.best if s.best is not None else self.lo
            if top >= self.hi:
                s.reached_max = True
                s.done = True
                return None
            # Before any failure: ×2. After a confirmation flip (the knee was bracketed once,
            # it lies close): +25 %, so noise at the knee does not cost a far step.
            grow = 2.0 if all(ok for _, ok in s.history) else 1.25
            return min(self.hi, self._q(max(top * grow, top + 1)))
        if self.phase == "shrink":
            bottom = s.fail if s.fail is not None else self.hi
            if bottom <= self.lo:
                s.done = True  # even ramp.start fails
                return None
            return max(self.lo, self._q(min(bottom / 2, bottom - 1)) if self.closed else bottom / 2)
        mid = self._bracket_next()
        if mid is not None:
            return mid
        return self._start_confirm()


def make_search(ramp: Ramp, closed: bool, guess: float | None = None) -> _Base:
    """The search of `ramp.search` without a prediction (the seeded one needs one: search_seeded)."""
    if ramp.search == "linear":
        return LinearSearch(ramp, closed)
    return FastSearch(ramp, closed, guess=guess)


Search = _Base  # the type every strategy is (make_search returns one)


def best_load(steps: "Iterable[dict[str, Any]]") -> float | None:
    """Highest load that passed below the lowest load that failed, by the latest verdict per load.

    The same rule as the search (`kvtui.core.search`): a repeat overrides the earlier verdict,
    an undecided step (too few samples) counts as a fail, hand-driven steps (hold, manual) and
    steps cut short by a stop do not count.
    """
    from kvtui.io.snapshot.schema import Step

    latest: dict[float, bool] = {}
    for s in steps:
        if s.get("why", "search") not in ("search", "confirm") or not Step.view(s).ran_to_its_end:
            continue
        load = s.get("load")
        if load is None:
            continue
        latest[float(load)] = bool(s.get("passed"))
    if not latest:
        return None
    fails = [x for x, ok in latest.items() if not ok]
    lowest_fail = min(fails) if fails else math.inf
    passes = [x for x, ok in latest.items() if ok and x < lowest_fail]
    return max(passes) if passes else None
