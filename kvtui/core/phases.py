"""A step's phases, decided once for every transport: warm-up, window, held tail, end.

The live load generator (kvtui.runtime.load.generator) and the simulator's continuous client
(kvtui.simulator.engine.continuous) each count their requests in their own way (worker statuses over a
pipe; records in virtual time) and hand the counts here as a `Progress`; `StepPhases.advance` says
which phase change, if any, that brings, and keeps the step's window times. docs/PROTOCOL.md
describes the rules; this module is where they are written.

- warm-up → window: `warmup_s` after the new slots' stagger (`warm_from_s`), once the transport says
  its slots are warm (every slot finished a request at the new load, the excess slots of a step down
  retired), or `warm_cap_s` later whatever they say;
- window → tail: by time, `window_s`, once `min_window_requests` were sent in it (the SLO's
  percentiles need them), but never past `max_window_factor` × `window_s`; or by count, after
  `window_requests` sends; or at once where a transport's look decided the verdict (`decide_window`);
- tail → end: every window request the tail rule waits for has finished ("full"), has its first
  token ("first_token"), or, "births", has its first token and, if sent by the births cutoff
  (kvtui.core.births), has finished. The cutoff is decided once, on the first tail progress whose
  senders all know the window closed (`Progress.tail_seen`: a live worker may still send a window
  request before it hears).
- `end_now`: a verdict decided beyond the window (a preemption where the SLO allows none) or a stop:
  the step ends where it stands, the window closed there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from kvtui.core.births import births_cutoff

TAIL_RULES = ("full", "first_token", "births")


@dataclass(frozen=True)
class PhaseRules:
    """What one step asks of its phases (times in the transport's seconds)."""

    warmup_s: float
    window_s: float
    warm_from_s: float = 0.0  # the warm-up counts from this long after the step began (the new slots' stagger)
    warm_cap_s: float = float("inf")  # slots not yet warm hold the window this long past warmup_s at most
    window_requests: int = 0  # > 0: the window closes after this many sends, not by time
    min_window_requests: int = 0  # a timed window stays open until this many were sent in it …
    max_window_factor: float = 20.0  # … but never past this × window_s
    tail: str = "full"  # TAIL_RULES
    births_s: float | None = None  # the "births" rule: one request's duration (None: every window request counts)

    def __post_init__(self) -> None:
        if self.tail not in TAIL_RULES:
            raise ValueError(f"tail rule {self.tail!r}: one of {', '.join(TAIL_RULES)}")


@dataclass(frozen=True)
class Progress:
    """What a transport counted at one moment of the step."""

    warm: bool = False  # its slots are warm (the transport's own rule: see the module's note)
    window_started: int = 0  # requests sent in the window so far
    window_in_flight: int = 0  # window requests not yet finished (failed ones are finished)
    window_no_first: int = 0  # window requests in flight without a first token
    window_live_births: Sequence[float] = ()  # send times of the window requests in flight
    window_births: Sequence[float] = ()  # send times of every window request (the births cutoff's input)
    tail_seen: bool = True  # every sender knows the window closed


class StepPhases:
    """One step's phase and window times; `advance` moves it on."""

    def __init__(self, rules: PhaseRules, t_start: float):
        self.rules = rules
        self.t_start = t_start
        self.phase = "warmup"  # "warmup" | "window" | "tail" | "end"
        self.t_window_start: float | None = None
        self.t_window_end: float | None = None
        self.t_births_end: float | None = None  # the births cutoff (None: every window request counts)
        self.closed_by = ""  # "time" | "count" | "decided" | "ended"
        self._cutoff_decided = False

    @property
    def ended(self) -> bool:
        return self.phase == "end"

    @property
    def needs_births(self) -> bool:
        """Whether the next tail progress must carry every window send time (the births cutoff is
        still to decide); afterwards a transport may leave them out."""
        return self.rules.tail == "births" and not self._cutoff_decided

    def window_elapsed(self, now: float) -> float:
        return 0.0 if self.t_window_start is None else now - self.t_window_start

    def advance(self, now: float, p: Progress) -> str | None:
        """The phase change `now` and `p` bring ("window", "tail", "end"), or None. One change a call:
        a transport asks again with fresh counts (a window just opened holds no request yet)."""
        r = self.rules
        # Comparisons as `now >= start + span`: the simulator's virtual times are sums of floats, and a
        # step's figures must not move by an ulp between releases.
        if self.phase == "warmup":
            warm_at = self.t_start + r.warmup_s + r.warm_from_s
            if now >= warm_at and (p.warm or now >= warm_at + r.warm_cap_s):
                self.phase, self.t_window_start = "window", now
                return "window"
            return None
        if self.phase == "window":
            ws = self.t_window_start
            assert ws is not None
            if r.window_requests > 0:
                if p.window_started >= r.window_requests:
                    return self._close(now, "count")
            elif now >= ws + r.window_s and (p.window_started >= r.min_window_requests
                                             or now >= ws + r.window_s * r.max_window_factor):
                return self._close(now, "time")
            return None
        if self.phase == "tail":
            if not p.tail_seen:
                return None
            if self.tail_left(p) == 0:
                self.phase = "end"
                return "end"
        return None

    def tail_left(self, p: Progress) -> int:
        """Window requests the tail still waits for. The births cutoff is decided on the first call
        (the window's sends are all known by then: `tail_seen`)."""
        r = self.rules
        if r.tail == "first_token":
            return p.window_no_first
        if r.tail == "births":
            if not self._cutoff_decided:
                assert self.t_window_end is not None
                self.t_births_end = births_cutoff(self.t_window_end, r.births_s, p.window_births,
                                                  r.min_window_requests)
                self._cutoff_decided = True
            cut = self.t_births_end
            if cut is not None:
                return p.window_no_first + sum(1 for t in p.window_live_births if t <= cut)
        return p.window_in_flight

    def decide_window(self, now: float) -> None:
        """A look decided the verdict on a complete cohort: the window closes now, the tail as usual."""
        if self.phase == "window":
            self._close(now, "decided")

    def end_now(self, now: float) -> None:
        """The step ends where it stands (a verdict decided beyond the window, a stop, a failure)."""
        if self.phase == "end":
            return
        if self.phase == "window":
            self.t_window_end = now
            self.closed_by = "ended"
        self.phase = "end"

    def _close(self, now: float, by: str) -> str:
        self.phase, self.t_window_end, self.closed_by = "tail", now, by
        return "tail"
