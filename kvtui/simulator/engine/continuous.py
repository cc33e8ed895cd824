"""The continuous protocol's closed loop in virtual time (`kvtui run --fast`, ramp.protocol = "continuous").

One virtual client lives across the steps of a mode (kvtui.simulator.engine.fast's `simulate_step`
starts each step from an idle server instead):

- a step up adds slots to the requests already in flight (no drain, no ramp from zero), their
  first sends spread at the steady state's rate of starts (`StepPlan.stagger_s`,
  kvtui.core.protocol.ramp_for); a step down lets the excess slots finish their request without
  sending another, and the slots that retire are those whose requests are nearest their end;
- the window opens `warmup_s` after the last new slot sent, once the in-flight count is the new
  load (`settle` "time"); where no request duration was known to spread the starts over, it also
  waits, as the classic step, for every slot to finish a request at the new load ("turnover");
- every `look_s` from the window's start (through the tail too) a sequential test
  (kvtui.core.sequential) looks at the window's
  requests, cohort by cohort: only the requests sent before the latest time by which *every*
  window request had finished (or had its first token, for a TTFT-only SLO) count, so an early
  look never favours the quick ones. PASS or FAIL beyond doubt ends the step: the window is then
  that cohort's span (later starts become "tail");
- otherwise the window runs `window_s` and the load is held as the tail rule says (every window
  request finished; or its first token; or, "births", its first token and every one sent by one
  request's duration before the window's end finished: kvtui.core.window_stats.tail_rule);
- at the step's end the requests still in flight go on into the next step; the step keeps a cut
  copy of each (error "cancelled", its tokens so far) for its tokens/s. A drain (every request
  aborted, the server idle) happens only where asked: the mode's first step, an independent
  confirmation, a preemption storm.

Records and series come out as `FastStepResult`, evaluated like any other step.
"""

from __future__ import annotations

import copy
import heapq
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from kvtui.core.early_stop import preempted_why
from kvtui.core.looks import LookSchedule, decided_why
from kvtui.core.phases import PhaseRules, Progress, StepPhases
from kvtui.core.record import Record
from kvtui.core.samples import slo_samples
from kvtui.core.slots import retire_order, stagger_at, tokens_left
from kvtui.simulator.engine.budget import StepBudget
from kvtui.simulator.engine.fast import FastStepResult, SampleFn, _point, _unique_hashes
from kvtui.simulator.engine.scheduler import SchedulerSim, SimRequest


@dataclass
class StepPlan:
    load: float
    warmup_s: float
    window_s: float
    need: int  # window requests the SLO's percentiles need (never decided on fewer)
    drain_before: bool = False
    drain_why: str = ""
    tail: str = "full"  # kvtui.core.window_stats.tail_rule
    look_s: float = 1.0
    # (t into the window, {metric: samples ms}) -> True / False decided, None not yet
    look: Callable[[float, dict[str, list[float]]], bool | None] | None = None
    metrics: tuple[str, ...] = ("ttft", "tpot")
    max_window_factor: float = 20.0
    # How the new slots start (kvtui.core.protocol.ramp_for): None, the classic step's spread
    # (min(1 s, warmup_s / 2)) with the "turnover" wait; a number, spread over that many seconds.
    stagger_s: float | None = None
    settle: str = "turnover"  # "time" | "turnover" (module docstring)
    # The "births" tail rule: one request's duration (modelled s, kvtui.core.protocol.RampPlan
    # e2e_est_s); TPOT and E2E count the window requests sent by that long before the window's end
    # (kvtui.core.window_stats.births_cutoff). None: every window request (the whole tail).
    births_s: float | None = None
    # A preemption ends the step as soon as a window request was sent (the SLO allows none:
    # kvtui.core.protocol.preemption_decides), as the live load generator's `decided` does.
    stop_on_preemption: bool = False


