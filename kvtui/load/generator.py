"""The load generator's parent side: it owns the worker processes (kvtui.load.worker) and
steers one step through warm-up, window and held tail (messages: kvtui.load.protocol).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

from kvtui.load.autoscale import AutoScaler, WorkerMeter
from kvtui.load.protocol import ClientStats, StepSpec, WorkerConfig, merge_stats, sum_status
from kvtui.load.records import Record
from kvtui.load.worker import worker_main
from kvtui.procs import reaper

__all__ = ["ClientStats", "LoadGenerator", "StepParams", "StepRun", "StepSpec", "WorkerConfig"]


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
    # How long the load is held after the window (kvtui.explore.window_stats.tail_rule): "full"
    # until every window request finished; "first_token" until each has its first token (the
    # figures then come from the window itself).
    tail: str = "full"
    warm_all_slots: bool = True  # the window waits for every slot to finish a request at this load


@dataclass
class StepRun:
    """What one step's load produced, before any evaluation."""

    records: list[Record] = field(default_factory=list)
    t_start: float = 0.0
    t_window_start: float = 0.0
    t_window_end: float = 0.0
    t_end: float = 0.0
    stats: ClientStats = field(default_factory=ClientStats)
    error_burst: bool = False
    aborted: str | None = None  # why the step ended early (user stop, engine died, …)
    client_failure: str | None = None  # the client itself could not measure on (a dead worker, a crashed task)
    counter_next: int = 0
    autoscale: dict[str, Any] | None = None  # workers that ran and why any were added (kvtui.load.autoscale)


