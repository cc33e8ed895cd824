"""The load generator: worker processes that send the streams, and the parent that steers them.

Why processes: a chart redraw or a JSON journal write in the controller's process would
delay chunk reads and inflate every latency measured there. Each worker runs its own
asyncio loop and aiohttp sessions; the parent only sends phase changes and receives records.

Protocol over a `multiprocessing.Pipe` (pickled tuples):
  parent → worker: ("step", spec) ("phase", "window"|"tail") ("stop",) ("exit",)
  worker → parent: ("ready",) ("records", [dict]) ("status", dict) ("stopped", dict) ("fatal", str)
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import random
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

from kvtui.engines import reaper
from kvtui.load.records import Record

_STATUS_EVERY = 0.2  # seconds between status/records messages from a worker


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


def _runq_wait_s() -> float | None:
    """Seconds this thread has waited on a run queue since it started (Linux), else None."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(0.0, b - a)


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


# ----------------------------------------------------------------------------- worker side


class _Worker:
    def __init__(self, conn: Connection, cfg: WorkerConfig):
        from kvtui.load.workload import PromptFactory, TokenSpace
        from kvtui.scenario.schema import Length, Workload

        self.conn = conn
        self.cfg = cfg
        wd = dict(cfg.workload)
        wd["prompt_tokens"] = Length(**wd["prompt_tokens"])
        wd["output_tokens"] = Length(**wd["output_tokens"])
        self.workload = Workload(**wd)
        self.space = TokenSpace(**cfg.space)
        self.factory = PromptFactory(self.workload, self.space, cfg.max_model_len, cfg.salt, cfg.seed)
        self.chat = self.workload.api == "chat"
        self.url = cfg.base_url.rstrip("/") + ("/v1/chat/completions" if self.chat else "/v1/completions")
        # Open loop: one keep-alive client per request in flight, kept across steps, closed at exit.
        self.idle_clients: list = []
        self.reset()

    def reset(self) -> None:
        self.phase = "warmup"
        self.stopping = False
        self.pending: list[Record] = []
        self.tasks: set[asyncio.Task] = set()
        self.seq = 0
        self.inflight = 0
        self.window_inflight = 0
        self.window_started = 0
        self.completed = 0
        self.sent = 0
        self.chunks = 0
        self.warm_slots: set[int] = set()
        self.consecutive_errors = 0
        self.error_burst = False
        self.lags: list[float] = []
        self.dispatch: list[float] = []
        self.capped = 0
        self.spec: StepSpec | None = None

    # -- messaging -----------------------------------------------------------------------
    def send(self, msg: tuple) -> None:
        try:
            self.conn.send(msg)
        except (BrokenPipeError, OSError):
            os._exit(0)  # the parent is gone: nothing to report to

    def flush(self) -> None:
        if self.pending:
            batch, self.pending = self.pending, []
            self.send(("records", [r.__dict__ for r in batch]))
        self.send(
            (
                "status",
                {
                    "phase": self.phase,
                    "inflight": self.inflight,
                    "window_inflight": self.window_inflight,
                    "window_started": self.window_started,
                    "warm_slots": len(self.warm_slots),
                    "completed": self.completed,
                    "sent": self.sent,
                    "error_burst": self.error_burst,
                },
            )
        )

    # -- one request ---------------------------------------------------------------------
    async def request(self, counter: int, t_intended: float, slot: int, closed: bool, conv=None, client=None) -> Record:
        from kvtui.load.client import StreamClient, stream_request
        from kvtui.load.workload import request_body

        spec = self.spec
        own = None
        if client is None:
            # Open loop (a closed-loop slot brings its own): a client (one keep-alive connection)
            # per request in flight, from an idle list, not one shared pool: at hundreds in
            # flight the pool's ConnectionNotAvailable herd stalled a 800 req/s step for minutes
            # (bench/dispatch_honesty.py).
            own = self.idle_clients.pop() if self.idle_clients else StreamClient(self.cfg.request_timeout_s, self.cfg.headers)
            client = own
        assert spec is not None and client is not None
        prompt = self.factory.build(counter, conv)
        rec = Record(
            id=f"{self.cfg.salt:08x}-{counter}",
            mode=spec.mode,
            step=spec.step,
            load=spec.load * self.cfg.workers if not closed else spec.load,
            phase=self.phase,
            t_intended=t_intended,
            t_sent=0.0,
            expected_prompt_tokens=prompt.prompt_tokens or None,
            expected_output_tokens=prompt.max_tokens,
            worker=self.cfg.index,
            turn=conv.turn if conv is not None else 0,
            conversation=conv.cid if conv is not None else None,
        )
        counted = rec.phase == "window"
        self.inflight += 1
        self.sent += 1
        if counted:
            self.window_inflight += 1
            self.window_started += 1
        body = request_body(prompt, self.cfg.model, self.workload)
        text = ""
        try:
            text = await stream_request(
                client, self.url, body, rec, self.cfg.request_timeout_s, collect_text=conv is not None and self.chat
            )
        except asyncio.CancelledError:
            pass  # stream_request marked it cancelled
        finally:
            if own is not None:
                self.idle_clients.append(own)
            self.inflight -= 1
            if counted:
                self.window_inflight -= 1
            self.completed += 1
            self.dispatch.append(rec.dispatch_delay)
            if closed:
                # Closed loop: latency from the send, as vLLM's client measures; the slot's
                # own turnaround stays visible as dispatch_delay.
                rec.t_intended = rec.t_sent or rec.t_intended
            self.chunks += (len(rec.itl) + 1) if rec.t_first is not None else 0
            self.pending.append(rec)
            if rec.ok:
                self.consecutive_errors = 0
                self.warm_slots.add(slot)
            elif rec.error != "cancelled":
                self.consecutive_errors += 1
                if self.consecutive_errors >= spec.max_error_burst:
                    self.error_burst = True
        if conv is not None and rec.ok:
            self.factory.extend_conversation(conv, prompt, text, rec.output_tokens or 0)
        return rec

    def next_counter(self) -> int:
        assert self.spec is not None
        c = self.spec.counter_base + self.seq * self.cfg.workers + self.cfg.index
        self.seq += 1
        return c

    async def slot(self, i: int, delay: float) -> None:
        from kvtui.load.client import StreamClient
        from kvtui.load.workload import Conversation

        # Each closed-loop slot keeps its own keep-alive connection, as one user would. One shared
        # httpx pool made requests wait for a connection: when many slots finish in the same engine
        # step, httpcore hands every queued request the same idle connection and all but one retry
        # (2.5 s p50 to send the 2nd request of 64 slots; bench/loadgen_capacity.py, docs/BENCHMARKS.md).
        client = StreamClient(self.cfg.request_timeout_s, self.cfg.headers)
        try:
            await asyncio.sleep(delay)
            turns = self.workload.turns
            conv = None
            # After an error burst the step is over: sending on until the controller's next poll
            # would only feed a failing server more requests (and spread the burst over the steps after).
            while not self.stopping and not self.error_burst:
                if turns > 1 and (conv is None or conv.turn >= turns):
                    conv = Conversation(cid=f"{self.cfg.salt:08x}-c{self.cfg.index}-{i}-{self.seq}")
                c = self.next_counter()
                await self.request(c, time.monotonic(), i, True, conv, client)
        finally:
            await asyncio.shield(client.aclose())

    async def arrivals(self, rate: float, rng: random.Random) -> None:
        spec = self.spec
        assert spec is not None
        t = time.monotonic()
        k = 0
        while not self.stopping:
            if spec.arrival == "constant":
                gap = 1.0 / rate
            elif spec.arrival == "bursty":
                gap = rng.expovariate(rate / spec.burst_size) if k % spec.burst_size == 0 else 0.0
            else:
                gap = rng.expovariate(rate)
            t += gap
            k += 1
            now = time.monotonic()
            if t > now:
                await asyncio.sleep(t - now)
            if self.stopping or self.error_burst:
                break
            if self.inflight >= spec.max_inflight:
                self.capped += 1
                continue
            c = self.next_counter()
            task = asyncio.create_task(self.request(c, t, k, False))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def lag_monitor(self) -> None:
        while not self.stopping:
            t0 = time.monotonic()
            await asyncio.sleep(0.05)
            self.lags.append(time.monotonic() - t0 - 0.05)

    async def reporter(self) -> None:
        while not self.stopping:
            await asyncio.sleep(_STATUS_EVERY)
            self.flush()

    # -- a step --------------------------------------------------------------------------
    async def run_step(self, spec: StepSpec, commands: asyncio.Queue) -> None:
        self.reset()
        self.spec = spec
        cpu0, wall0, runq0 = time.process_time(), time.monotonic(), _runq_wait_s()
        n_slots = int(round(spec.load)) if spec.closed else 0
        aux = [asyncio.create_task(self.lag_monitor()), asyncio.create_task(self.reporter())]
        rng = random.Random(self.cfg.seed * 1_000_003 + spec.step * 101 + self.cfg.index)
        if spec.closed:
            for i in range(n_slots):
                delay = spec.stagger_s * i / max(1, n_slots)
                task = asyncio.create_task(self.slot(i, delay))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
        elif spec.load > 0:
            aux.append(asyncio.create_task(self.arrivals(spec.load, rng)))
        while True:
            cmd = await commands.get()
            if cmd[0] == "phase":
                self.phase = cmd[1]
                self.flush()
            elif cmd[0] in ("stop", "exit"):
                break
        self.stopping = True
        for t in list(self.tasks):
            t.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        for t in aux:
            t.cancel()
        await asyncio.gather(*aux, return_exceptions=True)
        idle, self.idle_clients = self.idle_clients, []
        await asyncio.gather(*(c.aclose() for c in idle), return_exceptions=True)
        self.flush()
        stats = {
            "sent": self.sent,
            "chunks": self.chunks,
            "cpu_s": time.process_time() - cpu0,
            "wall_s": time.monotonic() - wall0,
            "lags": self.lags,
            "dispatch": self.dispatch,
            "inflight_capped": self.capped,
            "max_seq": self.seq,
            "runq_wait_s": _delta(runq0, _runq_wait_s()),
        }
        self.send(("stopped", stats))
        if cmd[0] == "exit":
            raise SystemExit(0)

    async def main(self) -> None:
        loop = asyncio.get_running_loop()
        commands: asyncio.Queue = asyncio.Queue()

        def readable() -> None:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                msg = ("exit",)  # the parent died or closed the pipe: stop at once
                loop.remove_reader(self.conn.fileno())
            commands.put_nowait(msg)

        loop.add_reader(self.conn.fileno(), readable)
        await _prewarm()
        self.send(("ready",))
        try:
            while True:
                cmd = await commands.get()
                if cmd[0] == "step":
                    await self.run_step(cmd[1], commands)
                elif cmd[0] == "exit":
                    break
        finally:
            for c in self.idle_clients:
                await c.aclose()


