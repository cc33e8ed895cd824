"""The driver's hub: the lanes push their news here, the driver drains it; a stop reaches every lane.

A plain class, made a Ray actor by the driver (`ray.remote(Hub)`): this module imports no Ray.
It runs on the driver's node; when the driver dies the actor goes with its job, and a lane's
next push fails: the lane takes that as the driver gone and stops its server (kvtui.cluster.lane).
"""

from __future__ import annotations

from typing import Any

from kvtui import clock


class Hub:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.stopping: str | None = None
        self.attempts: dict[str, int] = {}

    def started(self, lane: str, facts: dict[str, Any]) -> tuple[bool, int]:
        """A lane (or its retry) began on a node: (stop now, which attempt this is)."""
        self.attempts[lane] = self.attempts.get(lane, 0) + 1
        self.events.append({"lane": lane, "kind": "started", "t": clock.time(), "attempt": self.attempts[lane],
                            **facts})
        return self.stopping is not None, self.attempts[lane]

    def push(self, lane: str, items: list[dict[str, Any]]) -> bool:
        """A lane's news; the answer: stop now."""
        for it in items:
            self.events.append({"lane": lane, **it})
        return self.stopping is not None

    def drain(self) -> list[dict[str, Any]]:
        out, self.events = self.events, []
        return out

    def stop(self, reason: str) -> None:
        self.stopping = self.stopping or reason

    def ping(self) -> bool:
        return True

    def node_id(self) -> str:
        """The Ray node the hub runs on (it must be the driver's: kvtui.cluster.driver places it)."""
        import ray  # only ever called inside the actor, where Ray is running

        return str(ray.get_runtime_context().get_node_id())
