"""What one offline step may simulate: a bound on its work and memory, and the run's stop.

The scheduler model simulates every request of a step in memory, in kvtui's own process (`kvtui
run --fast`, and the TUI's and a headless run's simulator paced in process, kvtui.explore.pacing). A
value in its range made that unbounded: `ramp.window_s = 86400` at concurrency 1 simulated a
day of requests, `ramp.min_samples = 100000000` on a live run re-ran its modelled step until a
hundred million requests had finished — at 100 % CPU, ignoring SIGTERM ("stopping", and it went
on), because the loop never looked at the run's stop.

So the loops of kvtui.simulator.engine.fast and .continuous ask a StepBudget on each pass: the run's
stop (or skip) ends the step at once, and a step that has simulated more requests, tokens or
engine iterations than any real what-if needs ends there, saying which bound and why. The
bounds are twenty times the heaviest published step (docs/results: 256 concurrent requests of
256 tokens over a 5 s warm-up and 15 s window on an H200, ~244,000 tokens generated, ~1,000
requests, a few thousand engine iterations; an idle concurrency of 1 iterates once a token, so
a 10-minute window at 5 ms a token is 120,000): about 200 MB of records and well under a minute
of CPU at most.
"""

from __future__ import annotations

from typing import Callable

from kvtui.errors import KvtuiError

MAX_REQUESTS = 500_000
MAX_TOKENS = 5_000_000
MAX_ITERATIONS = 250_000
STOPPED = "stopped"  # StepBudget.ended when the run's stop (or skip) ended the step
_EVERY = 256  # passes between looks at the stop (a call into the run)


class StepBudget:
    """One step's bounds. `over(...)` on each pass of the step's loop: True ends the step, and
    `ended` says why (STOPPED, or which bound it passed)."""

    def __init__(self, halt: Callable[[], bool] | None = None, max_requests: int = MAX_REQUESTS,
                 max_tokens: int = MAX_TOKENS, max_iterations: int = MAX_ITERATIONS):
        self.halt = halt
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        self.max_iterations = max_iterations
        self.ended = ""
        self._passes = 0

    def over(self, requests: int, tokens: int, iterations: int) -> bool:
        if self.ended:
            return True
        self._passes += 1
        if self._passes % _EVERY == 0 and self.halt is not None and self.halt():
            self.ended = STOPPED
        elif requests > self.max_requests:
            self.ended = f"{requests:,} requests simulated, more than one step may ({self.max_requests:,})"
        elif tokens > self.max_tokens:
            self.ended = f"{tokens:,} tokens simulated, more than one step may ({self.max_tokens:,})"
        elif iterations > self.max_iterations:
            self.ended = (f"{iterations:,} engine iterations simulated, more than one step may "
                          f"({self.max_iterations:,})")
        return bool(self.ended)

    def refuse_load(self, load: float) -> bool:
        """A load no step may simulate (not finite, not above 0, or more slots or requests a second
        than a whole step may hold): True, and `ended` says so; the step is not begun."""
        import math

        if not (math.isfinite(load) and load > 0):
            self.ended = f"a load of {load!r} (a load is a finite number above 0)"
        elif load > self.max_requests:
            self.ended = f"a load of {load:g}, more than one step may simulate ({self.max_requests:,} requests)"
        return bool(self.ended)



def refusal(ended: str, load: float) -> str | None:
    """The mode's error when a bound ended a step (`ended` of its result); None when it ran to its
    end or the run's stop ended it."""
    if not ended or ended == STOPPED:
        return None
    return (f"the modelled step at load {load:g} ended at its bound: {ended}; a step this long is not "
            "simulated (lower ramp.window_s, ramp.warmup_s, ramp.min_samples, ramp.window_requests or ramp.max)")


class SimulationCut(KvtuiError):
    """A simulated step the prediction or a refit needed was cut short (the run's stop, or a bound):
    its figures would be a part of a step, so no prediction is made of them."""