async def _prewarm() -> None:
    """Pay the HTTP stack's one-time costs before "ready", not inside the first step: the SSL
    context (~160 ms) and lazily imported modules blocked the loop of every mode's first step —
    up to 1 s of loop lag next to a busy vLLM on 2 cores, enough to mark the step
    client-limited (bench/agreement_vllm.py)."""
    from kvtui.load.client import StreamClient

    await StreamClient(5.0, {}).aclose()


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: the kernel SIGKILLs this worker when the thread that started it ends.

    The second layer behind the watchdog (kvtui/engines/watchdog.py) for a kvtui killed with
    SIGKILL. It fits here because a LoadGenerator lives and dies within one thread (a mode of
    the run); Linux only, best effort.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        parent = mp.parent_process()
        if parent is not None and os.getppid() != parent.pid:  # the parent died before prctl ran
            os._exit(1)
    except Exception:
        pass


def worker_main(conn: Connection, cfg: WorkerConfig) -> None:
    _die_with_parent()
    # Ctrl-C, a hang-up and a group SIGTERM (`timeout`, systemd) reach the whole process group:
    # the parent decides what stops (a worker dying first was reported as "a load-generator
    # process died" instead of the termination it was). The parent's death still ends it
    # (PR_SET_PDEATHSIG, the watchdog, EOF on its pipe).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        asyncio.run(_Worker(conn, cfg).main())
    except SystemExit:
        pass
    except BaseException as e:  # report, then die: the parent turns this into a client error
        try:
            conn.send(("fatal", f"{type(e).__name__}: {e}"))
        except Exception:
            pass
        raise


