"""`kvtui run … --fast`: one mode's server as a model, each step simulated offline in virtual time.

No HTTP, no wall clock: the scheduler model and a virtual client (kvtui.simulator.engine.fast)
produce the records a real step would; the run (kvtui.explore.offline_step) evaluates them
exactly as it does a real step. A whole ramp per mode takes seconds — for what-if questions.
Every figure is labelled SIMULATED (fast, offline).
"""

from __future__ import annotations

from typing import Any, Callable

from kvtui.core.looks import look_every
from kvtui.io.scenario.schema import Mode, Scenario
from kvtui.runtime.engines.base import StartupFacts
from kvtui.runtime.load.workload import PromptFactory, TokenSpace
from kvtui.simulator.engine.budget import StepBudget
from kvtui.simulator.engine.fast import FastStepResult, simulate_step
from kvtui.simulator.engine.scheduler import SchedulerSim, SimConfigError
from kvtui.simulator.engine.server import SIM_VERSION, block_hashes
from kvtui.simulator.model import catalog

__all__ = ["OfflineServer", "SimConfigError", "step_metrics", "series_rows"]


def step_metrics(res: FastStepResult) -> dict[str, Any]:
    """The window's gauges and counter deltas, as the live run reads them from /metrics."""
    t0, t1 = res.window_start or res.t_start, res.window_end or res.t_end
    inside = [p for p in res.series if t0 <= p.t <= t1] or res.series
    b, a = res.stats_before, res.stats_after
    q = a.prefix_cache_queries_total - b.prefix_cache_queries_total
    h = a.prefix_cache_hits_total - b.prefix_cache_hits_total
    return {
        "kv_usage_max": round(max(p.kv_usage for p in inside), 4),
        "kv_usage_mean": round(sum(p.kv_usage for p in inside) / len(inside), 4),
        "running_max": max(p.running for p in inside),
        "waiting_max": max(p.waiting for p in inside),
        "preemptions": a.preemptions_total - b.preemptions_total,
        "prefix_cache_hit_rate": (h / q) if q else None,
        "server_tokens": {"prompt": a.prompt_tokens_total - b.prompt_tokens_total,
                          "generation": a.generation_tokens_total - b.generation_tokens_total},
    }


def series_rows(res: FastStepResult, t_offset: float, load: float, used_gib: float, kv_gib: float | None,
                tp: int = 1) -> list[dict[str, Any]]:
    """The step's telemetry rows (what the live telemetry thread would have recorded)."""
    rows = []
    prev = None
    for p in res.series:
        row: dict[str, Any] = {"t": round(p.t - t_offset, 2), "load": load, "phase": "window",
                               "kv_usage": round(p.kv_usage, 4),
                               "running": p.running, "waiting": p.waiting, "preemptions": p.preemptions_total,
                               "gpu_mem_used_gib": round(used_gib * tp, 3),
                               "gpus": [{"index": i, "mem_used_gib": used_gib, "simulated": True} for i in range(tp)]}
        if kv_gib:
            row["kv_in_use_gib"] = round(p.kv_usage * kv_gib, 3)
        if prev is not None and p.t > prev.t:
            row["gen_tok_s"] = round((p.generation_tokens_total - prev.generation_tokens_total) / (p.t - prev.t), 1)
        rows.append(row)
        prev = p
    return rows


