"""The load generator's message protocol: what the parent and its worker processes exchange.

Over a `multiprocessing.Pipe` (pickled tuples):
  parent → worker: ("step", StepSpec) ("phase", "window"|"tail") ("stop",) ("hold",) ("release",) ("exit",)
  worker → parent: ("ready",) ("records", [dict]) ("status", WorkerStatus) ("stopped", dict)
                   ("held", dict, [dict]) ("released", dict) ("fatal", str)

A step ends with "stop" (every request in flight is cancelled; the worker answers "stopped" with its
stats) or, closed loop only, with "hold" (continuous steps, docs/PROTOCOL.md): the step ends — its
records so far, then ("held", stats, cut copies of the requests still in flight: error
"cancelled", detail "carried into the next step", their tokens so far) — but the slots and their
requests go on. Between a "hold" and the next command the worker sends nothing (the parent is not
reading): its slots keep the closed loop at the held load, and every request they send then
belongs to the held step (its `step`, phase "tail"). Then either:
  - ("step", spec) with `spec.continue_from_previous`: the next step continues from the requests
    in flight. The worker keeps min(old, new) slots; the excess slots finish their request and
    send no other (a step down); slots above the old count start (a step up, staggered). Its
    request counter goes on from the held step's (`spec.counter_base` is ignored: the held step's
    base is kept), so ids stay unique over the pair. Every request keeps the `step` and `phase` it
    was sent in: a request of the held step that finishes now arrives in this step's "records"
    messages with the held step's index (the parent tells them apart by it);
  - ("release",): every request in flight is cancelled (records sent), answered by ("released",
    {"max_seq": n}): the held chain's last counter (the parent's next counter_base goes past it);
  - ("exit",): as release, then the process ends.
A ("step", spec) without continue_from_previous to a held worker releases it first.

A status carrying `client_failure` (a load task raised, a burst of the client's own errors)
ends the step as the client's failure; so do a "fatal" and a worker whose pipe closes.

Kept apart from both sides so that each side imports only the shapes, not the other's code.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

STATUS_EVERY = 0.2  # seconds between status/records messages from a worker


@dataclass(frozen=True)
class WorkerStatus:
    """A worker's ("status", …) message: its counts for the step, every STATUS_EVERY seconds."""

    # Whose counts these are: a held step's reporter runs on between steps, and its statuses, still
    # in the pipe, must not warm or close the next step's window.
    step: int | None = None
    phase: str = "warmup"  # the phase the worker knows: "tail" only once it heard the window closed
    inflight: int = 0
    window_inflight: int = 0
    window_started: int = 0
    window_no_first: int = 0  # window requests in flight without a first token
    # When it was sent (kvtui.clock.monotonic): every window request this worker sends later is sent
    # after it, so the parent's live look knows which finished requests form a cohort.
    t: float | None = None
    window_births: tuple[float, ...] = ()  # in the tail only (the "births" rule): every window send time
    # the window requests still streaming: the births rule's wait in the tail, and the live look's
    # cohort boundary in the window (kvtui.explore.live_look)
    window_live_births: tuple[float, ...] = ()
    warm_slots: int = 0  # slots that finished a request at this load (a continued step down: those it keeps)
    excess: int = 0  # closed-loop slots of a continued step down still finishing their last request
    completed: int = 0
    sent: int = 0
    error_burst: bool = False
    client_failure: str | None = None


@dataclass(frozen=True)
class StatusTotals:
    """The workers' latest statuses, summed (`sum_status`)."""

    inflight: int = 0
    window_inflight: int = 0
    window_started: int = 0
    window_no_first: int = 0
    warm_slots: int = 0
    excess: int = 0
    completed: int = 0
    sent: int = 0
    window_births: tuple[float, ...] = ()
    window_live_births: tuple[float, ...] = ()
    error_burst: bool = False
    client_failure: str | None = None


_COUNTS = ("inflight", "window_inflight", "window_started", "window_no_first", "warm_slots", "excess", "completed",
           "sent")


@dataclass
class WorkerConfig:
    base_url: str
    model: str
    headers: dict[str, str]
    workload: dict[str, Any]  # asdict(Workload)
    space: dict[str, Any]  # TokenSpace fields
    max_model_len: int
    salt: int
    seed: int
    request_timeout_s: float
    index: int = 0
    workers: int = 1
    # Several replicas kvtui spreads requests over (kvtui.runtime.load.dispatch): (base_url, headers) each;
    # empty: every request goes to base_url.
    replicas: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    routing: str = "least_inflight"