# ----------------------------------------------------------------------------- parent side


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
    counter_next: int = 0


class LoadGenerator:
    """Owns the worker processes for a run; `run_step` drives one step through its phases."""

    def __init__(self, cfg: WorkerConfig, processes: int = 1):
        self.cfg = cfg
        self.n = max(1, processes)
        self.procs: list[mp.process.BaseProcess] = []
        self.conns: list[Connection] = []
        self.counter = 0

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

    def _broadcast(self, msg: tuple) -> None:
        for c in self.conns:
            try:
                c.send(msg)
            except (BrokenPipeError, OSError):
                pass

    def run_step(
        self,
        mode: str,
        step: int,
        load: float,
        closed: bool,
        warmup_s: float,
        window_s: float,
        window_requests: int = 0,
        arrival: str = "poisson",
        burst_size: int = 8,
        max_error_burst: int = 20,
        on_records: Callable[[list[Record]], None] | None = None,
        on_status: Callable[[dict[str, Any]], None] | None = None,
        should_stop: Callable[[], str | None] | None = None,
        window_timeout_s: float = 0.0,
        min_window_requests: int = 0,
        max_window_factor: float = 20.0,
    ) -> StepRun:
        """Warm-up (≥ warmup_s and every slot finished one request), the window, the held tail, stop.

        A time window stays open until `min_window_requests` have started in it (the SLO's
        percentiles need them), but never longer than `max_window_factor` × window_s.
        """
        run = StepRun()
        n = self.n
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
        for i in active:
            self.conns[i].send(("step", specs[i]))
        status: dict[int, dict[str, Any]] = {}
        stopped: dict[int, dict[str, Any]] = {}
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
                    run.aborted = run.aborted or "a load-generator process died"
                    continue
                kind = msg[0]
                if kind == "records":
                    recs = [Record.from_dict(d) for d in msg[1]]
                    run.records.extend(recs)
                    if on_records:
                        on_records(recs)
                elif kind == "status":
                    status[i] = msg[1]
                elif kind == "stopped":
                    stopped[i] = msg[1]
                elif kind == "fatal":
                    stopped[i] = {}
                    run.aborted = f"load generator failed: {msg[1]}"
            now = time.monotonic()
            if stop_sent:
                continue
            agg = _sum_status(status, active)
            if on_status:
                on_status({**agg, "phase": phase, "elapsed_s": now - run.t_start})
            reason = should_stop() if should_stop else None
            if reason or agg["error_burst"] or run.aborted:
                run.aborted = run.aborted or reason or None
                run.error_burst = bool(agg["error_burst"])
                if phase == "window":
                    run.t_window_end = now
                self._stop(active)
                stop_sent = True
                continue
            if phase == "warmup":
                # Warm = every slot has finished a request at this load (one full E2E), as the
                # DESIGN asks; window_timeout_s only caps that wait (a slot whose requests keep
                # failing never warms). A zero cap once meant "do not wait" — and the H200 run's
                # windows opened on the first wave of sends, not in steady state.
                warm = agg["warm_slots"] >= (int(load) if closed else 1)
                cap = window_timeout_s if window_timeout_s > 0 else float("inf")
                if now - run.t_start >= warmup_s and (warm or now - run.t_start >= warmup_s + cap):
                    phase = "window"
                    run.t_window_start = time.monotonic()
                    for i in active:
                        self.conns[i].send(("phase", "window"))
            elif phase == "window":
                elapsed = now - run.t_window_start
                by_time = window_requests <= 0 and elapsed >= window_s and (
                    agg["window_started"] >= min_window_requests or elapsed >= window_s * max_window_factor
                )
                by_count = window_requests > 0 and agg["window_started"] >= window_requests
                if by_time or by_count:
                    phase = "tail"
                    run.t_window_end = time.monotonic()
                    for i in active:
                        self.conns[i].send(("phase", "tail"))
            elif phase == "tail":
                # Only statuses sent after the worker saw "tail" can prove the window is done.
                if all(status.get(i, {}).get("phase") == "tail" for i in active) and agg["window_inflight"] == 0:
                    self._stop(active)
                    stop_sent = True
        run.t_end = time.monotonic()
        if not run.t_window_end:
            run.t_window_end = run.t_end
        if not run.t_window_start:
            run.t_window_start = run.t_window_end
        run.stats = _merge_stats(list(stopped.values()), n_workers=len(active))
        self.counter += max([s.get("max_seq", 0) for s in stopped.values()] + [0]) * n + n
        run.counter_next = self.counter
        return run

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


