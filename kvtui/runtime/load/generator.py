"""The load generator's parent side: it owns the worker processes (kvtui.runtime.load.worker) and
steers one step through warm-up, window and held tail (messages: kvtui.runtime.load.protocol).

Continuous steps (closed loop, docs/PROTOCOL.md "Continuous"): a step run with
`StepParams.hold_at_end` ends without cancelling its requests (the workers keep their slots,
`LoadGenerator.held`); the next `run_step` with `StepParams.continue_from` continues from them
(a step down: the excess slots finish their request and are not replaced), or, when it cannot
(`StepRun.continued_why`), releases them and starts from no slots. `release()` cancels a held
step's requests (before a drain).
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Iterable, cast

from kvtui import clock
from kvtui.core.phases import PhaseRules, Progress, StepPhases
from kvtui.core.record import Record
from kvtui.runtime.load.autoscale import AutoScaler, WorkerMeter
from kvtui.runtime.load.protocol import (
    ClientStats,
    StatusTotals,
    StepSpec,
    WorkerConfig,
    WorkerStatus,
    merge_stats,
    sum_status,
)
from kvtui.runtime.load.worker import worker_main
from kvtui.runtime.procs import reaper

__all__ = ["ClientStats", "Held", "LoadGenerator", "StepParams", "StepRun", "StepSpec", "WorkerConfig"]


@dataclass
class StepParams:
    """What one step asks of the load generator."""

    mode: str
    step: int  # the step's index within the mode
    load: float  # concurrency (closed loop) or req/s in wall seconds (open loop)
    closed: bool
    warmup_s: float
    window_s: float
    window_requests: int = 0  # > 0: the window closes after this many starts, not by time
    arrival: str = "poisson"
    burst_size: int = 8
    max_error_burst: int = 20
    window_timeout_s: float = 0.0  # caps the wait for every slot to warm
    min_window_requests: int = 0
    max_window_factor: float = 20.0
    # How long the load is held after the window (kvtui.core.window_stats.tail_rule): "full"
    # until every window request finished; "first_token" until each has its first token (the
    # figures then come from the window itself).
    tail: str = "full"
    # "births": one request's duration (wall s): TPOT and E2E count the window requests sent by that
    # long before the window's end, at least the min_window_requests first (kvtui.core.births).
    births_s: float | None = None
    warm_all_slots: bool = True  # the window waits for every slot to finish a request at this load
    # The new slots' first sends spread over this many seconds (None: min(2, max(0.2, warmup_s / 2)));
    # the warm-up counts from the last of them (kvtui.core.protocol.ramp_for).
    stagger_s: float | None = None
    # Continuous steps (closed loop only; the module's note). hold_at_end: a step that ends normally
    # keeps its slots and requests going (LoadGenerator.held) instead of cancelling them.
    # continue_from: start from the held step's requests in flight, if it can (StepRun.continued).
    hold_at_end: bool = False
    continue_from: bool = False


@dataclass
class StepRun:
    """What one step's load produced, before any evaluation."""

    records: list[Record] = field(default_factory=list)
    t_start: float = 0.0
    t_window_start: float = 0.0
    t_window_end: float = 0.0
    t_end: float = 0.0
    t_births_end: float | None = None  # the "births" rule's cutoff (None: every window request counts)
    stats: ClientStats = field(default_factory=ClientStats)
    error_burst: bool = False
    aborted: str | None = None  # why the step ended early (user stop, engine died, …)
    # Why the step ended before its window's end with its verdict already decided (run_step's
    # `decided`: a preemption where the SLO allows none); it ends as a normal step does (held).
    decided: str | None = None
    # Why the window closed before its time with the verdict already decided (run_step's
    # `window_look`: the sequential test on a complete cohort); the step then holds its tail as usual.
    window_decided: str | None = None
    client_failure: str | None = None  # the client itself could not measure on (a dead worker, a crashed task)
    counter_next: int = 0
    autoscale: dict[str, Any] | None = None  # workers that ran and why any were added (kvtui.runtime.load.autoscale)
    # Continuous steps. `records` holds only this step's own requests (Record.step == its index).
    held: bool = False  # it ended held: its slots and requests go on (LoadGenerator.held)
    continued: bool = False  # it started from the held step's requests in flight
    continued_why: str | None = None  # continue_from was asked and refused: why it started from no slots
    continued_from: dict[str, Any] | None = None  # {"step", "load", "in_flight"} when continued
    # Requests of an earlier (held) step that ended while this one ran, each with the step and phase
    # it was sent in (released ones cancelled): passed to on_records too, never counted here.
    carried_in: list[Record] = field(default_factory=list)
    # A held end: a cut copy of each request still in flight (error "cancelled", detail "carried
    # into the next step", its tokens so far), this step's view of it for a window estimate. Not
    # passed to on_records: the request's own record (same id) comes later, in carried_in.
    carried_out: list[Record] = field(default_factory=list)