@dataclass
class StepInfo:
    stopped_early: bool = False
    early_verdict: bool | None = None
    early_stop: dict[str, str] | None = None  # {"by", "why"} when the step stopped early
    drained: bool = False
    carried_in: int = 0  # requests in flight from the step before
    warmup_s: float = 0.0
    window_s: float = 0.0
    tail_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class ContinuousClient:
    """A closed loop of `load` slots over one scheduler, kept between steps."""

    def __init__(self, sched: SchedulerSim, sample: SampleFn, seed: int = 0, mode_name: str = "", id_prefix: str = "",
                 request_timeout_s: float = 600.0, series_dt: float = 0.5, unique_prompts: bool = True):
        self.s = sched
        self.sample = sample
        self.mode_name = mode_name
        self.prefix = id_prefix
        self.timeout = request_timeout_s
        self.series_dt = series_dt
        self.unique = unique_prompts
        self.hrng = random.Random(seed * 7919 + 1)
        self.live: dict[str, list[Any]] = {}  # rid -> [record, last token time, slot]
        self.ingest: deque = deque()
        self.sends: list[tuple[float, int]] = []
        self.slots = 0
        self.fe_free = sched.now

    def drain(self) -> int:
        """Abort everything in flight (the server goes idle); how many were cut."""
        n = len(self.live) + len(self.ingest)
        for rid in list(self.live):
            self.s.abort(rid)
        self.live.clear()
        self.ingest.clear()
        self.sends.clear()
        self.slots = 0
        return n

    def _retire_nearest_end(self, c: int) -> None:
        """A step down to `c` slots: the slots that retire (numbers ≥ c) are those whose requests
        are nearest their end, so the load is down to `c` soonest; the others keep their requests
        under the numbers below c. Requests not yet admitted are the furthest from their end."""
        def left(rec: Record) -> int:
            return tokens_left(rec.expected_output_tokens, len(rec.itl), rec.t_first is not None)

        owners: list[tuple[int, int | None, bool]] = [(ent[2], left(ent[0]), True) for ent in self.live.values()]
        owners += [(x[3], left(x[2]), False) for x in self.ingest]
        busy = {slot for slot, _, _ in owners}
        idle: list[tuple[int, int | None, bool]] = [(i, None, True) for i in range(self.slots) if i not in busy]
        # idle slots retire first (nothing to wait for), then the requests nearest their end (kvtui.core.slots)
        retire = retire_order(idle + owners)[: max(0, self.slots - c)]
        keep = [i for i in range(self.slots) if i not in set(retire)]
        renum = {old: new for new, old in enumerate(keep + retire)}
        for ent in self.live.values():
            ent[2] = renum[ent[2]]
        self.ingest = deque((t, req, rec, renum[slot]) for t, req, rec, slot in self.ingest)
        self.sends = [(t, renum[slot]) for t, slot in self.sends if slot in renum]
        heapq.heapify(self.sends)

    # -- one step ----------------------------------------------------------------------------
    def step(self, plan: StepPlan, index: int, counter: int,
             budget: StepBudget | None = None) -> tuple[FastStepResult, StepInfo, int]:
        """One step; `budget` bounds it and carries the run's stop (kvtui.simulator.engine.budget): a step
        it ends is cut where it stood, its requests in flight cancelled and not carried on."""
        budget = budget if budget is not None else StepBudget()
        s = self.s
        info = StepInfo()
        if budget.refuse_load(plan.load):  # never begun: no slot, no request
            return FastStepResult([], [_point(s)], s.stats(), s.stats(), s.now, None, None, s.now,
                                  ended=budget.ended), info, counter
        released: list[Record] = []
        if plan.drain_before:
            released = self.release()  # written once, under the step they were sent in
            info.drained = True
        t0 = s.now
        before = s.stats()
        pre0 = s.preemptions_total
        series = [_point(s)]
        next_series = t0 + self.series_dt
        records: list[Record] = []
        # The requests carried in keep the step and phase they were sent in (their record is written
        # once, when they end, as the live load generator does); this step sees them as its warm-up.
        carried: list[Record] = [ent[0] for ent in self.live.values()] + [x[2] for x in self.ingest]
        info.carried_in = len(carried)
        c = max(1, int(round(plan.load)))
        if c < self.slots:
            self._retire_nearest_end(c)
        new_slots = list(range(self.slots, c))
        if plan.stagger_s is not None:
            stagger = max(0.0, plan.stagger_s)
        else:
            stagger = min(1.0, plan.warmup_s / 2) if plan.warmup_s > 0 else 0.0
        busy = {ent[2] for ent in self.live.values()} | {x[3] for x in self.ingest}
        for k, i in enumerate(new_slots):
            heapq.heappush(self.sends, (t0 + stagger_at(stagger, k, len(new_slots)), i))
        for i in range(min(self.slots, c)):  # an old slot idle since the last step's end sends now
            if i not in busy and all(sl != i for _, sl in self.sends):
                heapq.heappush(self.sends, (t0, i))
        self.slots = c
        # From an idle server the window waits, as the classic step does, for every slot to finish
        # a request (one E2E: the batch's mix of positions is steady); a continued step's slots are.
        finished_slots: set[int] = set()
        # A step up waits for each *new* slot to finish a request too: their first requests are a
        # cohort born together, and until it has turned over once the batch holds too little
        # context (a linear ramp continued from 128 to 160 passed a TPOT target the classic step failed).
        # And so do the old slots: a request that began at the old load finishes under the new one
        # (with new slots only, the continued linear ramp passed 192 where the classic failed 160).
        turnover = plan.settle != "time"
        must_finish = set(range(c)) if turnover else set()
        # new slots whose first request has no first token yet (with "time", the window opens
        # warmup_s after the last new slot sent: the stagger is the steady state's rate already)
        waiting_first = set(new_slots) if turnover else set()
        # The phases' rules (kvtui.core.phases, as the live load generator's); the counts are this client's.
        ph = StepPhases(PhaseRules(plan.warmup_s, plan.window_s,
                                   warm_from_s=stagger if not turnover and new_slots else 0.0,
                                   min_window_requests=plan.need, max_window_factor=plan.max_window_factor,
                                   tail=plan.tail, births_s=plan.births_s), t0)
        looks: LookSchedule | None = None  # from the window's start (kvtui.core.looks)
        done_to = 0  # win[:done_to] have all finished (a request never unfinishes): the tail counts past them
        win: list[Record] = []
        cohort_end: float | None = None
        fe = s.cal.frontend_s_per_request
        state = {"counter": counter}

        def send(t: float, slot: int) -> None:
            smp = self.sample(state["counter"])
            p, o = int(smp[0]), int(smp[1])
            hashes = smp[2] if len(smp) > 2 else (_unique_hashes(self.hrng, p, s.block_size)
                                                  if (self.unique and s.caching) else None)
            rid = f"{self.prefix}{state['counter']}"
            state["counter"] += 1
            rec = Record(id=rid, mode=self.mode_name, step=index, load=plan.load, phase=ph.phase, t_intended=t,
                         t_sent=t, expected_prompt_tokens=p, expected_output_tokens=o)
            records.append(rec)
            if ph.phase == "window":
                win.append(rec)
            t_in = max(t, self.fe_free) + fe
            self.fe_free = t_in
            self.ingest.append((t_in, SimRequest(rid, p, o, hashes), rec, slot))

        def admit(now: float) -> None:
            while self.ingest and self.ingest[0][0] <= now:
                _t, req, rec, slot = self.ingest.popleft()
                try:
                    s.add(req)
                except ValueError as e:
                    rec.status, rec.error, rec.http_status, rec.detail = "error", "http_4xx", 400, str(e)[:200]
                    if slot < self.slots:
                        heapq.heappush(self.sends, (now + 0.01, slot))
                    continue
                self.live[req.rid] = [rec, None, slot]

        def cohort(first_token_only: bool) -> list[Record]:
            """The window requests sent before the first one still unfinished (or without a first token)."""
            out = []
            for r in win:
                if r.status == "ok" and (r.t_first is None if first_token_only else r.t_last is None):
                    break
                out.append(r)
            return out

        first_only = plan.tail == "first_token"

        def tail_progress() -> Progress:
            """The window requests' counts the tail rule reads (failed ones count as finished)."""
            nonlocal done_to
            while done_to < len(win) and (win[done_to].status != "ok" or win[done_to].t_last is not None):
                done_to += 1
            live = [r for r in win[done_to:] if r.status == "ok" and r.t_last is None]
            return Progress(window_started=len(win), window_in_flight=len(live),
                            window_no_first=sum(1 for r in live if r.t_first is None),
                            window_live_births=[r.t_intended for r in live],
                            # every send time only while the cutoff is still to decide: once per step,
                            # not at every engine step of the tail
                            window_births=[r.t_intended for r in win] if ph.needs_births else ())

        tokens = iterations = 0
        while not ph.ended:
            if budget.over(len(records), tokens, iterations):
                break
            while self.sends and self.sends[0][0] <= s.now:
                t, slot = heapq.heappop(self.sends)
                if slot < self.slots:
                    send(t, slot)
            admit(s.now)
            now = s.now
            if ph.phase == "warmup":
                warm = not waiting_first and len(self.live) + len(self.ingest) <= c and finished_slots >= must_finish
                if ph.advance(now, Progress(warm=warm)):
                    looks = LookSchedule(plan.look_s, now)
            if ph.phase in ("window", "tail"):
                window_start = ph.t_window_start
                assert window_start is not None
                # The looks go on in the tail: the cohort of finished window requests keeps growing.
                if plan.look is not None and looks is not None and looks.due(now):
                    co = cohort(first_only)
                    if len(co) >= plan.need:
                        v = plan.look(now - window_start, slo_samples(co))
                        if v is not None:
                            # Decided on a complete cohort: the step ends, its window that cohort's span
                            # (the later window requests become tail: nothing is left to wait for).
                            info.stopped_early, info.early_verdict = True, v
                            info.early_stop = {"by": "sequential", "why": decided_why(v)}
                            cohort_end = co[-1].t_sent
                            for r in win[len(co):]:
                                r.phase = "tail"
                            del win[len(co):]
                            ph.end_now(now)
                            continue
                if plan.stop_on_preemption and win and s.preemptions_total > pre0:
                    info.stopped_early, info.early_verdict = True, False
                    info.early_stop = {"by": "preemption", "why": preempted_why(s.preemptions_total - pre0, now - t0)}
                    ph.end_now(now)
                    continue
                if ph.phase == "window":
                    ph.advance(now, Progress(window_started=len(win)))
                if ph.phase == "tail" and ph.advance(now, tail_progress()) == "end":
                    continue
            if not s.has_work():
                nxt = [x for x in (self.ingest[0][0] if self.ingest else None,
                                   self.sends[0][0] if self.sends else None) if x is not None]
                if not nxt:
                    break
                s.idle_until(min(nxt))
                continue
            out = s.step()
            iterations += 1
            tokens += len(out.tokens)
            t = s.now
            for rid in out.tokens:
                ent = self.live[rid]
                if ent[1] is None:
                    ent[0].t_first = t
                    waiting_first.discard(ent[2])
                else:
                    ent[0].itl.append(t - ent[1])
                ent[1] = t
            for rid in out.finished:
                rec, last, slot = self.live.pop(rid)
                rec.t_last = last
                rec.prompt_tokens = rec.expected_prompt_tokens
                rec.output_tokens = len(rec.itl) + 1
                finished_slots.add(slot)
                if slot < self.slots:  # a slot beyond the new load retires with its request
                    heapq.heappush(self.sends, (t, slot))
            for rid in list(self.live)[:8]:
                rec = self.live[rid][0]
                if t - rec.t_intended <= self.timeout:
                    break
                _r, _l, slot = self.live.pop(rid)
                rec.status, rec.error, rec.detail = "error", "timeout", f"no end of stream within {self.timeout:g} s"
                s.abort(rid)
                if slot < self.slots:
                    heapq.heappush(self.sends, (t, slot))
            if t >= next_series:
                series.append(_point(s))
                next_series = t + self.series_dt
        t_end = s.now
        window_start = ph.t_window_start if ph.t_window_start is not None else t_end
        window_end = ph.t_window_end if ph.t_window_end is not None else t_end
        births_end = ph.t_births_end
        if cohort_end is not None:
            window_end = max(window_start, cohort_end)
            births_end = None  # an early verdict's window is a cohort run to its end: every one counts
        if budget.ended:  # cut short: nothing goes on into a next step (the server drains first)
            for r in [ent[0] for ent in self.live.values()] + [x[2] for x in self.ingest]:
                r.status, r.error, r.detail = "error", "cancelled", "the step ended while in flight"
            self.drain()
        # What the step is evaluated on: the carried-in requests as its warm-up, then its own; a request
        # still in flight goes on into the next step, and a cut copy of it stays here (its tokens so
        # far). What is written: each request once, when it ends (its own record, with the step it was
        # sent in), never a cut copy.
        in_flight = {id(ent[0]) for ent in self.live.values()} | {id(x[2]) for x in self.ingest}
        out_recs: list[Record] = []
        for r in carried:
            view = copy.deepcopy(r)
            view.step, view.phase, view.load = index, "warmup", plan.load
            if id(r) in in_flight:
                view.status, view.error, view.detail = "error", "cancelled", "carried into the next step"
            out_recs.append(view)
        for r in records:
            if id(r) in in_flight:
                cut = copy.deepcopy(r)
                cut.status, cut.error, cut.detail = "error", "cancelled", "carried into the next step"
                out_recs.append(cut)
            else:
                out_recs.append(r)
        ended = released + [r for r in carried + records if id(r) not in in_flight]
        series.append(_point(s))
        info.warmup_s = round(window_start - t0, 3)
        info.window_s = round(window_end - window_start, 3)
        info.tail_s = round(t_end - window_end, 3)
        res = FastStepResult(out_recs, series, before, s.stats(), t0, window_start, window_end, t_end, written=ended,
                             ended=budget.ended, t_births_end=births_end)
        return res, info, state["counter"]

    def release(self) -> list[Record]:
        """The requests still in flight, cancelled (a drain, the mode's end): their records, to write
        once under the step they were sent in."""
        out = [ent[0] for ent in self.live.values()] + [x[2] for x in self.ingest]
        for r in out:
            r.status, r.error, r.detail = "error", "cancelled", "released: the server drained"
        self.drain()
        return out