class OfflineServer:
    """One mode's simulated server, stepped in virtual time. Raises SimConfigError when the mode
    does not fit (the live simulator's startup would fail the same way)."""

    def __init__(self, scenario: Scenario, mode: Mode, salt: int, calibration: Any = None,
                 halt: Callable[[], bool] | None = None):
        self.scenario = scenario
        self.salt = salt
        self.halt = halt  # the run's stop or skip: every step's loop looks at it (kvtui.simulator.engine.budget)
        s = scenario.server
        model = catalog.load_model(mode.model or s.model)
        self.sched = SchedulerSim(model, catalog.load_gpu(s.gpu), mode, s, calibration=calibration,
                                  seed=scenario.seed)  # calibration None: the catalogue's fit
        self.facts: StartupFacts = self.sched.facts()
        self.memory = self.sched.memory()
        self.tp = max(1, s.tensor_parallel_size)
        self.t_mode = self.sched.now
        space = TokenSpace.synthetic(vocab_size=int(getattr(model, "vocab_size", 128256) or 128256))
        self._factory = PromptFactory(scenario.workload, space, s.max_model_len, salt,
                                      scenario.seed + scenario.workload.seed)
        self._shared = self._factory.shares_prefixes
        self._client: Any = None  # the continuous protocol's virtual client (kvtui.simulator.engine.continuous)
        self._released: list[Any] = []  # its requests cancelled before a `step`, not yet written

    def engine_info(self) -> dict[str, Any]:
        return {"engine": "sim", "simulated": True, "version": f"{SIM_VERSION} (fast, offline)", "command": [],
                "gpu_names": [f"{self.scenario.server.gpu} (SIMULATED)"], "dummy_weights": False, "time_scale": 1.0,
                "fast": True}

    @property
    def shares_prefixes(self) -> bool:
        """Whether its requests share prompt blocks (kvtui.runtime.load.workload.PromptFactory.shares_prefixes)."""
        return self._shared

    @property
    def trace_rows(self) -> int:
        """The trace's rows a replay cycles through (0: no trace)."""
        return len(self._factory.trace) if self._factory.trace is not None else 0

    def _sample(self, counter: int) -> tuple:
        if self._shared:
            p = self._factory.build(counter)
            ids = p.ids if p.ids is not None else list(range(p.prompt_tokens))
            return (len(ids), p.max_tokens, block_hashes(ids, self.sched.block_size))
        return self._factory.lengths(counter)

    def step(self, mode_name: str, index: int, load: float, closed: bool, counter: int, need: int) -> FastStepResult:
        """One step at `load` from an idle server, its tail held until every window request has
        finished (kvtui.simulator.engine.fast.simulate_step); if its window holds fewer than `need` requests,
        again by count. What serves an open loop's (rate) steps, which have no continuous protocol,
        and the prediction's pilot of a closed loop where no request duration is known yet
        (kvtui.explore.prediction); a closed loop's measured steps are `continuous_step`'s."""
        sc, r = self.scenario, self.scenario.ramp
        # The continuous client may still hold requests handed on from its last step (the prediction
        # runs its pilot between continuous steps where no E2E is known yet, e.g. under an SLO that
        # never waits for whole requests): their tokens would reach a step that does not know them.
        self._to_idle()
        trace = r.load == "trace" and not closed  # load: the speed-up factor of the trace's own times
        if trace:
            from kvtui.io.scenario.trace import aligned_counter

            assert self._factory.trace is not None
            counter = aligned_counter(counter, len(self._factory.trace))

        def arrivals() -> Any:
            if not trace:
                return None
            from kvtui.io.scenario.trace import replay_arrivals

            assert self._factory.trace is not None
            return ((a.at, a.k) for a in replay_arrivals(self._factory.trace, load))

        res = simulate_step(self.sched, self._sample, load, closed, r.warmup_s, r.window_s, 0, sc.seed, mode_name,
                            index,
                            id_prefix=f"{self.salt:08x}-", counter_start=counter, request_timeout_s=r.request_timeout_s,
                            budget=StepBudget(self.halt), arrivals=arrivals(), arrival=r.arrival,
                            burst_size=r.burst_size)
        if not res.ended and len(res.window_records()) < need:
            # Too few samples for the SLO's percentiles: the real run extends its window; here, re-run by count.
            res = simulate_step(self.sched, self._sample, load, closed, r.warmup_s, r.window_s, need, sc.seed,
                                mode_name,
                                index, id_prefix=f"{self.salt:08x}-", counter_start=counter,
                                request_timeout_s=r.request_timeout_s, budget=StepBudget(self.halt),
                                arrivals=arrivals(), arrival=r.arrival, burst_size=r.burst_size)
        return res

    def plan(self, load: float, need: int, drain_why: str | None, tail: str, test: Any, ramp: Any = None,
             stop_on_preemption: bool = False) -> Any:
        """The continuous protocol's plan for one step (kvtui.simulator.engine.continuous.StepPlan);
        `ramp` a kvtui.core.protocol.RampPlan (None: a short spread and the turnover wait)."""
        from kvtui.simulator.engine.continuous import StepPlan

        r = self.scenario.ramp
        # The KV wall's noisy side (N requests at full length do not fit the cache) watches longer for
        # the preemption its latencies cannot show (protocol.watch_window): no early verdict from them.
        watch = ramp is not None and bool(ramp.window_s)
        window_s = ramp.window(r.window_s) if ramp is not None else r.window_s
        return StepPlan(load=load, warmup_s=r.warmup_s, window_s=window_s, need=need,
                        drain_before=bool(drain_why), drain_why=drain_why or "", tail=tail,
                        look_s=look_every(window_s), look=test.look if test is not None and not watch else None,
                        stagger_s=None if ramp is None else ramp.stagger_s,
                        settle="turnover" if ramp is None else ramp.settle,
                        births_s=None if ramp is None else ramp.e2e_est_s, stop_on_preemption=stop_on_preemption,
                        # as `step` (re-run by count): the window runs until the SLO's percentiles
                        # have their samples (`need` is bounded by the scenario's checks)
                        max_window_factor=1e6)

    def continuous_step(self, mode_name: str, index: int, counter: int, plan: Any) -> tuple[FastStepResult, Any, int]:
        """One step of the continuous protocol; the virtual client lives across the mode's steps."""
        from kvtui.simulator.engine.continuous import ContinuousClient

        if self._client is None:
            self._client = ContinuousClient(self.sched, self._sample, self.scenario.seed, mode_name,
                                            id_prefix=f"{self.salt:08x}-",
                                            request_timeout_s=self.scenario.ramp.request_timeout_s)
        return self._client.step(plan, index, counter, StepBudget(self.halt))

    def _to_idle(self) -> None:
        if self._client is not None and (self._client.live or self._client.ingest):
            self._released += self._client.release()

    def release_records(self) -> list[Any]:
        """The continuous client's requests still in flight at the mode's end (or before a `step`),
        cancelled: their records, written once under the step they were sent in (none for a `step`,
        which cancels its own)."""
        out, self._released = self._released + (self._client.release() if self._client is not None else []), []
        return out

    def series_rows(self, res: FastStepResult, load: float) -> list[dict[str, Any]]:
        return series_rows(res, self.t_mode, load, round(self.memory.used_gib, 3), self.facts.kv_cache_gib, self.tp)

    def gpu_mem_used_gib(self) -> float:
        return round(self.memory.used_gib * self.tp, 3)
