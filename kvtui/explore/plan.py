"""How many steps a mode's search still plans ("step n of about m" on screen).

Not a rule of thumb beside the search: the mode's own strategy (`make_search`, the same call the
run makes) is fed the verdicts of the steps so far, in their order, and then played out against
an assumed knee until it says it is done. The assumption is the only estimate in it, hence
"about": between a pass and a fail, the knee sits halfway; with no fail yet, where the search
aims (the KV-bound guess it started from), or just above the highest pass; with no pass yet,
one halving down. Confirmation repeats, bisection and ramp.max come from the strategy itself.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Iterable

from kvtui.core.evaluate import no_server_verdict
from kvtui.core.search import Search, make_search
from kvtui.core.search_seeded import rehint
from kvtui.io.scenario.schema import Ramp

MAX_PLANNED = 64  # a search never needs this many; a bound against a strategy that would not stop


def ramp_from(ramp: Ramp | dict[str, Any] | None) -> Ramp:
    """The scenario's ramp, from the snapshot's dict (unknown keys ignored, missing ones defaulted)."""
    if isinstance(ramp, Ramp):
        return ramp
    known = {f.name for f in fields(Ramp)}
    return Ramp(**{k: v for k, v in (ramp or {}).items() if k in known})


def replayed(ramp: Ramp, steps: Iterable[dict[str, Any]], closed: bool = True, guess: float | None = None,
             seed: float | None = None) -> Search:
    """The mode's search, told the verdicts of its finished steps (as a resumed run does).
    seed: the predicted knee a seeded search started from (modes[].search.seed)."""
    if seed is not None:
        from kvtui.core.search_seeded import SeededSearch

        search: Search = SeededSearch(ramp, closed, knee=seed)
    else:
        search = make_search(ramp, closed, guess=guess)
    for st in steps:
        if st.get("why", "search") not in ("search", "confirm") or st.get("load") is None or no_server_verdict(st):
            continue  # hand-driven or held steps, and loads the client failed, are not verdicts
        rehint(search, st)
        search.next()  # the search moves on when asked, then hears the verdict
        search.record(float(st["load"]), st.get("passed"))
    return search


def assumed_knee(search: Search, guess: float | None) -> float:
    s = search.s
    if s.best is not None and s.fail is not None:
        return (s.best + s.fail) / 2
    if s.fail is None:
        best = s.best if s.best is not None else 0.0
        return guess if guess and guess > best else best
    return s.fail / 2


def steps_left(ramp: Ramp | dict[str, Any] | None, steps: list[dict[str, Any]], closed: bool = True,
               guess: float | None = None, seed: float | None = None) -> int:
    """Steps the search still plans after `steps` (the one in flight included)."""
    search = replayed(ramp_from(ramp), steps, closed, guess, seed)
    knee = assumed_knee(search, seed if seed is not None else guess)
    n = 0
    while n < MAX_PLANNED:
        load = search.next()
        if load is None:
            break
        search.record(load, load <= knee)
        n += 1
    return n


def step_wall_s(ramp: Ramp | dict[str, Any] | None, steps: Iterable[dict[str, Any]], time_scale: float = 1.0) -> float:
    """A step's wall seconds: the mean of the mode's finished steps, or before the first one ends,
    the protocol's own length (warm-up + window, modelled seconds × the simulator's slow motion)."""
    durs = []
    for st in steps:
        a, b = st.get("t_rel_start"), st.get("t_rel_end")
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > a:
            durs.append(float(b - a))
        elif isinstance(st.get("duration_s"), (int, float)):
            durs.append(float(st["duration_s"]))
    if durs:
        return sum(durs) / len(durs)
    r = ramp_from(ramp)
    return (float(r.warmup_s) + float(r.window_s)) * max(1.0, float(time_scale or 1.0))


def mode_eta(ramp: Ramp | dict[str, Any] | None, steps: list[dict[str, Any]], closed: bool = True,
             guess: float | None = None, seed: float | None = None, time_scale: float = 1.0,
             elapsed_s: float = 0.0) -> tuple[int, int, float]:
    """(this step's number, about how many the mode takes, seconds left in the mode) for a live
    mode about to run or running its next step: the plan (steps_left) × a step's wall time."""
    left = max(1, steps_left(ramp, steps, closed, guess=guess, seed=seed))
    per = step_wall_s(ramp, steps, time_scale)
    done = len(steps)
    return done + 1, done + left, max(0.0, left * per - min(elapsed_s, per))


def fmt_eta(s: float | None) -> str:
    if s is None:
        return "—"
    s = max(0.0, s)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"
