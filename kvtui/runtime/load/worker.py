"""The load generator's worker process: its own asyncio loop sends the streams of one share
of a step and reports records and status to the parent (kvtui.runtime.load.protocol).

Why a process: a chart redraw or a JSON journal write in the controller's process would
delay chunk reads and inflate every latency measured there.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import os
import random
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, Callable

from kvtui import clock
from kvtui.core.arrivals import ArrivalGaps
from kvtui.core.record import Record
from kvtui.core.slots import retire_order, stagger_at, tokens_left
from kvtui.runtime.load.protocol import STATUS_EVERY, StepSpec, WorkerConfig, WorkerStatus


def _runq_wait_s() -> float | None:
    """Seconds this thread has waited on a run queue since it started (Linux), else None."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def step_load(spec: StepSpec, workers: int) -> float:
    """The step's load a record carries: the whole step's, not this worker's share."""
    if spec.step_load:
        return spec.step_load
    return spec.load * workers if not spec.closed else spec.load  # a spec from before step_load


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(0.0, b - a)


class _Worker:
    def __init__(self, conn: Connection, cfg: WorkerConfig, trace_rows: Any = None):
        from kvtui.io.scenario.schema import Length, Workload
        from kvtui.runtime.load.workload import PromptFactory, TokenSpace

        self.conn = conn
        self.cfg = cfg
        wd = dict(cfg.workload)
        wd["prompt_tokens"] = Length(**wd["prompt_tokens"])
        wd["output_tokens"] = Length(**wd["output_tokens"])
        self.workload = Workload(**wd)
        self.space = TokenSpace(**cfg.space)
        self.factory = PromptFactory(self.workload, self.space, cfg.max_model_len, cfg.salt, cfg.seed,
                                     trace_rows=trace_rows)  # a trace's rows: read once, by the parent
        self.chat = self.workload.api == "chat"
        path = "/v1/chat/completions" if self.chat else "/v1/completions"
        self.url = cfg.base_url.rstrip("/") + path
        # Several replicas: this worker picks one per request (kvtui.runtime.load.dispatch); the picker
        # and its down list live across the steps of the mode.
        from kvtui.runtime.load.dispatch import ReplicaPicker

        self.replica_urls = [u.rstrip("/") + path for u, _ in cfg.replicas]
        self.replica_headers = [h for _, h in cfg.replicas]
        self.picker = ReplicaPicker(len(cfg.replicas), cfg.routing, cfg.index) if len(cfg.replicas) > 1 else None
        # Open loop: one keep-alive client per request in flight, kept across steps, closed at exit
        # (per replica: each has its own key).
        self.idle_clients: list = []
        self.idle_by_replica: dict[int, list] = {}
        self.gen = 0  # the step generation: a continued step is a new one over the same slots
        self.reset()

    def reset(self) -> None:
        self.stopping = False
        self.pending: list[Record] = []
        self.tasks: set[asyncio.Task] = set()
        self.aux: list[asyncio.Task] = []  # lag monitor, reporter, arrivals: cancelled when the slots end
        self.seq = 0
        self.inflight = 0
        self.live: dict[int, Record] = {}  # every request in flight (cut copies at a hold)
        # Closed loop: the slots running (index → task) and the ones the step wants (`active`); a slot
        # not in `active` finishes its request and ends (a continued step down retires the slots whose
        # requests are nearest their end, so the load is down to the new count soonest).
        self.slot_tasks: dict[int, asyncio.Task] = {}
        self.slot_rec: dict[int, Record] = {}  # closed loop: each slot's request in flight
        self.active: set[int] = set()
        self.n_slots = 0
        self.held = False  # the step ended with "hold": slots and requests go on, nothing is reported
        self.client_failure: str | None = None  # why this worker cannot measure on (ends the step, names the client)
        self.spec: StepSpec | None = None
        self.new_step_counts()

    def new_step_counts(self) -> None:
        """What each step counts afresh: a continued step keeps the slots, requests and counter only."""
        self.gen += 1
        self.phase = "warmup"
        self.window_inflight = 0
        self.window_started = 0
        self.window_live: dict[int, Record] = {}  # window requests in flight (their first token, for the tail)
        # The "births" tail rule (kvtui.core.births): the window requests' send times, reported in the
        # tail for the parent to choose the cutoff and to see which of those still stream.
        self.window_births: list[float] = []
        self.completed = 0
        self.sent = 0
        self.chunks = 0
        self.warm_slots: set[int] = set()
        self.consecutive_errors = 0
        self.error_burst = False
        self.client_errors = 0  # consecutive requests the client itself failed (kvtui's fault, not the server's)
        self.lags: list[float] = []
        self.stalled = 0.0  # the longest time the loop was stopped, not merely starved (lag_monitor)
        self.dispatch: list[float] = []
        self.capped = 0

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
        self.send(("status", WorkerStatus(
            step=self.spec.step if self.spec is not None else None,
            phase=self.phase,
            inflight=self.inflight,
            window_inflight=self.window_inflight,
            window_started=self.window_started,
            window_no_first=sum(1 for r in self.window_live.values() if r.t_first is None),
            # a closed slot stamps its request as it creates it, with no await between: every window
            # request sent after this status has a later send time
            t=clock.monotonic(),
            window_births=tuple(self.window_births) if self.phase == "tail" else (),
            window_live_births=tuple(r.t_intended for r in self.window_live.values()),
            # a continued step down: only the slots it keeps warm it
            warm_slots=len(self.warm_slots) if not self.spec or not self.spec.closed else
            sum(1 for i in self.warm_slots if i in self.active),
            excess=sum(1 for i in self.slot_tasks if i not in self.active),
            completed=self.completed,
            sent=self.sent,
            error_burst=self.error_burst,
            client_failure=self.client_failure,
        )))

    # -- one request ---------------------------------------------------------------------
    async def request(self, counter: int, t_intended: float, slot: int, closed: bool, conv=None, client=None,
                      clients: dict | None = None) -> Record:
        from kvtui.runtime.load.client import StreamClient, stream_request
        from kvtui.runtime.load.workload import request_body

        spec = self.spec
        own = None
        replica: int | None = None
        url = self.url
        idle = self.idle_clients
        if self.picker is not None:
            # Several replicas: each has its own URL and key, so its own keep-alive clients (a
            # closed-loop slot keeps one per replica in `clients`, open loop an idle list each).
            replica = self.picker.pick()
            url = self.replica_urls[replica]
            idle = self.idle_by_replica.setdefault(replica, [])
            if clients is not None:
                client = clients.get(replica)
                if client is None:
                    client = clients[replica] = StreamClient(self.cfg.request_timeout_s, self.replica_headers[replica])
        if client is None:
            # Open loop (a closed-loop slot brings its own): a client (one keep-alive connection)
            # per request in flight, from an idle list, not one shared pool: at hundreds in
            # flight the pool's ConnectionNotAvailable herd stalled a 800 req/s step for minutes
            # (bench/dispatch_honesty.py).
            headers = self.cfg.headers if replica is None else self.replica_headers[replica]
            own = idle.pop() if idle else StreamClient(self.cfg.request_timeout_s, headers)
            client = own
        assert spec is not None and client is not None
        try:
            prompt = self.factory.build(counter, conv)
        except Exception as e:  # a dataset row the factory cannot use ({"prompt": 5}): the client's error
            if own is not None:
                idle.append(own)
            if replica is not None and self.picker is not None:
                self.picker.release(replica)
            return self._client_error(counter, t_intended, closed,
                                      f"cannot build request {counter}: {type(e).__name__}: {e}")
        rec = Record(
            id=f"{self.cfg.salt:08x}-{counter}",
            mode=spec.mode,
            step=spec.step,
            load=step_load(spec, self.cfg.workers),
            phase=self.phase,
            t_intended=t_intended,
            t_sent=0.0,
            expected_prompt_tokens=prompt.prompt_tokens or None,
            expected_output_tokens=prompt.max_tokens,
            worker=self.cfg.index,
            turn=conv.turn if conv is not None else 0,
            conversation=conv.cid if conv is not None else None,
            replica=replica,
        )
        counted = rec.phase == "window"
        gen = self.gen  # a request of the held step that ends in the next one is not that step's to count
        self.inflight += 1
        self.live[id(rec)] = rec
        if closed:
            self.slot_rec[slot] = rec
        self.sent += 1
        if counted:
            self.window_inflight += 1
            self.window_started += 1
            self.window_live[id(rec)] = rec
            self.window_births.append(rec.t_intended)
        text = ""
        try:
            body = request_body(prompt, self.cfg.model, self.workload)
            text = await stream_request(
                client, url, body, rec, self.cfg.request_timeout_s, collect_text=conv is not None and self.chat
            )
        except asyncio.CancelledError:
            pass  # stream_request marked it cancelled
        except Exception as e:  # kvtui's own code failed: never a dead slot, a named client error
            rec.status, rec.error, rec.detail = "error", "client", f"{type(e).__name__}: {str(e)[:160]}"
        finally:
            if own is not None:
                idle.append(own)
            if replica is not None and self.picker is not None:
                self.picker.release(replica)
                if rec.error == "connect":
                    self.picker.mark_down(replica)  # refused: the others carry the load from now on
            self.inflight -= 1
            self.live.pop(id(rec), None)
            if closed and self.slot_rec.get(slot) is rec:
                del self.slot_rec[slot]
            if counted and gen == self.gen:
                self.window_inflight -= 1
                self.window_live.pop(id(rec), None)
            self.completed += 1
            self.dispatch.append(rec.dispatch_delay)
            if closed:
                # Closed loop: latency from the send, as vLLM's client measures; the slot's
                # own turnaround stays visible as dispatch_delay.
                rec.t_intended = rec.t_sent or rec.t_intended
            self.chunks += (len(rec.itl) + 1) if rec.t_first is not None else 0
            self.pending.append(rec)
            if rec.error == "client":
                self._count_client_error(rec.detail)
            elif rec.ok:
                self.consecutive_errors = 0
                self.client_errors = 0
                self.warm_slots.add(slot)
            elif rec.error != "cancelled":
                self.consecutive_errors += 1
                if self.consecutive_errors >= spec.max_error_burst:
                    self.error_burst = True
        if conv is not None and rec.ok:
            self.factory.extend_conversation(conv, prompt, text, rec.output_tokens or 0)
        return rec

    def _client_error(self, counter: int, t_intended: float, closed: bool, detail: str) -> Record:
        """A request the client could not even send, recorded as the client's error."""
        spec = self.spec
        assert spec is not None
        rec = Record(id=f"{self.cfg.salt:08x}-{counter}", mode=spec.mode, step=spec.step,
                     load=step_load(spec, self.cfg.workers), phase=self.phase,
                     t_intended=t_intended, t_sent=t_intended, status="error", error="client", detail=detail[:200],
                     worker=self.cfg.index)
        self.sent += 1
        self.completed += 1
        self.pending.append(rec)
        self._count_client_error(detail)
        return rec

    def _count_client_error(self, detail: str | None) -> None:
        # A burst of the client's own errors ends the step as the client's failure, named: it
        # says nothing about the server (out of file descriptors once read "limited by errors").
        self.client_errors += 1
        assert self.spec is not None
        if self.client_errors >= max(1, self.spec.max_error_burst) and self.client_failure is None:
            self.client_failure = f"{self.client_errors} client errors in a row: {detail}"

    def _watch(self, task: asyncio.Task) -> None:
        """A load task (slot, arrivals) that raised: the client failed, loudly (no 'Task exception
        was never retrieved' and a silently idle slot)."""
        self.tasks.discard(task)
        if task.cancelled():
            return
        e = task.exception()
        if e is not None and self.client_failure is None:
            self.client_failure = f"a load task failed: {type(e).__name__}: {str(e)[:160]}"

    def next_counter(self) -> int:
        assert self.spec is not None
        c = self.spec.counter_base + self.seq * self.cfg.workers + self.cfg.index
        self.seq += 1
        return c

    async def slot(self, i: int, delay: float) -> None:
        from kvtui.runtime.load.client import StreamClient
        from kvtui.runtime.load.workload import Conversation

        # Each closed-loop slot keeps its own keep-alive connection, as one user would. One shared
        # httpx pool made requests wait for a connection: when many slots finish in the same engine
        # step, httpcore hands every queued request the same idle connection and all but one retry
        # (2.5 s p50 to send the 2nd request of 64 slots; bench/loadgen_capacity.py, docs/BENCHMARKS.md).
        client = StreamClient(self.cfg.request_timeout_s, self.cfg.headers) if self.picker is None else None
        clients: dict | None = {} if self.picker is not None else None  # replica → this slot's client
        try:
            await asyncio.sleep(delay)
            turns = self.workload.turns
            conv = None
            # After an error burst the step is over: sending on until the controller's next poll
            # would only feed a failing server more requests (and spread the burst over the steps after).
            # A slot at or above the step's count (a continued step down) sends no other request.
            while not self.stopping and not self.error_burst and self.client_failure is None and i in self.active:
                if turns > 1 and (conv is None or conv.turn >= turns):
                    conv = Conversation(cid=f"{self.cfg.salt:08x}-c{self.cfg.index}-{i}-{self.seq}")
                c = self.next_counter()
                await self.request(c, clock.monotonic(), i, True, conv, client, clients)
        finally:
            if self.slot_tasks.get(i) is asyncio.current_task():
                del self.slot_tasks[i]
            mine = [client] if client is not None else list((clients or {}).values())
            await asyncio.shield(asyncio.gather(*(x.aclose() for x in mine), return_exceptions=True))

    async def arrivals(self, rate: float, rng: random.Random) -> None:
        spec = self.spec
        assert spec is not None
        t = clock.monotonic()
        k = 0
        gaps = ArrivalGaps(spec.arrival, rate, spec.burst_size, rng)  # the simulator's open loop draws the same
        while not self.stopping:
            t += gaps.next()
            k += 1
            if not await self._send_at(t, k, self.next_counter):
                break

    async def trace_arrivals(self) -> None:
        """A trace replay's open loop (`[ramp] load = "trace"`): the one schedule
        (kvtui.io.scenario.trace.replay_arrivals) at the step's speed-up factor (`step_load`: the whole
        step's, in wall seconds), this worker sending every `workers`-th arrival from its own index.
        Request counter = the aligned base + the arrival's index, so the prompt factory builds the
        row the schedule replays (its lengths and blocks)."""
        from kvtui.io.scenario.trace import aligned_counter, replay_arrivals

        spec = self.spec
        rows = self.factory.trace
        assert spec is not None and rows is not None
        workers, index = max(1, self.cfg.workers), self.cfg.index
        base = aligned_counter(spec.counter_base, len(rows))
        t0 = spec.start_at or clock.monotonic()
        for a in replay_arrivals(rows, spec.step_load or spec.load * workers):
            if a.k % workers != index:
                continue
            def counter(c: int = base + a.k) -> int:
                self.seq = (c - spec.counter_base) // workers + 1  # the parent's next base goes past c
                return c

            if not await self._send_at(t0 + a.at, a.k, counter):
                break

    async def _send_at(self, t: float, k: int, counter: Callable[[], int]) -> bool:
        """One open-loop arrival (a rate's or a trace's): wait for its scheduled time `t`, then send it
        (its request number from `counter`, taken only when it is sent), or count it capped where the
        in-flight cap is reached. False: the loop ends (a stop, an error burst, the client failed)."""
        spec = self.spec
        assert spec is not None
        now = clock.monotonic()
        if t > now:
            await asyncio.sleep(t - now)
        if self.stopping or self.error_burst or self.client_failure is not None:
            return False
        if self.inflight >= spec.max_inflight:
            self.capped += 1
            return True
        task = asyncio.create_task(self.request(counter(), t, k, False))
        self.tasks.add(task)
        task.add_done_callback(self._watch)
        return True

    async def lag_monitor(self) -> None:
        while not self.stopping:
            t0, q0 = clock.monotonic(), _runq_wait_s()
            await asyncio.sleep(0.05)
            lag = clock.monotonic() - t0 - 0.05
            self.lags.append(lag)
            if lag > 0.5:
                # Of a long lag, the part the loop was not even waiting for a CPU: the process was
                # stopped (Ctrl-Z, SIGSTOP, a VM pause). A starved CPU shows as run-queue wait
                # instead, and is client_limited's business (runq_wait_s), not a stall.
                waited = _delta(q0, _runq_wait_s()) or 0.0
                self.stalled = max(self.stalled, lag - waited)

    async def reporter(self) -> None:
        while not self.stopping:
            await asyncio.sleep(STATUS_EVERY)
            if not self.held:  # held: the parent is not reading (a full pipe would block this loop)
                self.flush()

    # -- a step --------------------------------------------------------------------------
    def start_slot(self, i: int, delay: float) -> None:
        task = asyncio.create_task(self.slot(i, delay))
        self.slot_tasks[i] = task
        self.tasks.add(task)
        task.add_done_callback(self._watch)

    async def run_step(self, spec: StepSpec, commands: asyncio.Queue) -> None:
        cpu0, wall0, runq0 = time.process_time(), clock.monotonic(), _runq_wait_s()
        if spec.continue_from_previous and spec.closed and self.held:
            self.continue_step(spec)
        else:
            if self.held:
                await self.end_all()  # the parent releases a held step first; this only makes sure
            self.start_step(spec)
        while True:
            cmd = await commands.get()
            if cmd[0] == "phase":
                self.phase = cmd[1]
                self.flush()
            elif cmd[0] in ("stop", "exit", "hold"):
                break
        if cmd[0] == "hold" and spec.closed:
            self.hold(self.stop_stats(cpu0, wall0, runq0))
            return
        await self.end_all()
        self.send(("stopped", self.stop_stats(cpu0, wall0, runq0)))
        if cmd[0] == "exit":
            raise SystemExit(0)

    def start_step(self, spec: StepSpec) -> None:
        """A step from no slots: every slot starts, staggered."""
        self.reset()
        self.spec = spec
        self.n_slots = int(round(spec.load)) if spec.closed else 0
        self.aux = [asyncio.create_task(self.lag_monitor()), asyncio.create_task(self.reporter())]
        rng = random.Random(self.cfg.seed * 1_000_003 + spec.step * 101 + self.cfg.index)
        if spec.closed:
            self.active = set(range(self.n_slots))
            for i in range(self.n_slots):
                self.start_slot(i, stagger_at(spec.stagger_s, i, self.n_slots))
        elif spec.load > 0:
            replay = spec.arrival == "trace" and self.factory.trace is not None
            arr = asyncio.create_task(self.trace_arrivals() if replay else self.arrivals(spec.load, rng))
            arr.add_done_callback(self._watch)
            self.aux.append(arr)

    def stop_stats(self, cpu0: float, wall0: float, runq0: float | None) -> dict:
        """The step's ("stopped"/"held", stats): what the client cost and lagged (ClientStats)."""
        return {"sent": self.sent, "chunks": self.chunks, "cpu_s": time.process_time() - cpu0,
                "wall_s": clock.monotonic() - wall0, "lags": self.lags, "dispatch": self.dispatch,
                "inflight_capped": self.capped, "max_seq": self.seq, "runq_wait_s": _delta(runq0, _runq_wait_s()),
                "stall_s": self.stalled}

    # -- continuous steps (kvtui.runtime.load.protocol: "hold", continue_from_previous, "release") ---------
    def hold(self, stats: dict) -> None:
        """The step ends but its slots go on: its records so far, then ("held", stats, cut copies of
        the requests in flight) — the cut copies are this step's view of them (tokens so far), for a
        window estimate; each request's own record comes when it ends, in a later step's messages."""
        self.held = True
        cuts = []
        closed = self.spec is not None and self.spec.closed
        for rec in self.live.values():
            c = copy.copy(rec)
            c.itl, c.flags = list(rec.itl), list(rec.flags)
            c.status, c.error, c.detail = "error", "cancelled", "carried into the next step"
            if closed:
                c.t_intended = c.t_sent or c.t_intended
            cuts.append(c.__dict__)
        self.flush()
        self.send(("held", stats, cuts))

    def continue_step(self, spec: StepSpec) -> None:
        """The next step from the held one's slots: min(old, new) keep going, the excess finish their
        request and end (`slot`'s loop), slots missing below the new count start (a step up, or a
        slot that ended while held), staggered. The counter goes on from the held step's base."""
        assert self.spec is not None
        self.spec = dataclasses.replace(spec, counter_base=self.spec.counter_base)
        self.held = False
        self.new_step_counts()
        self.n_slots = n = int(round(spec.load))
        keep = [i for i in self.active if i in self.slot_tasks]  # slots still sending
        if n <= len(keep):
            # A step down: the slots whose requests are nearest their end retire (an idle one first;
            # kvtui.core.slots). Over HTTP every request in flight counts as admitted.
            def left(i: int) -> int | None:
                rec = self.slot_rec.get(i)
                return None if rec is None else tokens_left(rec.expected_output_tokens, len(rec.itl),
                                                            rec.t_first is not None)

            self.active = set(retire_order((i, left(i), True) for i in keep)[len(keep) - n:])
            missing: list[int] = []
        else:
            free = (i for i in range(n + len(self.slot_tasks) + 1) if i not in self.slot_tasks)
            missing = [next(free) for _ in range(n - len(keep))]
            self.active = set(keep) | set(missing)
        for k, i in enumerate(missing):
            self.start_slot(i, stagger_at(spec.stagger_s, k, len(missing)))
        self.flush()  # what ended while held, and the in-flight count at the change

    async def end_all(self) -> None:
        """Cancel every request and load task (their records go into `pending`, sent by the flush)."""
        self.stopping = True
        self.held = False
        for t in list(self.tasks):
            t.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        for t in self.aux:
            t.cancel()
        await asyncio.gather(*self.aux, return_exceptions=True)
        self.aux = []
        idle, self.idle_clients = self.idle_clients, []
        for lst in self.idle_by_replica.values():
            idle += lst
        self.idle_by_replica = {}
        await asyncio.gather(*(c.aclose() for c in idle), return_exceptions=True)
        self.flush()

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
                elif cmd[0] == "release":  # a held step that is not continued: its requests are cancelled
                    was_held = self.held
                    if was_held:
                        await self.end_all()
                    self.send(("released", {"max_seq": self.seq, "held": was_held}))
                elif cmd[0] == "exit":
                    if self.held:
                        await self.end_all()
                    break
        finally:
            for c in self.idle_clients + [x for lst in self.idle_by_replica.values() for x in lst]:
                await c.aclose()


