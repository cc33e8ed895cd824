"""Offline fast mode: whole load steps in virtual time, no HTTP, no wall clock.

`simulate_step()` (a step from an idle server with its full tail: an open loop's steps, which have no
continuous protocol, and the prediction's pilot; a closed loop's measured steps are
kvtui.simulator.engine.continuous's) wraps a `SchedulerSim` in a virtual client that behaves like kvtui's real
one: closed loop (exactly N in flight, staggered starts, a finished request's slot sends
the next at once) or open loop (Poisson arrivals at R req/s, seeded; latency from the
intended send time). Phases as the real client marks them:

- "warmup" until warmup_s has passed *and* (closed loop) every slot completed a request;
- "window" for window_s seconds (or until window_requests requests have started);
- "tail" for requests sent after the window closed; load is held until every window
  request has finished, then the step ends and tail requests still in flight are cancelled
  (error "cancelled", aborted in the scheduler, so it is drained for the next step).

Token timing: a token is "received" at the end of the engine step that produced it;
ITL = gaps between a request's token-bearing steps; TPOT = (E2E − TTFT)/(out − 1).

`bench_serve()` replays `vllm bench serve --max-concurrency C --num-prompts P` (all
requests issued at t=0, a semaphore of C) and returns its summary figures; the calibration
fit and the tests compare those with the real bench JSONs.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from kvtui.core.arrivals import ArrivalGaps
from kvtui.core.phases import PhaseRules, Progress, StepPhases
from kvtui.core.record import Record
from kvtui.core.slots import stagger_at
from kvtui.simulator.engine.budget import StepBudget
from kvtui.simulator.engine.scheduler import SchedulerSim, SimRequest, SimStats

SampleFn = Callable[[int], tuple]  # counter -> (prompt_tokens, output_tokens[, block_hashes])


@dataclass
class SeriesPoint:
    t: float
    running: int
    waiting: int
    kv_usage: float
    preemptions_total: int
    generation_tokens_total: int
    prompt_tokens_total: int
    prefix_cache_queries_total: int
    prefix_cache_hits_total: int


@dataclass
class FastStepResult:
    records: list[Record]
    series: list[SeriesPoint]
    stats_before: SimStats
    stats_after: SimStats
    t_start: float = 0.0
    window_start: float | None = None
    window_end: float | None = None
    t_end: float = 0.0
    steps: int = 0  # engine iterations simulated
    limited_by: dict[str, int] = field(default_factory=dict)  # step-time term -> steps it dominated
    ended: str = ""  # StepBudget.ended: the run's stop or a bound cut the step short ("" it ran to its end)
    # What goes to the records file, where that differs from `records` (the continuous client: each
    # request once, when it ends, never a cut copy); None: `records` themselves.
    written: list[Record] | None = None
    # The continuous step's "births" cutoff (kvtui.core.window_stats.births_cutoff): None, every
    # window request counts for TPOT and E2E.
    t_births_end: float | None = None

    def to_write(self) -> list[Record]:
        return self.records if self.written is None else self.written

    def window_records(self) -> list[Record]:
        return [r for r in self.records if r.phase == "window"]


def _point(s: SchedulerSim) -> SeriesPoint:
    return SeriesPoint(
        t=s.now,
        running=len(s.running),
        waiting=len(s.waiting) + len(s.incoming),
        kv_usage=s.kv_usage(),
        preemptions_total=s.preemptions_total,
        generation_tokens_total=s.generation_tokens_total,
        prompt_tokens_total=s.prompt_tokens_total,
        prefix_cache_queries_total=s.pc_queries,
        prefix_cache_hits_total=s.pc_hits,
    )


def _unique_hashes(rng: random.Random, prompt: int, block_size: int) -> list[int]:
    base = rng.getrandbits(62) << 1  # ranges of consecutive ints from random bases never meet in practice
    return list(range(base, base + prompt // block_size))


def simulate_step(
    sched_factory: SchedulerSim | Callable[[], SchedulerSim],
    sample_request: SampleFn,
    load: float,
    closed: bool,
    warmup_s: float,
    window_s: float,
    window_requests: int = 0,
    seed: int = 0,
    mode_name: str = "",
    step_index: int = 0,
    *,
    stagger_s: float | None = None,
    id_prefix: str = "",
    counter_start: int = 0,
    request_timeout_s: float = 600.0,
    series_dt: float = 0.5,
    unique_prompts: bool = True,
    cancel_tail: bool = True,
    warm_wait_s: float | None = None,
    send_delay: Callable[[int], float] | None = None,
    budget: StepBudget | None = None,
    arrivals: Iterable[tuple[float, int]] | None = None,
    arrival: str = "poisson",
    burst_size: int = 8,
) -> FastStepResult:
    """Simulate one load step from an idle server, its tail held until every window request has
    finished. `load` = concurrency (closed) or req/s (open). A run measures an open loop's (rate)
    steps with it (they have no continuous protocol); a closed loop only for the prediction's pilot
    (kvtui.explore.prediction: a request duration where none is known yet): a closed loop's
    measured steps are kvtui.simulator.engine.continuous's (the classic protocol, each closed-loop step
    measured this way, was retired: issue 46).

    sample_request(counter) -> (prompt_tokens, output_tokens) or (…, block_hashes).
    Without hashes, prompts are unique (as kvtui's workload makes them).

    warm_wait_s: None (default) waits, after warmup_s, until every slot has finished a
    request; a number opens the window at warmup_s + warm_wait_s even if some slots have not
    (the real load generator's `window_timeout_s`; kvtui's real runs pass 0 there, so their
    window opens at warmup_s: pass 0 to replay one).

    send_delay(streams) -> seconds between a send and the request leaving the client, given
    how many requests the engine is running at that moment. None (default): the client sends
    at once. A replay of a real run passes that client's measured delay (bench/sim_vs_h200.py:
    kvtui's client before per-slot connections waited for its shared httpx pool).

    budget: the step's bounds and the run's stop (kvtui.simulator.engine.budget); a fresh default
    one when None. A step it ends is cut where it stood (in flight: cancelled), `ended` says why.

    arrivals: open loop, a trace replay's schedule (kvtui.io.scenario.trace.replay_arrivals) as
    (seconds after the step began, counter offset) pairs, read as far as the step goes, in place
    of the seeded arrivals; request counter_start + k samples the trace's row.

    arrival, burst_size: an open loop's spacing (`ramp.arrival`: poisson, bursty or constant), the
    gaps drawn by kvtui.core.arrivals as the live workers draw theirs."""
    budget = budget if budget is not None else StepBudget()
    s = sched_factory if isinstance(sched_factory, SchedulerSim) else sched_factory()
    rng = random.Random((seed * 1_000_003 + step_index) & 0xFFFFFFFF)
    hrng = random.Random(rng.getrandbits(64))
    bs = s.block_size
    t0 = s.now
    before = s.stats()
    if budget.refuse_load(load):  # never begun: no slot, no request
        return FastStepResult([], [_point(s)], before, before, t0, None, None, t0, ended=budget.ended)
    series: list[SeriesPoint] = [_point(s)]
    next_series = t0 + series_dt
    records: list[Record] = []
    live: dict[str, list] = {}  # rid -> [record, last_token_time, slot]
    counter = counter_start
    n = max(1, int(round(load))) if closed else 0
    if closed and stagger_s is None:
        stagger_s = min(1.0, warmup_s / 2) if warmup_s > 0 else 0.0
    sends: list[tuple[float, int]] = []  # heap of (send time, slot)
    if closed:
        for i in range(n):
            heapq.heappush(sends, (t0 + stagger_at(stagger_s or 0.0, i, n), i))
    else:
        if load <= 0:
            raise ValueError("open loop needs a rate > 0")
        if arrivals is not None:
            sched = iter(arrivals)
            nxt = next(sched, None)
            if nxt is not None:
                heapq.heappush(sends, (t0 + nxt[0], -2 - nxt[1]))
        else:
            gaps = ArrivalGaps(arrival, load, burst_size, rng)
            heapq.heappush(sends, (t0 + gaps.next(), -1))
    fe = s.cal.frontend_s_per_request
    ingest: deque = deque()  # (time it reaches the engine, SimRequest, record, slot), in order
    fe_free = t0
    slot_done = [False] * n
    slots_pending = n
    # The phases' rules (kvtui.core.phases, as every transport's): warm = every slot finished a request
    # (an open loop has none to wait for); warm_wait_s caps that wait; no least count for the window.
    phases = StepPhases(PhaseRules(warmup_s, window_s, warm_cap_s=float("inf") if warm_wait_s is None else warm_wait_s,
                               window_requests=max(0, window_requests)), t0)
    window_started = 0
    window_live = 0
    limits: dict[str, int] = {}
    steps = 0
    tokens = 0

    def phase_at(t: float) -> str:
        """The phase at `t` (a send's, or the scheduler's now): the window opens and closes here; the
        step ends only in the loop below, once the tail's window requests are done."""
        while phases.phase in ("warmup", "window") and phases.advance(t, Progress(warm=slots_pending == 0,
                                                                          window_started=window_started)):
            pass
        return phases.phase

    def send(t: float, slot: int) -> None:
        nonlocal counter, window_started, window_live
        sample = sample_request(counter)
        p, o = int(sample[0]), int(sample[1])
        hashes = sample[2] if len(sample) > 2 else (_unique_hashes(hrng, p,
                                                                   bs) if (unique_prompts and s.caching) else None)
        rid = f"{id_prefix}{counter}"
        counter += 1
        ph = phase_at(t)
        rec = Record(id=rid, mode=mode_name, step=step_index, load=load, phase=ph, t_intended=t, t_sent=t,
                     expected_prompt_tokens=p, expected_output_tokens=o)
        records.append(rec)
        if ph == "window":
            window_started += 1
            window_live += 1
            phase_at(t)  # a counted window closes on its last send: the next send is tail
        nonlocal fe_free
        if send_delay is not None:
            t += send_delay(len(s.running))
        t_in = (t if t > fe_free else fe_free) + fe
        fe_free = t_in
        ingest.append((t_in, SimRequest(rid, p, o, hashes), rec, slot))

    def admit(t_now: float) -> None:
        nonlocal window_live
        while ingest and ingest[0][0] <= t_now:
            _t, req, rec, slot = ingest.popleft()
            try:
                s.add(req)
            except ValueError as e:  # too long for max_model_len: what vLLM answers with HTTP 400
                rec.status, rec.error, rec.http_status, rec.detail = "error", "http_4xx", 400, str(e)[:200]
                if rec.phase == "window":
                    window_live -= 1
                if closed:
                    heapq.heappush(sends, (t_now + 0.01, slot))  # the client moves on to its next request
                continue
            live[req.rid] = [rec, None, slot]

    while True:
        if budget.over(len(records), tokens, steps):
            break
        # dispatch every send due by now (a request sent mid-step joins at the next step)
        while sends and sends[0][0] <= s.now:
            t, slot = heapq.heappop(sends)
            if slot <= -2:  # a trace replay: the schedule's next arrival, its counter from the schedule
                nxt = next(sched, None)
                if nxt is not None:
                    heapq.heappush(sends, (t0 + nxt[0], -2 - nxt[1]))
                counter = counter_start + (-2 - slot)
                slot = -1
            elif not closed:
                heapq.heappush(sends, (t + gaps.next(), -1))
            send(t, slot)
        admit(s.now)
        if phases.phase != "warmup":
            phase_at(s.now)  # closes a timed window
            if phases.phase == "tail" and phases.advance(s.now, Progress(window_in_flight=window_live)) == "end":
                break
        if not s.has_work():
            if ingest:
                s.idle_until(ingest[0][0])
                continue
            if not sends:
                break
            s.idle_until(sends[0][0])
            if phases.phase == "warmup":
                phase_at(s.now)
            continue
        out = s.step()
        steps += 1
        tokens += len(out.tokens)
        limits[out.limited_by] = limits.get(out.limited_by, 0) + 1
        t = s.now
        for rid in out.tokens:
            ent = live[rid]
            rec = ent[0]
            last = ent[1]
            if last is None:
                rec.t_first = t
            else:
                rec.itl.append(t - last)
            ent[1] = t
        for rid in out.finished:
            rec, last, slot = live.pop(rid)
            rec.t_last = last
            rec.prompt_tokens = rec.expected_prompt_tokens
            rec.output_tokens = len(rec.itl) + 1
            if rec.phase == "window":
                window_live -= 1
            if closed:
                if not slot_done[slot]:
                    slot_done[slot] = True
                    slots_pending -= 1
                heapq.heappush(sends, (t, slot))
        if phases.phase == "warmup":
            phase_at(t)
        # timeouts: oldest first (dict order = send order)
        if live:
            for rid in list(live)[:8]:
                rec = live[rid][0]
                if t - rec.t_intended <= request_timeout_s:
                    break
                rec, last, slot = live.pop(rid)
                rec.status, rec.error = "error", "timeout"
                rec.detail = f"no end of stream within {request_timeout_s:g} s"
                s.abort(rid)
                if rec.phase == "window":
                    window_live -= 1
                if closed:
                    heapq.heappush(sends, (t, slot))
        if t >= next_series:
            series.append(_point(s))
            next_series = t + series_dt
    # end of step: cancel what is still in flight (tail, or warm-up stragglers)
    t_end = s.now
    for _t, _req, rec, _slot in ingest:
        rec.status, rec.error, rec.detail = "error", "cancelled", "the step ended while in flight"
    ingest.clear()
    for rid, (rec, last, slot) in list(live.items()):
        if cancel_tail or budget.ended:  # a step cut short finishes nothing more
            rec.status, rec.error, rec.detail = "error", "cancelled", "the step ended while in flight"
            s.abort(rid)
    if not cancel_tail and not budget.ended:
        while s.has_work():
            out = s.step()
            for rid in out.tokens:
                ent = live[rid]
                if ent[1] is None:
                    ent[0].t_first = s.now
                else:
                    ent[0].itl.append(s.now - ent[1])
                ent[1] = s.now
            for rid in out.finished:
                rec, last, _ = live.pop(rid)
                rec.t_last, rec.prompt_tokens, rec.output_tokens = last, rec.expected_prompt_tokens, len(rec.itl) + 1
    series.append(_point(s))
    # A timed window's end is its planned one (start + window_s), also where a bound cut the step
    # before it; a counted one's, its last send.
    window_start = phases.t_window_start
    window_end = phases.t_window_end if window_requests > 0 else (
        None if window_start is None else window_start + window_s)
    return FastStepResult(records, series, before, s.stats(), t0, window_start, window_end, t_end, steps, limits,
                          ended=budget.ended)


# --- summaries ---------------------------------------------------------------------------------
def percentile(xs: Sequence[float], q: float) -> float:
    """numpy's default (linear) percentile, as vllm bench serve computes it."""
    if not xs:
        return float("nan")
    v = sorted(xs)
    k = (len(v) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def summarize(records: Sequence[Record], duration_s: float) -> dict[str, float]:
    """vllm-bench-style figures (ms) over ok records; throughput over `duration_s`."""
    ok = [r for r in records if r.ok and r.t_first is not None]
    ttft = [t * 1e3 for r in ok if (t := r.ttft) is not None]
    tpot = [r.tpot * 1e3 for r in ok if r.tpot is not None]
    itl = [g * 1e3 for r in ok for g in r.itl]
    e2e = [t * 1e3 for r in ok if (t := r.e2e) is not None]  # a record cut before its last chunk has none
    out_tok = sum(r.output_tokens or 0 for r in ok)
    in_tok = sum(r.prompt_tokens or 0 for r in ok)
    d = max(duration_s, 1e-9)
    res = {
        "completed": len(ok),
        "duration": duration_s,
        "output_throughput": out_tok / d,
        "total_token_throughput": (out_tok + in_tok) / d,
        "request_throughput": len(ok) / d,
    }
    for name, xs in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2e)):
        res[f"mean_{name}_ms"] = _mean(xs)
        for q in (50, 90, 99):
            res[f"p{q}_{name}_ms"] = percentile(xs, q)
        res[f"median_{name}_ms"] = res[f"p50_{name}_ms"]
    return res