class LoadGenerator:
    """Owns the worker processes for a run; `run_step` drives one step through its phases."""

    def __init__(self, cfg: WorkerConfig, processes: int = 1, scaler: AutoScaler | None = None):
        self.cfg = cfg
        self.n = max(1, processes)
        self.procs: list[mp.process.BaseProcess] = []
        self.conns: list[Connection] = []
        self.counter = 0
        # With a scaler the pool grows by itself (before a step, or in its warm-up) up to its max.
        self.scaler = scaler
        if scaler is not None:
            self.n = min(self.n, scaler.max_workers)

    def start(self, timeout_s: float = 60.0) -> None:
        ctx = mp.get_context("spawn")  # no fork: the parent may hold threads (NVML, UI)
        for i in range(self.n):
            parent, child = ctx.Pipe(duplex=True)
            c = WorkerConfig(**{**asdict(self.cfg), "index": i, "workers": self.n})
            p = ctx.Process(target=worker_main, args=(child, c), name=f"kvtui-load-{i}", daemon=True)
            p.start()
            child.close()
            if p.pid:
                reaper.register_pid(p.pid, f"kvtui load generator {i}")
            self.procs.append(p)
            self.conns.append(parent)
        deadline = time.monotonic() + timeout_s
        for conn, p in zip(self.conns, self.procs):
            left = max(0.1, deadline - time.monotonic())
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
        on_status: Callable[[dict[str, Any]], None] | None = None,
        should_stop: Callable[[], str | None] | None = None,
    ) -> StepRun:
        """Warm-up (≥ warmup_s and every slot finished one request), the window, the held tail, stop.

        A time window stays open until `p.min_window_requests` have started in it (the SLO's
        percentiles need them), but never longer than `p.max_window_factor` × window_s.
        """
        run = StepRun()
        sc = self.scaler
        if sc is not None:
            sc.new_step()
            want = sc.before_step(self.n, p.load)
            if want > self.n:
                self.resize(want)
        while True:
            grow = self._attempt(p, run, on_records, on_status, should_stop)
            if not grow:
                break
            # A worker neared its capacity in the warm-up: nothing was measured yet; the step
            # starts again, warm-up included, on a larger pool.
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
        on_status: Callable[[dict[str, Any]], None] | None,
        should_stop: Callable[[], str | None] | None,
    ) -> tuple[int, list[dict[str, Any]]] | None:
        """One try at the step; (workers wanted, the workers' stop stats) when the warm-up asked
        for a larger pool (the step is then measured again), else None with `run` filled."""
        mode, step, load, closed = p.mode, p.step, p.load, p.closed
        warmup_s, window_s, window_requests = p.warmup_s, p.window_s, p.window_requests
        window_timeout_s, min_window_requests, max_window_factor = (p.window_timeout_s, p.min_window_requests,
                                                                    p.max_window_factor)
        arrival, burst_size, max_error_burst = p.arrival, p.burst_size, p.max_error_burst
        n = self.n
        grow_to = 0
        meter = WorkerMeter() if self.scaler is not None else None
        if closed:
            shares = [int(load) // n + (1 if i < int(load) % n else 0) for i in range(n)]
        else:
            shares = [load / n] * n
        stagger = min(2.0, max(0.2, warmup_s / 2))
        specs = [
            StepSpec(mode, step, float(s), closed, self.counter, arrival, burst_size, stagger, max_error_burst)
            for s in shares
        ]
        run.t_start = time.monotonic()
        active = [i for i, s in enumerate(shares) if s > 0]
        if meter is not None:
            meter.reset([self.procs[i].pid or 0 for i in active])
        status: dict[int, dict[str, Any]] = {}
        stopped: dict[int, dict[str, Any]] = {}
        for i in active:
            try:
                self.conns[i].send(("step", specs[i]))
            except (BrokenPipeError, OSError):  # the worker died between steps
                stopped[i] = {}
                run.client_failure = run.aborted = "a load-generator process died between steps"
        phase = "warmup"
        stop_sent = False
        conns = {self.conns[i]: i for i in active}
        while len(stopped) < len(active):
            ready = wait(list(c for c, i in conns.items() if i not in stopped), timeout=0.05)
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
                    run.records.extend(recs)
                    if meter is not None:
                        pos = active.index(i) if i in active else -1
                        for r in recs:
                            meter.add_dispatch(pos, r.dispatch_delay)
                    if on_records:
                        on_records(recs)
                elif kind == "status":
                    status[i] = msg[1]
                elif kind == "stopped":
                    stopped[i] = msg[1]
                elif kind == "fatal":
                    stopped[i] = {}
                    run.aborted = f"load generator failed: {msg[1]}"
                    run.client_failure = run.client_failure or str(msg[1])
            now = time.monotonic()
            if stop_sent:
                continue
            agg = sum_status(status, active)
            if agg["client_failure"] and not run.client_failure:
                run.client_failure = agg["client_failure"]
                run.aborted = run.aborted or f"load generator failed: {run.client_failure}"
            if on_status:
                on_status({**agg, "phase": phase, "elapsed_s": now - run.t_start})
            reason = should_stop() if should_stop else None
            if reason or agg["error_burst"] or run.aborted:
                run.aborted = run.aborted or reason or None
                run.error_burst = bool(agg["error_burst"])
                if phase == "window":
                    run.t_window_end = now
                self._stop([i for i in active if i not in stopped])
                stop_sent = True
                continue
            if phase == "warmup" and meter is not None and self.scaler is not None:
                # Only a pool whose every worker has a share can be short of workers.
                want = self.scaler.during_warmup(n, meter) if len(active) == n else n
                if want > n:
                    grow_to = want
                    self._stop(active)
                    stop_sent = True
                    continue
            if phase == "warmup":
                # Warm = every slot has finished a request at this load (one full E2E), as the
                # DESIGN asks; window_timeout_s only caps that wait (a slot whose requests keep
                # failing never warms). A zero cap once meant "do not wait" — and the H200 run's
                # windows opened on the first wave of sends, not in steady state.
                warm = agg["warm_slots"] >= (int(load) if closed and p.warm_all_slots else 1)
                cap = window_timeout_s if window_timeout_s > 0 else float("inf")
                if now - run.t_start >= warmup_s and (warm or now - run.t_start >= warmup_s + cap):
                    phase = "window"
                    run.t_window_start = time.monotonic()
                    self._send_all(active, ("phase", "window"))
            elif phase == "window":
                elapsed = now - run.t_window_start
                by_time = window_requests <= 0 and elapsed >= window_s and (
                    agg["window_started"] >= min_window_requests or elapsed >= window_s * max_window_factor
                )
                by_count = window_requests > 0 and agg["window_started"] >= window_requests
                if by_time or by_count:
                    phase = "tail"
                    run.t_window_end = time.monotonic()
                    self._send_all(active, ("phase", "tail"))
            elif phase == "tail":
                # Only statuses sent after the worker saw "tail" can prove the window is done.
                left = agg["window_no_first"] if p.tail == "first_token" else agg["window_inflight"]
                if all(status.get(i, {}).get("phase") == "tail" for i in active) and left == 0:
                    self._stop(active)
                    stop_sent = True
        if grow_to and not run.aborted:
            return grow_to, list(stopped.values())
        run.t_end = time.monotonic()
        if not run.t_window_end:
            run.t_window_end = run.t_end
        if not run.t_window_start:
            run.t_window_start = run.t_window_end
        run.stats = merge_stats(list(stopped.values()), n_workers=len(active))
        run.stats.stall_s = round(run.stats.stall_s, 3)
        self.counter += max([s.get("max_seq", 0) for s in stopped.values()] + [0]) * n + n
        run.counter_next = self.counter
        return None

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
        self._broadcast(("exit",))
        deadline = time.monotonic() + 5
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(2)
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
