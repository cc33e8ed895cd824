"""How many load-generator worker processes a step needs: measured, never guessed by the user.

A worker is one asyncio loop on one core. It nears its capacity when its loop is busy most of
the time (CPU share), when it wants a CPU more often than it gets one (busy + run-queue wait),
or when its requests leave later than they were due (dispatch delay). Each of those later shapes
the latencies it measures (kvtui.core.evaluate.client_limited flags the step then); the
scaler acts below those flags' thresholds, so the step is measured by enough workers instead.

The parent measures its workers from outside (/proc/PID/stat for CPU time, /proc/PID/schedstat
for the run-queue wait of the worker's loop thread, the records' `dispatch_delay`): the worker
itself is not changed. Two moments decide:
- before a step: the previous step's CPU per chunk, scaled to the new load (`before_step`);
- during its warm-up: a worker that nears capacity ends the warm-up, the pool grows, and the
  warm-up starts again (`during_warmup`; kvtui.runtime.load.generator does the restart).
The pool only grows within a run (a smaller load after a larger one keeps its workers), up to
the cores this process may run on, and only while the box has a core to spare: where every core
is busy (a CPU vLLM, other jobs) a second worker takes CPU from the first and buys nothing (on
this 2-core VM at load average 10–19, ×2 read no more chunks than ×1; docs/BENCHMARKS.md §7) —
the step then says so (`held`) and the client-limited flag names what could not keep up.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from kvtui import clock

# A worker past these is near its capacity (client_limited flags a step at CPU share 0.9, run-queue
# wait 0.25 of wall time, dispatch p95 10 ms: the scaler acts before those).
BUSY_NEAR = 0.70
DEMAND_NEAR = 0.85  # busy + waiting for a CPU: the loop wanted a core this share of the time
DISPATCH_NEAR_S = 0.005
# Workers are sized so that each is busy about this share of a core at the expected load.
TARGET_BUSY = 0.5
MIN_SAMPLE_S = 0.6  # the least warm-up time measured before a verdict (the first sends are connection setup)
MAX_GROWTHS_PER_STEP = 3
MIN_IDLE_CORES = 0.5  # a new worker needs at least this much idle CPU on the box to be worth its start


def cores_available() -> int:
    """CPUs this process may run on (its affinity mask; a container's cpuset), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process (/proc/PID/stat), None when unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            rest = f.read().decode("ascii", "replace").rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _runq_s(pid: int) -> float | None:
    """Seconds the process's main thread (the worker's event loop) waited on a run queue."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _idle_s() -> float | None:
    """Idle CPU seconds (idle + iowait) of the cores this process may run on, since boot (/proc/stat)."""
    try:
        mine = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        mine = None
    total = 0.0
    try:
        with open("/proc/stat") as f:
            for line in f:
                if not line.startswith("cpu") or line.startswith("cpu "):
                    continue
                parts = line.split()
                cpu = int(parts[0][3:])
                if mine is None or cpu in mine:
                    total += int(parts[4]) + int(parts[5])
    except (OSError, ValueError, IndexError):
        return None
    return total / os.sysconf("SC_CLK_TCK")


@dataclass
class Usage:
    """One worker over a measured interval."""

    worker: int
    wall_s: float
    busy: float | None  # CPU share of one core
    runq: float | None  # share of the interval spent runnable but not running
    dispatch_p95_s: float | None  # from its records finished in the interval

    def near(self) -> str | None:
        """Why this worker nears its capacity, or None."""
        if self.busy is not None and self.busy >= BUSY_NEAR:
            return f"worker {self.worker} CPU {self.busy:.0%}"
        if self.busy is not None and self.runq is not None and self.busy + self.runq >= DEMAND_NEAR:
            return f"worker {self.worker} CPU {self.busy:.0%} + run-queue wait {self.runq:.0%}"
        if self.dispatch_p95_s is not None and self.dispatch_p95_s >= DISPATCH_NEAR_S and (self.busy or 0) >= 0.3:
            return (f"worker {self.worker} dispatch delay p95 {self.dispatch_p95_s * 1000:.1f} ms "
                    f"at CPU {self.busy or 0:.0%}")
        return None


class WorkerMeter:
    """CPU share, run-queue wait and dispatch delay of each worker since `reset` (the parent's view)."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.t0 = 0.0
        self.cpu0: list[float | None] = []
        self.q0: list[float | None] = []
        self.idle0: float | None = None
        self.dispatch: dict[int, list[float]] = {}

    def reset(self, pids: list[int]) -> None:
        self.pids = list(pids)
        self.t0 = clock.monotonic()
        self.idle0 = _idle_s()
        self.cpu0 = [_cpu_s(p) for p in self.pids]
        self.q0 = [_runq_s(p) for p in self.pids]
        self.dispatch = {}

    def add_dispatch(self, worker: int, delay_s: float) -> None:
        self.dispatch.setdefault(worker, []).append(delay_s)

    @property
    def elapsed_s(self) -> float:
        return clock.monotonic() - self.t0

    def idle_cores(self) -> float | None:
        """Cores the box left idle since `reset` (None: /proc/stat unreadable)."""
        now, wall = _idle_s(), self.elapsed_s
        return None if now is None or self.idle0 is None or wall <= 0 else max(0.0, (now - self.idle0) / wall)

    def usage(self) -> list[Usage]:
        wall = self.elapsed_s
        out = []
        for i, (pid, c0, q0) in enumerate(zip(self.pids, self.cpu0, self.q0, strict=True)):
            c, q = _cpu_s(pid), _runq_s(pid)
            busy = (c - c0) / wall if wall > 0 and c is not None and c0 is not None else None
            runq = (q - q0) / wall if wall > 0 and q is not None and q0 is not None else None
            d = sorted(self.dispatch.get(i, []))
            p95 = d[min(len(d) - 1, int(0.95 * (len(d) - 1) + 0.5))] if d else None
            out.append(Usage(i, wall, busy, runq, p95))
        return out


@dataclass
class Growth:
    """One decision to add workers, as the step records it."""

    at: str  # "before the step" or "warm-up"
    workers_from: int
    workers_to: int
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "from": self.workers_from, "to": self.workers_to, "why": self.why}


@dataclass
class AutoScaler:
    """The pool size policy: grows the pool when a worker nears capacity, up to `max_workers`."""

    max_workers: int = field(default_factory=cores_available)
    min_idle_cores: float = MIN_IDLE_CORES
    last_load: float | None = None
    last_idle_cores: float | None = None  # what the last warm-up measured
    last_busy_cores: float | None = None  # CPU the whole pool used over the last step, in cores
    grown: list[Growth] = field(default_factory=list)  # this step's decisions
    held: str | None = None  # why a worker near capacity got no company this step (no idle core)

    def new_step(self) -> None:
        self.grown = []
        self.held = None

    def before_step(self, n: int, load: float) -> int:
        """Workers for a step at `load`, from what the last step cost (CPU scales with the load)."""
        if n >= self.max_workers or not self.last_load or not self.last_busy_cores or load <= self.last_load:
            return n
        if self.last_idle_cores is not None and self.last_idle_cores < self.min_idle_cores:
            return n  # no core to spare at the last look: the warm-up decides, measured
        expected = self.last_busy_cores * load / self.last_load
        want = min(self.max_workers, max(n, math.ceil(expected / TARGET_BUSY)))
        if want > n:
            self.grown.append(Growth("before the step", n, want,
                                     f"the last step at {self.last_load:g} used "
                                     f"{self.last_busy_cores:.2f} cores of CPU; "
                                     f"{load:g} is expected to need {expected:.2f}"))
        return want

    def during_warmup(self, n: int, meter: WorkerMeter) -> int:
        """Workers wanted now, from the warm-up measured so far (n: no change)."""
        if n >= self.max_workers or meter.elapsed_s < MIN_SAMPLE_S or len(self.grown) >= MAX_GROWTHS_PER_STEP:
            return n
        usage = meter.usage()
        why = [w for u in usage if (w := u.near())]
        if not why:
            return n
        idle = meter.idle_cores()
        self.last_idle_cores = idle
        if idle is not None and idle < self.min_idle_cores:
            self.held = f"{'; '.join(why)}, but the box had {idle:.2f} cores idle: no worker added"
            return n
        busy = sum(u.busy or 0.0 for u in usage) + sum(u.runq or 0.0 for u in usage)
        want = min(self.max_workers, max(n + 1, math.ceil(busy / TARGET_BUSY)))
        self.grown.append(Growth("warm-up", n, want, "; ".join(why)))
        return want

    def after_step(self, load: float, cpu_s: float, wall_s: float) -> None:
        if wall_s > 0:
            self.last_load, self.last_busy_cores = load, cpu_s / wall_s

    def record(self, workers: int) -> dict[str, Any]:
        """What the step keeps (`steps[].autoscale`)."""
        out: dict[str, Any] = {"workers": workers, "max": self.max_workers, "added": [g.to_dict() for g in self.grown]}
        if self.held:
            out["held"] = self.held
        return out
