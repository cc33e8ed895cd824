"""Which replica a request goes to, when kvtui itself spreads the load over several servers.

One picker per load-generator worker (each worker balances its own share of the slots or of
the arrivals; the workers' shares are equal, so the whole is balanced too). Least-in-flight by
default, as a router in front of vLLM replicas does; round-robin as the option that ignores
how fast each replica drains. A replica that refused a connection is down for the rest of the
mode: the load goes on over the others (the step says so, kvtui.explore.replica_step), and
only when every replica is down do requests go to all of them again, to fail as errors.
"""

from __future__ import annotations

from kvtui.io.scenario.schema import ROUTINGS


class ReplicaPicker:
    def __init__(self, n: int, routing: str = "least_inflight", offset: int = 0):
        if routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {', '.join(ROUTINGS)}, got {routing!r}")
        self.n = max(1, n)
        self.routing = routing
        self.inflight = [0] * self.n
        self.down: set[int] = set()
        # Workers start their rotation at different replicas: with one slot each, two workers
        # would otherwise both pick replica 0 first.
        self._next = offset % self.n

    def up(self) -> list[int]:
        live = [i for i in range(self.n) if i not in self.down]
        return live or list(range(self.n))

    def pick(self) -> int:
        """The replica for the next request (counted in flight until `release`)."""
        live = self.up()
        if self.routing == "round_robin" or len(live) == 1:
            i = next(j for j in (self._next + k for k in range(self.n)) if j % self.n in live) % self.n
        else:
            # The fewest in flight; among equals, the next in rotation (an even spread at start).
            order = sorted(live, key=lambda j: (self.inflight[j], (j - self._next) % self.n))
            i = order[0]
        self._next = (i + 1) % self.n
        self.inflight[i] += 1
        return i

    def release(self, i: int) -> None:
        self.inflight[i] = max(0, self.inflight[i] - 1)

    def mark_down(self, i: int) -> bool:
        """Replica i refused a connection. True the first time."""
        if i in self.down:
            return False
        self.down.add(i)
        return True