async def _prewarm() -> None:
    """Pay the HTTP stack's one-time costs before "ready", not inside the first step: the SSL
    context (~160 ms) and lazily imported modules blocked the loop of every mode's first step —
    up to 1 s of loop lag next to a busy vLLM on 2 cores, enough to mark the step
    client-limited (bench/agreement_vllm.py)."""
    from kvtui.runtime.load.client import StreamClient

    await StreamClient(5.0, {}).aclose()


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: the kernel SIGKILLs this worker when the thread that started it ends.

    The second layer behind the watchdog (kvtui/runtime/procs/watchdog.py) for a kvtui killed with
    SIGKILL. It fits here because a LoadGenerator lives and dies within one thread (a mode of
    the run); Linux only, best effort.
    """
    try:
        import ctypes
        import multiprocessing as mp

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        parent = mp.parent_process()
        if parent is not None and os.getppid() != parent.pid:  # the parent died before prctl ran
            os._exit(1)
    except Exception:
        pass


def worker_main(conn: Connection, cfg: WorkerConfig, trace_rows: Any = None) -> None:
    _die_with_parent()
    # Ctrl-C, a hang-up and a group SIGTERM (`timeout`, systemd) reach the whole process group:
    # the parent decides what stops (a worker dying first was reported as "a load-generator
    # process died" instead of the termination it was). The parent's death still ends it
    # (PR_SET_PDEATHSIG, the watchdog, EOF on its pipe).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        asyncio.run(_Worker(conn, cfg, trace_rows).main())
    except SystemExit:
        pass
    except BaseException as e:  # report, then die: the parent turns this into a client error
        try:
            conn.send(("fatal", f"{type(e).__name__}: {e}"))
        except Exception:
            pass
        raise