def _sum_status(status: dict[int, dict[str, Any]], active: list[int]) -> dict[str, Any]:
    agg = {"inflight": 0, "window_inflight": 0, "window_started": 0, "warm_slots": 0, "completed": 0, "sent": 0, "error_burst": False}
    for i in active:
        s = status.get(i)
        if not s:
            continue
        for k in ("inflight", "window_inflight", "window_started", "warm_slots", "completed", "sent"):
            agg[k] += s.get(k, 0)
        agg["error_burst"] = agg["error_burst"] or s.get("error_burst", False)
    return agg


def _merge_stats(parts: list[dict[str, Any]], n_workers: int) -> ClientStats:
    lags = [x for p in parts for x in p.get("lags", [])]
    waits = [p["runq_wait_s"] for p in parts if p.get("runq_wait_s") is not None]  # the most-starved worker
    disp = [x for p in parts for x in p.get("dispatch", [])]
    return ClientStats(
        sent=sum(p.get("sent", 0) for p in parts),
        chunks=sum(p.get("chunks", 0) for p in parts),
        cpu_s=sum(p.get("cpu_s", 0.0) for p in parts),
        wall_s=max([p.get("wall_s", 0.0) for p in parts] + [0.0]),
        loop_lag_ms_p99=_pct(lags, 0.99) * 1000,
        loop_lag_ms_max=max(lags, default=0.0) * 1000,
        dispatch_ms_p50=_pct(disp, 0.50) * 1000,
        dispatch_ms_p95=_pct(disp, 0.95) * 1000,
        dispatch_ms_max=max(disp, default=0.0) * 1000,
        inflight_capped=sum(p.get("inflight_capped", 0) for p in parts),
        workers=max(1, n_workers),
        runq_wait_s=max(waits, default=None),
    )