@dataclass
class StepSpec:
    mode: str
    step: int
    load: float  # this worker's share: slots (closed) or req/s (open)
    closed: bool = True
    counter_base: int = 0
    arrival: str = "poisson"
    burst_size: int = 8
    stagger_s: float = 1.0
    max_error_burst: int = 20
    max_inflight: int = 4096  # open loop: beyond this the client itself is the limit
    # Closed loop: continue from the held step's slots and requests in flight (see the module's note).
    continue_from_previous: bool = False
    # The whole step's load (every worker's share): what each record says. With several workers a
    # closed loop's share is uneven (4 on 3 workers: 2, 1, 1), so share × workers is not it.
    step_load: float = 0.0
    # A trace replay's start (kvtui.clock.monotonic, the same in every worker): every worker's share of
    # the one schedule is sent at start_at + its offsets (0: each worker from its own start).
    start_at: float = 0.0


@dataclass
class ClientStats:
    """What the client itself cost and lagged during one step (all workers merged)."""

    sent: int = 0
    chunks: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    loop_lag_ms_p99: float = 0.0
    loop_lag_ms_max: float = 0.0
    dispatch_ms_p50: float = 0.0
    dispatch_ms_p95: float = 0.0
    dispatch_ms_max: float = 0.0
    inflight_capped: int = 0  # open loop: arrivals dropped because max_inflight was reached
    workers: int = 1
    # Time the event-loop thread was runnable but not running (Linux schedstat; None elsewhere):
    # tells a loop stall caused by a starved CPU from one caused by kvtui's own code.
    runq_wait_s: float | None = None
    # The longest time a worker's event loop was stopped — not running and not waiting for a CPU:
    # Ctrl-Z then `fg`, a VM pause. Every latency timed across it is the client's.
    stall_s: float = 0.0

    @property
    def cpu_share(self) -> float:
        """Busy share of the load generator's cores (1.0 = every worker saturated)."""
        return self.cpu_s / (self.wall_s * self.workers) if self.wall_s else 0.0

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.wall_s if self.wall_s else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cpu_share"] = round(self.cpu_share, 3)
        d["chunks_per_s"] = round(self.chunks_per_s, 1)
        return d



def pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def sum_status(status: dict[int, WorkerStatus], active: list[int]) -> StatusTotals:
    """The workers' latest ("status", …) messages, summed."""
    got = [s for i in active if (s := status.get(i)) is not None]
    return StatusTotals(**{k: sum(getattr(s, k) for s in got) for k in _COUNTS},
                        window_births=tuple(t for s in got for t in s.window_births),
                        window_live_births=tuple(t for s in got for t in s.window_live_births),
                        error_burst=any(s.error_burst for s in got),
                        client_failure=next((s.client_failure for s in got if s.client_failure), None))


def merge_stats(parts: list[dict[str, Any]], n_workers: int) -> ClientStats:
    """The workers' ("stopped", stats) messages as one ClientStats."""
    lags = [x for p in parts for x in p.get("lags", [])]
    waits = [p["runq_wait_s"] for p in parts if p.get("runq_wait_s") is not None]  # the most-starved worker
    disp = [x for p in parts for x in p.get("dispatch", [])]
    return ClientStats(
        sent=sum(p.get("sent", 0) for p in parts),
        chunks=sum(p.get("chunks", 0) for p in parts),
        cpu_s=sum(p.get("cpu_s", 0.0) for p in parts),
        wall_s=max([p.get("wall_s", 0.0) for p in parts] + [0.0]),
        loop_lag_ms_p99=pct(lags, 0.99) * 1000,
        loop_lag_ms_max=max(lags, default=0.0) * 1000,
        dispatch_ms_p50=pct(disp, 0.50) * 1000,
        dispatch_ms_p95=pct(disp, 0.95) * 1000,
        dispatch_ms_max=max(disp, default=0.0) * 1000,
        inflight_capped=sum(p.get("inflight_capped", 0) for p in parts),
        workers=max(1, n_workers),
        runq_wait_s=max(waits, default=None),
        stall_s=max([p.get("stall_s", 0.0) for p in parts] + [0.0]),
    )