def bench_serve(
    sched: SchedulerSim,
    num_prompts: int,
    concurrency: int,
    input_len: int,
    output_len: int,
    hashes: Callable[[int], list[int] | None] | None = None,
    id_prefix: str = "b",
) -> tuple[dict[str, float], list[Record]]:
    """`vllm bench serve --max-concurrency C --num-prompts P --request-rate inf --ignore-eos`.

    `hashes(i)` gives prompt i's block hashes (to replay which prompts the prefix cache had
    seen); None: unique prompts. Returns (summary like the bench JSON, records).
    """
    t0 = sched.now
    rng = random.Random(12345)
    records: list[Record] = []
    live: dict[str, list] = {}
    nxt = 0
    fe = sched.cal.frontend_s_per_request
    fe_free = t0
    ingest: deque = deque()

    def launch(t: float) -> None:
        nonlocal nxt, fe_free
        i = nxt
        nxt += 1
        rid = f"{id_prefix}{i}"
        h = hashes(i) if hashes else (_unique_hashes(rng, input_len, sched.block_size) if sched.caching else None)
        rec = Record(id=rid, mode="", step=0, load=concurrency, phase="window", t_intended=t, t_sent=t,
                     expected_prompt_tokens=input_len, expected_output_tokens=output_len)
        records.append(rec)
        live[rid] = [rec, None]
        fe_free = (t if t > fe_free else fe_free) + fe
        ingest.append((fe_free, SimRequest(rid, input_len, output_len, h)))

    for _ in range(min(concurrency, num_prompts)):
        launch(t0)
    while sched.has_work() or ingest:
        while ingest and ingest[0][0] <= sched.now:
            sched.add(ingest.popleft()[1])
        if not sched.has_work():
            sched.idle_until(ingest[0][0])
            continue
        out = sched.step()
        t = sched.now
        for rid in out.tokens:
            ent = live[rid]
            if ent[1] is None:
                ent[0].t_first = t
            else:
                ent[0].itl.append(t - ent[1])
            ent[1] = t
        for rid in out.finished:
            rec, last = live.pop(rid)
            rec.t_last = last
            rec.prompt_tokens = input_len
            rec.output_tokens = len(rec.itl) + 1
            if nxt < num_prompts:
                launch(t)
    return summarize(records, sched.now - t0), records