@dataclass
class Held:
    """A step that ended held: its workers' slots and requests go on until continued or released."""

    mode: str
    step: int
    load: float
    counter_base: int  # the chain's base: a continued step's counters go on from it
    workers: list[int]  # the workers holding slots
    pool: int  # the pool's size then (a continued step needs the same pool)
    in_flight: int  # requests in flight at the hold


def _ready(conns: Iterable[Connection], timeout: float) -> list[Connection]:
    """The pipes with something to read. `wait` hands back the very objects it was given, but its
    stub returns any waitable (Connection | socket | int) whatever went in, hence the cast."""
    return cast("list[Connection]", wait(list(conns), timeout=timeout))


def cohort_bound(status: dict[int, WorkerStatus], active: list[int]) -> float | None:
    """A time before which every window request sent has finished and its record has reached the
    parent: the earliest send of a window request still streaming, and, for a worker with none
    streaming, when it sent its latest status (what it sends later is sent after that). A worker's
    records come before its status in its pipe, so those finished before the status are read. None
    until every active worker has reported in this step."""
    bound = float("inf")
    for i in active:
        st = status.get(i)
        if st is None or st.t is None:
            return None
        live = st.window_live_births
        bound = min(bound, min(live) if live else st.t)
    return bound


class LoadGenerator:
    """Owns the worker processes for a run; `run_step` drives one step through its phases."""

    def __init__(self, cfg: WorkerConfig, processes: int = 1, scaler: AutoScaler | None = None):
        self.cfg = cfg
        self.n = max(1, processes)
        self.procs: list[mp.process.BaseProcess] = []
        self.conns: list[Connection] = []
        self.counter = 0
        self.held: Held | None = None  # the step before ended held (continuous steps)
        self.not_held_why: str | None = "no step before"  # why there is no held step to continue
        # Each recent step's window end, for its requests' records that arrive after it (_file_records).
        self._window_ends: dict[tuple[str, int], float] = {}
        # With a scaler the pool grows by itself (before a step, or in its warm-up) up to its max.
        self.scaler = scaler
        if scaler is not None:
            self.n = min(self.n, scaler.max_workers)

    # A worker is a fresh interpreter importing aiohttp: about a second here, but a stalled CI host
    # once took over a minute (a test failed on "did not start"); a worker that is truly stuck is
    # still killed and named at the deadline.
    def start(self, timeout_s: float = 180.0) -> None:
        ctx = mp.get_context("spawn")  # no fork: the parent may hold threads (NVML, UI)
        # A trace ([workload] trace) is read once, here, and its compact rows handed to every worker
        # (a week of the Azure trace would take each worker half a minute to read again).
        rows = None
        if self.cfg.workload.get("trace"):
            from types import SimpleNamespace

            from kvtui.io.scenario.trace import TraceSpec, replay_rows

            rows = replay_rows(TraceSpec.of(SimpleNamespace(**self.cfg.workload)))
        for i in range(self.n):
            parent, child = ctx.Pipe(duplex=True)
            c = WorkerConfig(**{**asdict(self.cfg), "index": i, "workers": self.n})
            p = ctx.Process(target=worker_main, args=(child, c, rows), name=f"kvtui-load-{i}", daemon=True)
            p.start()
            child.close()
            if p.pid:
                reaper.register_pid(p.pid, f"kvtui load generator {i}")
            self.procs.append(p)
            self.conns.append(parent)
        deadline = clock.monotonic() + timeout_s
        for conn in self.conns:
            left = max(0.1, deadline - clock.monotonic())
            if not conn.poll(left):
                self.close()
                raise RuntimeError("load generator process did not start")
            msg = conn.recv()
            if msg[0] != "ready":
                self.close()
                raise RuntimeError(f"load generator process failed: {msg[1] if len(msg) > 1 else msg}")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid]

    def resize(self, n: int) -> None:
        """A new pool of `n` workers (every worker knows the pool's size: its request counters
        interleave by it, so the old ones go and `n` fresh ones start)."""
        self.close()
        self.n = max(1, n)
        self.start()

    def _broadcast(self, msg: tuple) -> None:
        for c in self.conns:
            try:
                c.send(msg)
            except (BrokenPipeError, OSError):
                pass

    def run_step(
        self,
        p: StepParams,
        on_records: Callable[[list[Record]], None] | None = None,
        on_status: Callable[[str, float, StatusTotals], None] | None = None,
        should_stop: Callable[[], str | None] | None = None,
        decided: Callable[[], str | None] | None = None,
        window_look: Callable[[float, float], str | None] | None = None,
    ) -> StepRun:
        """Warm-up (≥ warmup_s and every slot finished one request), the window, the held tail, stop.

        A time window stays open until `p.min_window_requests` have started in it (the SLO's
        percentiles need them), but never longer than `p.max_window_factor` × window_s.
        `decided`, asked in the window and tail once a window request was sent: why the step's
        verdict is already decided (it then ends there, normally, with `run.decided` saying why).
        `window_look(elapsed_s, bound)`, asked in the window (a closed loop's): `bound` is a time
        before which every window request sent has finished and reached `on_records` (cohort_bound);
        why the verdict is already decided on them, or None. The window then closes there and the
        tail runs as after a window that closed by time (`run.window_decided` says why).
        """
        run = StepRun()
        sc = self.scaler
        want = self.n
        if sc is not None:
            sc.new_step()
            want = sc.before_step(self.n, p.load)
        cont = self._continue_or_release(p, run, want, on_records)
        if want > self.n:
            self.resize(want)
        while True:
            grow = self._attempt(p, run, on_records, on_status, should_stop, cont, decided, window_look)
            if not grow:
                break
            # A worker neared its capacity in the warm-up: nothing was measured yet; the step
            # starts again, warm-up included, on a larger pool.
            if cont:
                cont = run.continued = False
                run.continued_why = (f"the load-generator pool grew to {grow[0]} workers in the warm-up: "
                                     "the step started again from no slots")
            self.counter += max([s.get("max_seq", 0) for s in grow[1]] + [0]) * self.n + self.n
            self.resize(grow[0])
        if sc is not None:
            sc.after_step(p.load, run.stats.cpu_s, run.stats.wall_s)
            run.autoscale = sc.record(run.stats.workers)
        return run

    def _attempt(
        self,
        p: StepParams,
        run: StepRun,
        on_records: Callable[[list[Record]], None] | None,
        on_status: Callable[[str, float, StatusTotals], None] | None,
        should_stop: Callable[[], str | None] | None,
        cont: bool = False,
        decided: Callable[[], str | None] | None = None,
        window_look: Callable[[float, float], str | None] | None = None,
    ) -> tuple[int, list[dict[str, Any]]] | None:
        """One try at the step; (workers wanted, the workers' stop stats) when the warm-up asked
        for a larger pool (the step is then measured again), else None with `run` filled."""
        mode, step, load, closed = p.mode, p.step, p.load, p.closed
        warmup_s, window_s, window_requests = p.warmup_s, p.window_s, p.window_requests
        arrival, burst_size, max_error_burst = p.arrival, p.burst_size, p.max_error_burst
        n = self.n
        grow_to = 0
        meter = WorkerMeter() if self.scaler is not None else None
        shares: list[float]  # a closed step's are whole requests in flight
        if closed:
            shares = [int(load) // n + (1 if i < int(load) % n else 0) for i in range(n)]
        else:
            shares = [load / n] * n
        stagger = min(2.0, max(0.2, warmup_s / 2)) if p.stagger_s is None else max(0.0, p.stagger_s)
        # With a stagger of its own (the continuous protocol's ramp) the warm-up starts once the last
        # new slot has sent; the classic spread is short and counted inside the warm-up, as before.
        warm_from = stagger if p.stagger_s is not None else 0.0
        go = clock.monotonic() + 0.05 if arrival == "trace" else 0.0  # a trace replay: the workers' one start
        specs = [
            StepSpec(mode, step, float(s), closed, self.counter, arrival, burst_size, stagger, max_error_burst,
                     continue_from_previous=cont, step_load=float(load),
                     start_at=go)
            for s in shares
        ]
        run.t_start = clock.monotonic()
        # The phases' rules (kvtui.core.phases); the workers' statuses are their counts.
        ph = StepPhases(PhaseRules(
            warmup_s, window_s, warm_from_s=warm_from,
            # Warm = every slot has finished a request at this load (one full E2E), as the DESIGN
            # asks; window_timeout_s only caps that wait (a slot whose requests keep failing never
            # warms). A zero cap once meant "do not wait", and the H200 run's windows opened on the
            # first wave of sends, not in steady state.
            warm_cap_s=p.window_timeout_s if p.window_timeout_s > 0 else float("inf"),
            window_requests=window_requests, min_window_requests=p.min_window_requests,
            max_window_factor=p.max_window_factor, tail=p.tail, births_s=p.births_s), run.t_start)
        active = [i for i, s in enumerate(shares) if s > 0]
        if cont:
            active = self._continued_active(active, run)
        first_inflight: dict[int, int] = {}  # a continued step: each worker's in-flight count at the change
        held_by: list[int] = []  # the workers that answered "held"
        if meter is not None:
            meter.reset([self.procs[i].pid or 0 for i in active])
        status: dict[int, WorkerStatus] = {}
        stopped: dict[int, dict[str, Any]] = {}
        for i in active:
            try:
                self.conns[i].send(("step", specs[i]))
            except (BrokenPipeError, OSError):  # the worker died between steps
                stopped[i] = {}
                run.client_failure = run.aborted = "a load-generator process died between steps"
        stop_sent = False
        conns = {self.conns[i]: i for i in active}
        while len(stopped) < len(active):
            ready = _ready((c for c, i in conns.items() if i not in stopped), timeout=0.05)
            for c in ready:
                i = conns[c]
                try:
                    msg = c.recv()
                except (EOFError, OSError):
                    stopped[i] = {}
                    code = None
                    if i < len(self.procs):
                        self.procs[i].join(0.5)
                        code = self.procs[i].exitcode
                    died = "a load-generator process died" + (f" (exit code {code})" if code is not None else "")
                    run.aborted = run.aborted or died
                    run.client_failure = run.client_failure or died
                    continue
                kind = msg[0]
                if kind == "records":
                    recs = [Record.from_dict(d) for d in msg[1]]
                    self._file_records(recs, run, p)
                    if meter is not None:
                        pos = active.index(i) if i in active else -1
                        for r in recs:
                            meter.add_dispatch(pos, r.dispatch_delay)
                    if on_records:
                        on_records(recs)
                elif kind == "status":
                    st: WorkerStatus = msg[1]
                    if st.step != step:
                        continue  # the held step's, sent before this step began (its counts are not ours)
                    status[i] = st
                    first_inflight.setdefault(i, st.inflight)
                elif kind == "stopped":
                    stopped[i] = msg[1]
                elif kind == "held":  # a held end (hold_at_end): the worker's slots go on
                    stopped[i] = msg[1]
                    held_by.append(i)
                    for r in (Record.from_dict(d) for d in msg[2]):
                        self._after_window(r, run.t_window_end)
                        run.carried_out.append(r)
                elif kind == "fatal":
                    stopped[i] = {}
                    run.aborted = f"load generator failed: {msg[1]}"
                    run.client_failure = run.client_failure or str(msg[1])
            now = clock.monotonic()
            if stop_sent:
                continue
            agg = sum_status(status, active)
            if agg.client_failure and not run.client_failure:
                run.client_failure = agg.client_failure
                run.aborted = run.aborted or f"load generator failed: {run.client_failure}"
            if on_status:
                on_status(ph.phase, now - run.t_start, agg)
            reason = should_stop() if should_stop else None
            if reason or agg.error_burst or run.aborted:
                run.aborted = run.aborted or reason or None
                run.error_burst = agg.error_burst
                self._ended(ph, now, run)
                self._stop([i for i in active if i not in stopped])
                stop_sent = True
                continue
            if decided is not None and ph.phase in ("window", "tail") and agg.window_started > 0:
                why = decided()
                if why:  # the rest of the window could not change the verdict: end as a normal step
                    run.decided = why
                    self._ended(ph, now, run)
                    self._end_step(active, p)
                    stop_sent = True
                    continue
            if ph.phase == "warmup" and meter is not None and self.scaler is not None:
                # Only a pool whose every worker has a share can be short of workers.
                want = self.scaler.during_warmup(n, meter) if len(active) == n else n
                if want > n:
                    grow_to = want
                    self._stop(active)
                    stop_sent = True
                    continue
            if ph.phase == "window" and window_look is not None and closed:
                bound = cohort_bound(status, active)
                why_look = window_look(ph.window_elapsed(now), bound) if bound is not None else None
                if why_look:  # decided on a complete cohort: the window closes now, the tail as usual
                    run.window_decided = why_look
                    ph.decide_window(now)
                    run.t_window_end = now
                    self._send_all(active, ("phase", "tail"))
                    continue
            change = ph.advance(now, self._progress(agg, status, active, p, cont))
            if change == "window":
                run.t_window_start = now
                self._send_all(active, ("phase", "window"))
            elif change == "tail":
                run.t_window_end = now
                self._send_all(active, ("phase", "tail"))
            elif change == "end":
                self._end_step(active, p)
                stop_sent = True
        run.t_births_end = ph.t_births_end
        if cont and run.continued_from is not None:
            run.continued_from["in_flight"] = sum(first_inflight.values())
        if grow_to and not run.aborted:
            return grow_to, list(stopped.values())
        run.t_end = clock.monotonic()
        if not run.t_window_end:
            run.t_window_end = run.t_end
        self._window_ends = {k: v for k, v in self._window_ends.items() if k[0] == p.mode and k[1] >= p.step - 4}
        self._window_ends[(p.mode, p.step)] = run.t_window_end
        if not run.t_window_start:
            run.t_window_start = run.t_window_end
        run.stats = merge_stats(list(stopped.values()), n_workers=len(active))
        run.stats.stall_s = round(run.stats.stall_s, 3)
        if self._after_end(p, run, active, held_by, on_records):
            run.counter_next = self.counter  # held: the continued step's counters go on from this base
            return None
        self.counter += max([s.get("max_seq", 0) for s in stopped.values()] + [0]) * n + n
        run.counter_next = self.counter
        return None

    @staticmethod
    def _progress(agg: StatusTotals, status: dict[int, WorkerStatus], active: list[int], p: StepParams,
                  cont: bool) -> Progress:
        """The workers' summed statuses as the phases read them (kvtui.core.phases)."""
        # Warm: every slot has finished a request at this load (warm_all_slots), and on a continued
        # step down the excess slots have all finished (as kvtui.simulator.engine.continuous waits).
        warm = agg.warm_slots >= (int(p.load) if p.closed and p.warm_all_slots else 1)
        if cont:
            warm = warm and agg.excess == 0
        return Progress(warm=warm, window_started=agg.window_started, window_in_flight=agg.window_inflight,
                        window_no_first=agg.window_no_first, window_live_births=agg.window_live_births,
                        window_births=agg.window_births,
                        # only statuses sent after a worker saw "tail" can prove the window is done
                        tail_seen=all((s := status.get(i)) is not None and s.phase == "tail" for i in active))

    @staticmethod
    def _ended(ph: StepPhases, now: float, run: StepRun) -> None:
        ph.end_now(now)
        if ph.t_window_end is not None:
            run.t_window_end = ph.t_window_end

    # -- continuous steps (closed loop): hold, continue, release -----------------------------------
    def _continue_or_release(self, p: StepParams, run: StepRun, want: int,
                             on_records: Callable[[list[Record]], None] | None) -> bool:
        """Whether this step continues from the held step; if not, the held requests are released
        (their records into run.carried_in) and, where continue_from asked, `continued_why` says why."""
        why = self._why_not_continue(p, want) if p.continue_from else None
        cont = p.continue_from and why is None
        if not cont and self.held is not None:
            self._release(run, p, on_records)
        run.continued, run.continued_why = cont, why
        return cont

    def _why_not_continue(self, p: StepParams, want: int) -> str | None:
        h = self.held
        if not p.closed:
            return "an open-loop step starts fresh (continuation is closed-loop only)"
        if h is None:
            return f"no held step to continue ({self.not_held_why or 'the step before was not held'})"
        if h.mode != p.mode:
            return f"the held step is of another mode ({h.mode})"
        if h.step == p.step:
            return f"the held step has the same index ({h.step})"
        if want > self.n:
            return f"the load-generator pool grows from {self.n} to {want} workers"
        if h.pool != self.n or len(self.procs) != self.n:
            return f"the load-generator pool changed ({h.pool} → {self.n} workers)"
        return None

    def _continued_active(self, active: list[int], run: StepRun) -> list[int]:
        """A continued step also runs on the workers that hold slots but get no share now (their
        slots finish their request and end); the held step is consumed."""
        h = self.held
        assert h is not None
        run.continued_from = {"step": h.step, "load": h.load, "in_flight": h.in_flight}
        self.held = None
        self.not_held_why = "the held step was continued"
        return sorted(set(active) | set(h.workers))

    def _file_records(self, recs: list[Record], run: StepRun, p: StepParams) -> None:
        """This step's own records, and those of an earlier step's requests ending now (carried_in)."""
        for r in recs:
            mine = r.step == p.step and r.mode == p.mode
            self._after_window(r, run.t_window_end if mine else self._window_ends.get((r.mode, r.step)))
            (run.records if mine else run.carried_in).append(r)

    @staticmethod
    def _after_window(r: Record, window_end: float | None) -> None:
        """A request its worker sent as a window one after the parent closed the window, before the
        worker heard so (the close is a message: a few ms), is a tail request: the window's population
        is what was sent inside it, by the parent's clock (time.monotonic, one clock for every process)."""
        if r.phase == "window" and window_end and r.t_intended > window_end:
            r.phase = "tail"

    def _end_step(self, active: list[int], p: StepParams) -> None:
        """A step that ended normally: held (its slots go on) when asked and closed, else stopped."""
        if p.hold_at_end and p.closed:
            self._send_all(active, ("hold",))
        else:
            self._stop(active)

    def _after_end(self, p: StepParams, run: StepRun, active: list[int], held_by: list[int],
                   on_records: Callable[[list[Record]], None] | None) -> bool:
        """After the step's last message: record whether it is held (and why not, for the next step)."""
        if held_by:
            self.held = Held(p.mode, p.step, p.load, self.counter, sorted(held_by), self.n, len(run.carried_out))
            if sorted(held_by) == sorted(active) and not run.aborted:
                run.held = True
                self.not_held_why = None
                return True
            # Only part of the pool held (a worker died or stopped on its own): nothing goes on.
            self._release(run, p, on_records)
            run.carried_out = []
        if run.aborted:
            self.not_held_why = f"the step before ended abnormally ({run.aborted})"
        elif run.error_burst:
            self.not_held_why = "the step before ended in an error burst"
        elif run.client_failure:
            self.not_held_why = f"the step before ended in a client failure ({run.client_failure})"
        elif not p.closed:
            self.not_held_why = "the step before was open-loop"
        elif not p.hold_at_end:
            self.not_held_why = "the step before was not held (hold_at_end off)"
        else:
            self.not_held_why = "the step before did not hold"
        return False

    def release(self, on_records: Callable[[list[Record]], None] | None = None) -> list[Record]:
        """Cancel a held step's requests (before a drain, or a step that does not continue); their
        records (each with the step it was sent in), also passed to on_records. Nothing held: []."""
        if self.held is None:
            return []
        run = StepRun()
        h = self.held
        self._release(run, StepParams(h.mode, h.step, h.load, True, 0.0, 0.0), on_records)
        return run.records + run.carried_in

    def _release(self, run: StepRun, p: StepParams, on_records: Callable[[list[Record]], None] | None,
                 timeout_s: float = 30.0) -> None:
        h = self.held
        if h is None:
            return
        self.held = None
        self.not_held_why = "the held step was released"
        waiting = {self.conns[i]: i for i in h.workers if i < len(self.conns)}
        for c in list(waiting):
            try:
                c.send(("release",))
            except (BrokenPipeError, OSError):
                del waiting[c]
        seqs = [0]
        deadline = clock.monotonic() + timeout_s
        while waiting and clock.monotonic() < deadline:
            for c in _ready(waiting, timeout=0.1):
                try:
                    msg = c.recv()
                except (EOFError, OSError):
                    del waiting[c]
                    continue
                if msg[0] == "records":
                    recs = [Record.from_dict(d) for d in msg[1]]
                    self._file_records(recs, run, p)
                    if on_records:
                        on_records(recs)
                elif msg[0] in ("released", "stopped", "fatal"):
                    if msg[0] != "fatal":
                        seqs.append(int(msg[1].get("max_seq", 0)))
                    del waiting[c]
        # The next step's counters go past every one the held chain used, gap sends included.
        self.counter = max(self.counter, h.counter_base + max(seqs) * h.pool + h.pool)

    def _send_all(self, active: list[int], msg: tuple) -> None:
        # A worker that died is noticed by its pipe's EOF in the poll loop, not by a send here.
        for i in active:
            try:
                self.conns[i].send(msg)
            except (BrokenPipeError, OSError):
                pass

    def _stop(self, active: list[int]) -> None:
        for i in active:
            try:
                self.conns[i].send(("stop",))
            except (BrokenPipeError, OSError):
                pass

    def close(self) -> None:
        if self.held is not None:  # an "exit" ends a held step's requests too
            self.held = None
            self.not_held_why = "the load-generator processes were restarted"
        self._broadcast(("exit",))
        deadline = clock.monotonic() + 5
        for p in self.procs:
            p.join(max(0.0, deadline - clock.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(30)  # SIGKILL is not ignored: only a stalled host makes this wait long
            if p.pid and not p.is_alive():
                reaper.unregister_pid(p.pid)
        for c in self.conns:
            c.close()
        self.procs.clear()
        self.conns.clear()

    def __enter__(self) -> "LoadGenerator":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
