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

from kvtui.explore.evaluate import no_server_verdict
from kvtui.explore.search import Search, make_search
from kvtui.explore.search_seeded import rehint
from kvtui.scenario.schema import Ramp

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
        from kvtui.explore.search_seeded import SeededSearch

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
