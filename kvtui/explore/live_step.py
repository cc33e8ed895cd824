"""Steps measured on a live server: the engine serves, the load generator drives it over HTTP,
the telemetry thread watches it, and the server drains between steps."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable

from kvtui import clock
from kvtui.core import drain
from kvtui.core.evaluate import StepContext
from kvtui.core.record import Record
from kvtui.errors import EngineError, RunAborted
from kvtui.explore import events as ev
from kvtui.explore.executor import Controls, Measured
from kvtui.explore.live_look import LiveLook
from kvtui.explore.resume import finished_steps
from kvtui.explore.telemetry_loop import TelemetryLoop
from kvtui.io.scenario.schema import Mode
from kvtui.runtime.engines.base import Endpoint, Engine, StartupFacts
from kvtui.runtime.engines.replicas import create_for
from kvtui.runtime.load.generator import LoadGenerator, StepParams, WorkerConfig
from kvtui.runtime.load.protocol import StatusTotals
from kvtui.runtime.telemetry.prom_windows import counter_values


class LiveStepExecutor:
    wall_s_digits = 1

    def __init__(self, run: Controls):
        self.run = run
        self.engine: Engine | None = None
        self.endpoint: Endpoint | None = None
        self.facts: StartupFacts | None = None
        self.loadgen: LoadGenerator | None = None
        self.telemetry: TelemetryLoop | None = None
        self.md: dict[str, Any] | None = None  # the mode being measured
        self._starting = False  # engine.start() in progress (vLLM: minutes)
        self._cancel: threading.Thread | None = None

    # -- the mode ----------------------------------------------------------------------------
    def start_mode(self, mode: Mode, md: dict[str, Any], partial: dict[str, Any] | None) -> StartupFacts | None:
        run, sc = self.run, self.run.scenario
        self.md = md
        self.engine = engine = create_for(sc)  # several replicas when server.replicas > 1
        t_start = clock.monotonic()
        self._starting = True
        try:
            if run.stopping:
                raise RunAborted("engine start cancelled")
            endpoint = engine.start(sc, mode, lambda line: run.emit(ev.Log(mode.name, run.redactor(line))))
        except (EngineError, RunAborted) as e:
            if isinstance(e, RunAborted) or self._cancel is not None or run.stopping:
                # stopped while starting: not the engine's fault, and never a verdict on the mode
                md["error"] = {"kind": "cancelled", "message": f"engine start cancelled: {run.stop_reason}",
                               "log_tail": run.redactor(getattr(e, "log_tail", ""))}
            else:
                md["error"] = {"kind": e.kind, "message": str(e), "log_tail": run.redactor(e.log_tail)}
            md["server"] = engine.facts().to_dict()
            md["engine_info"] = self._info_dict()
            run.emit(ev.RunError(mode.name,
                                 f"mode {mode.name}: "
                                 f"{md['error']['message'] if md['error']['kind'] == 'cancelled' else e}"))
            run.mode_started(md)
            md["complete"] = md["error"]["kind"] != "cancelled"
            if partial is not None:  # nothing measured is lost: keep the finished steps, to continue another time
                md.update(steps=[dict(st, resumed=True) for st in finished_steps(partial)],
                          series=partial.get("series") or [],
                          search=partial.get("search") or {}, best_concurrency=partial.get("best_concurrency"),
                          complete=False,
                          continued={"steps": 0, "of": len(finished_steps(partial)),
                                     "started_at": partial.get("started_at")})
                for st in md["steps"]:
                    run.step_finished(mode.name, st)
            run.mode_finished(md)
            self.teardown()
            return None
        finally:
            self._starting = False
        facts = engine.facts()
        if facts.startup_s is None:
            facts.startup_s = round(clock.monotonic() - t_start, 2)
        md["server"] = facts.to_dict()
        md["engine_info"] = self._info_dict()
        if md["engine_info"].get("simulated"):  # an external server that says it is kvtui's simulator
            md["simulated"] = True
        md["endpoint"] = {"base_url": endpoint.base_url, "model": endpoint.model,
                          "max_model_len": endpoint.max_model_len}
        if endpoint.replicas:
            from kvtui.secrets import strip_url_password

            md["endpoint"]["routing"] = endpoint.routing if endpoint.spreads else "gateway"
            md["replicas"] = [{"name": r.name, "base_url": strip_url_password(r.base_url) or None,
                               "metrics_url": strip_url_password(r.metrics_url or "") or None,
                               **({"server": r.facts} if r.facts else {})} for r in endpoint.replicas]
        run.mode_started(md)
        run.emit(ev.EngineReady(mode.name, md["server"], md["engine_info"]))
        self.endpoint, self.facts = endpoint, facts
        self.telemetry = TelemetryLoop(run.emit, engine, endpoint, facts, mode.name, run.t0,
                                       sc.server.tensor_parallel_size)
        self.telemetry.on_failure = lambda why: run.stop(f"kvtui failed: {why}")
        self.telemetry.start()
        return facts

    def _info_dict(self) -> dict[str, Any]:
        info = self.engine.info() if self.engine else None
        return dataclasses.asdict(info) if info else {}

    def _time_scale(self) -> float:
        return (self.engine.time_scale if self.engine is not None else 1.0) or 1.0

    def begin_search(self, mode: Mode, md: dict[str, Any]) -> None:
        from kvtui.runtime.load.workload import discover_token_space

        sc, endpoint = self.run.scenario, self.endpoint
        assert endpoint is not None
        try:
            space = discover_token_space(endpoint.base_url, endpoint.model, endpoint.headers(),
                                         should_stop=lambda: self.run.stop_reason)
        except RunAborted:
            return  # stopped (SIGTERM, Ctrl-C, q) while probing /tokenize: the search loop ends at once
        md["token_space"] = space.to_dict()
        if not space.verified:
            self.run.emit(ev.RunWarning(mode.name, space.source))
        from kvtui.runtime.load.workload import context_problem

        problem = context_problem(sc.workload, endpoint.max_model_len)
        if problem:  # the server's context cannot hold the workload: refused, not silently shrunk
            md["error"] = {"kind": "bad_context", "message": problem}
            md["search"] = {"done": False}
            self.run.emit(ev.RunError(mode.name, problem))
            return
        if sc.quality.enabled:
            from kvtui.explore.quality import collect_outputs

            md["quality"] = collect_outputs(endpoint, sc, space,
                                            dummy_weights=bool(self._info_dict().get("dummy_weights")))
            if sc.quality.tasks or sc.quality.task_files or sc.quality.suites:
                self._quality_suite(mode, md)
        max_len = endpoint.max_model_len or sc.server.max_model_len
        cfg = WorkerConfig(
            base_url=endpoint.base_url, model=endpoint.model, headers=endpoint.headers(),
            workload=dataclasses.asdict(sc.workload), space=dataclasses.asdict(space), max_model_len=max_len,
            salt=self.run.salt, seed=sc.seed + sc.workload.seed,
            request_timeout_s=sc.ramp.request_timeout_s * max(1.0, self._time_scale()),
            replicas=[(r.base_url, r.headers) for r in endpoint.replicas] if endpoint.spreads else [],
            routing=endpoint.routing,
        )
        scaler = None
        if sc.ramp.autoscale:
            from kvtui.runtime.load.autoscale import AutoScaler, cores_available

            scaler = AutoScaler(max(sc.ramp.processes, sc.ramp.max_processes or cores_available()))
        self.loadgen = LoadGenerator(cfg, sc.ramp.processes, scaler)
        self.loadgen.counter = 1_000_000 * (md["index"] + 1)  # disjoint counters per mode
        self.loadgen.start()

    def _quality_suite(self, mode: Mode, md: dict[str, Any]) -> None:
        """The quality phase: tasks with ground truth, before the load (none of it counts in a step)."""
        q = md.get("quality") or {}
        if q.get("skipped"):
            return  # no weights (dummy, simulated) or no output at all: nothing to judge
        from kvtui.quality.runner import run_suite

        emit = self.run.emit
        emit(ev.QualityStarted(mode.name))  # the phase, typed (the screen's header says "quality")
        emit(ev.Log(mode.name, f"[kvtui] quality phase for {mode.name} (not counted in any step)"))
        suite = run_suite(self.endpoint, self.run.scenario, on_log=lambda line: emit(ev.Log(mode.name, line)),
                          should_stop=lambda: self.run.stop_reason)
        q["tasks"] = suite.pop("tasks")
        q["suite"] = suite
        md["quality"] = q
        emit(ev.QualityMeasured(mode.name, q))

    # -- one step ----------------------------------------------------------------------------
    def measure(self, mode: Mode, md: dict[str, Any], load: float, index: int, why: str, need: int) -> Measured:
        run = self.run
        r = run.scenario.ramp
        tel, loadgen = self.telemetry, self.loadgen
        assert loadgen is not None and tel is not None
        tel.load = load
        started_at = clock.time()

        def on_status(phase: str, elapsed_s: float, tot: StatusTotals) -> None:
            tel.phase = phase
            run.emit(ev.StepProgress(mode.name, load=load, phase=phase, elapsed_s=elapsed_s,
                                     window_started=tot.window_started, completed=tot.completed,
                                     inflight=tot.inflight, sent=tot.sent))

        def on_records(recs: list[Record]) -> None:
            # Appended as they stream in (every ~0.2 s), so a crash mid-step keeps them too.
            # A failed write stops the run at once (Run.output_failed), in true words.
            run.write_records(recs)
            run.emit(ev.Records(mode.name, recs))
            if look is not None:
                look.add(recs)

        look: LiveLook | None = None  # the sequential test's looks at the window (set below, once the ramp is known)

        # Continuous steps (docs/PROTOCOL.md): the step before ended held (its requests still in
        # flight); this one continues from them unless the protocol needs an idle server.
        drain_why, cont = self._continue_or_drain(md, load, index, why, on_records)
        tel.phase = "warmup"
        before = tel.scrape_now()

        def should_stop() -> str | None:
            if run.stop_reason:
                return run.stop_reason
            if run.skipping:
                return "mode skipped by the user"
            if tel.dead:
                return f"engine died: {tel.dead}"
            return None

        # Warm-up and window are modelled seconds: a simulator in slow motion (time_scale s)
        # needs s wall seconds for each. Open-loop rates are per modelled second too.
        ts = self._time_scale()
        wall_load = load if run.closed else load / ts
        from kvtui.core.protocol import tail_for

        # The continuous protocol holds the load after the window only as long as the SLO's figures
        # need (docs/PROTOCOL.md): until first tokens for TTFT/ITL; for TPOT/E2E also until the
        # window requests sent by one request's duration before its end have finished ("births").
        tail = tail_for(run.scenario, run.closed)
        ramp = self._ramp(md, load, cont)
        births_s = ramp.e2e_est_s * ts if tail == "births" and ramp is not None and ramp.e2e_est_s else None
        # The KV wall's noisy side watches longer for a preemption (protocol.watch_window).
        window_s = r.window_s if ramp is None else ramp.window(r.window_s)
        params = StepParams(
            mode.name, index, wall_load, run.closed, r.warmup_s * ts, window_s * ts, r.window_requests,
            "trace" if r.load == "trace" and not run.closed else r.arrival,
            r.burst_size, r.max_error_burst, window_timeout_s=r.request_timeout_s * ts, min_window_requests=need,
            tail=tail, births_s=births_s, hold_at_end=self._continuous(), continue_from=cont,
            warm_all_slots=ramp is None or ramp.settle == "turnover",
            stagger_s=None if ramp is None or ramp.settle == "turnover" else ramp.stagger_s * ts,
        )
        look = self._window_look(index, need, window_s, ts, ramp)
        res = loadgen.run_step(params, on_records=on_records, on_status=on_status, should_stop=should_stop,
                               decided=self._preemption_watch(before), window_look=look)
        if not tel.dead and (res.aborted or any(not x.ok for x in res.records)):
            tel.confirm_alive()  # a dead server ends the mode now, not after another whole step
        if res.held:
            tel.phase = "held"  # its slots go on: the next step may continue from them
        else:
            tel.phase = "drain"
            self._drain(tel, drain.CUT_QUIET_S if any(x.error == "cancelled" for x in res.records) else drain.QUIET_S)
        after = tel.scrape_now()
        # A held step's requests still in flight count by their tokens so far (a cut copy each; their
        # own records come in the next step's carried_in, written once).
        recs = res.records + (res.carried_out if res.held else [])
        metrics = tel.window(res.t_window_start, res.t_window_end)
        d: dict[str, Any] | None = None
        if before is not None and after is not None and before.ok and after.ok:
            from kvtui.runtime.telemetry.replicas import replicas_delta

            d = replicas_delta(before, after)  # window_delta, summed per replica when there are several
            metrics["preemptions"] = d.get("preemptions")
            if d.get("counter_reset"):  # a counter went down (a restart, or a lie): flagged, its delta unused
                metrics["metrics_out_of_range"] = sorted({*metrics.get("metrics_out_of_range", []), "counter reset"})
            metrics["prefix_cache_hit_rate"] = d.get("prefix_cache_hit_rate")
            metrics["server_tokens"] = {"prompt": d.get("prompt_tokens"), "generation": d.get("generation_tokens")}
            # The simulator reports modelled seconds already: no time-scale correction here.
            metrics["server_means_ms"] = {
                k: (round(d[f"{k}_mean_s"] * 1000, 3) if d.get(f"{k}_mean_s") is not None else None)
                for k in ("ttft", "itl", "tpot", "e2e", "queue")
            }
        ctx = StepContext(
            load=load, closed=run.closed, load_kind=r.load, t_window_start=res.t_window_start,
            t_window_end=res.t_window_end,
            time_scale=ts, metrics=metrics, client=res.stats.to_dict(),
            gpu_mem_used_gib_max=tel.gpu_mem_max(res.t_start, res.t_end), max_num_seqs=md["server"].get("max_num_seqs"),
            error_burst=res.error_burst, aborted=res.aborted or (f"engine died: {tel.dead}" if tel.dead else None),
            cut=bool(res.aborted) and not tel.dead, client_failure=res.client_failure,
            window_stats=tail != "full", t_end=res.t_end, births=tail == "births", t_births_end=res.t_births_end,
        )
        all_ok = [x for x in recs if x.ok]
        extra: dict[str, Any] = {
            "client_tokens": {"prompt": sum(x.prompt_tokens or 0 for x in all_ok),
                              "generation": sum(x.output_tokens or 0 for x in all_ok),
                              "requests": len(recs), "cancelled": sum(1 for x in recs if x.error == "cancelled")},
            "index": index, "why": why, "started_at": started_at, "duration_s": round(res.t_end - res.t_start, 2),
            "t_window_start": res.t_window_start, "t_window_end": res.t_window_end, "t_end": res.t_end,
            "protocol": r.protocol, "drain": self._drain_entry(index, drain_why, res),
            "t_rel_start": round(res.t_start - run.t0, 3), "t_rel_end": round(res.t_end - run.t0, 3),
        }
        if res.continued and res.continued_from:
            extra["continued_from"] = dict(res.continued_from)
        if ramp is not None:
            extra["ramp"] = ramp.to_dict()
            if ramp.window_s:  # how long the lengthened window watched (settled._watched_s)
                extra["ramp"]["watched_s"] = round((res.t_window_end - res.t_window_start) / ts, 3)
        # The looks' own record where one closed the window; else one look at the step's end with
        # the confidence its looks left (protocol.LOOKS_SHARE; a watch took none: all of it).
        from kvtui.core.protocol import step_sequential

        extra["sequential"] = step_sequential(
            run.scenario, look.test if look is not None else None, bool(res.window_decided), recs, need, tail,
            res.t_births_end, res.t_window_end - res.t_window_start, looked=look is not None)
        extra["stopped_early"] = bool(res.decided or res.window_decided)
        if res.window_decided:
            extra["early_stop"] = {"by": "sequential", "why": res.window_decided}
        if res.decided:  # a preemption ended the step (it may follow a window the test closed)
            extra["early_stop"] = {"by": "preemption", "why": res.decided}
        if res.autoscale is not None:
            extra["autoscale"] = res.autoscale  # workers that ran (client.workers) and why any were added
        if tel.replica_names:
            self._replica_extra(extra, recs, metrics, d, res, ts)
        elif metrics.get("replicas"):  # one server with data-parallel engines: its ranks' gauges
            extra["ranks"] = [{"name": k, **v} for k, v in metrics["replicas"].items()]
        return Measured(recs, ctx, extra, aborted=bool(res.aborted))

    # -- continuous steps ----------------------------------------------------------------------
    def _continuous(self) -> bool:
        """A closed loop's steps are continuous (docs/PROTOCOL.md); an open loop's (a rate) each start
        from an idle server and hold their full tail."""
        return self.run.closed

    def _window_look(self, index: int, need: int, window_s: float, ts: float, ramp: Any) -> LiveLook | None:
        """The sequential test's looks during a live continuous step's window (kvtui.explore.live_look),
        as offline: none for a watch (protocol.watch_window: no latency verdict ends it) or an open
        loop."""
        from kvtui.core.protocol import sequential_for

        sc = self.run.scenario
        if not self._continuous() or (ramp is not None and ramp.window_s) \
                or not sc.slo.targets():
            return None
        return LiveLook(sequential_for(sc, need), index, need, window_s, ts)

    def _preemption_watch(self, before: Any) -> Callable[[], str | None] | None:
        """The load generator's `decided` where a preemption decides the step's FAIL
        (kvtui.core.protocol.preemption_decides): the server's preemption counter since the step
        began, from the telemetry thread's latest scrape (looked at once per new scrape). None where
        the rule does not apply."""
        from kvtui.core.early_stop import preempted_why
        from kvtui.core.protocol import preemption_decides
        from kvtui.runtime.telemetry.replicas import replicas_delta

        tel = self.telemetry
        if tel is None or before is None or not before.ok or not preemption_decides(self.run.scenario):
            return None
        seen: list[Any] = [None]

        def decided() -> str | None:
            s = tel.samples[-1] if tel.samples else None
            if s is None or s is seen[0] or s.t <= before.t:
                return None
            seen[0] = s
            d = replicas_delta(before, s)
            n = d.get("preemptions")
            if not d.get("ok") or d.get("counter_reset") or not n or n <= 0:
                return None
            return preempted_why(n, s.t - before.t)

        return decided

    def _ramp(self, md: dict[str, Any], load: float, cont: bool) -> Any:
        """The continuous protocol's ramp for this step (kvtui.core.protocol.ramp_for), or None
        (an open loop: the load generator's own spread)."""
        if not self._continuous():
            return None
        from kvtui.core.protocol import ramp_plan_for_step

        steps = md.get("steps") or []
        return ramp_plan_for_step(self.run.scenario, md, load, steps[-1] if steps else None, not cont)

    def _continue_or_drain(self, md: dict[str, Any], load: float, index: int, why: str,
                           on_records: Any) -> tuple[str | None, bool]:
        """(why this step starts from an idle server or None, whether it continues from the held step)."""
        loadgen, tel = self.loadgen, self.telemetry
        assert loadgen is not None and tel is not None
        if not self._continuous():
            return None, False
        from kvtui.core.protocol import drain_reason

        steps = md.get("steps") or []
        drain_why = drain_reason(index, why, steps[-1] if steps else None, load)
        if loadgen.held is None:
            return drain_why or loadgen.not_held_why or "nothing held to continue", False
        if drain_why is None:
            return None, True
        loadgen.release(on_records)  # cancelled: each record under the step it was sent in
        tel.phase = "drain"
        self._drain(tel)
        return drain_why, False

    def _drain_entry(self, index: int, drain_why: str | None, res: Any) -> dict[str, Any]:
        if not self._continuous():
            return {"before": True, "why": "the mode's first step" if index == 0 else
                    "an open-loop step starts from an idle server"}
        if res.continued:
            return {"before": False, "why": None}
        return {"before": True, "why": res.continued_why or drain_why or "nothing held to continue"}

    def release_held(self) -> None:
        """End a held step's requests (the mode's end, the knee's quality phase): their records written."""
        lg = self.loadgen
        if lg is None or lg.held is None:
            return

        def write(recs: list[Record]) -> None:
            self.run.write_records(recs)  # a failure is said once, and stops the run
        lg.release(write)
        if self.telemetry is not None:
            self.telemetry.phase = "drain"
            self._drain(self.telemetry)

    def _replica_extra(self, extra: dict[str, Any], recs: list[Record], metrics: dict[str, Any],
                       d: dict[str, Any] | None, res: Any, ts: float) -> None:
        """The step's per-replica figures and the replicas it lost (kvtui.explore.replica_step)."""
        from kvtui.explore.replica_step import lost_note, lost_replicas, replica_figures

        tel = self.telemetry
        assert tel is not None
        names = tel.replica_names
        extra["replicas"] = replica_figures(recs, names, res.t_window_start, res.t_window_end, ts,
                                            metrics.get("replicas") or {}, (d or {}).get("replicas"))
        if not (self.endpoint is not None and self.endpoint.spreads):
            for row in extra["replicas"]:  # behind a gateway kvtui does not know who served what
                for key in ("requests", "errors", "output_tok_s", "input_tok_s", "ttft_ms", "tpot_ms"):
                    row.pop(key, None)
        lost = lost_replicas(recs, names, tel.replica_down, res.t_start)
        if lost:
            extra["replicas_lost"] = lost
            extra["notes"] = [lost_note(lost, names)]
            self.run.emit(ev.RunWarning(self.md.get("name") if self.md else None, extra["notes"][0]))

    def _drain(self, tel: TelemetryLoop, quiet_s: float = drain.QUIET_S) -> None:
        """Between steps: scrape until the server is idle and still (kvtui.core.drain), or the
        scenario's drain timeout."""
        run = self.run
        deadline = clock.monotonic() + run.scenario.ramp.drain_timeout_s
        if tel.scraper is None:
            clock.sleep(0.5)
            return
        watch = drain.DrainWatch(quiet_s)
        while clock.monotonic() < deadline and not tel.dead and not run.stopping and not run.skipping:
            s = tel.scrape_now()
            if s is None or not s.ok:
                clock.sleep(0.5)
                return
            wait = watch.observe(clock.monotonic(), s.running or 0, s.waiting or 0, counter_values(s))
            if wait is None:
                return
            clock.sleep(wait)
        if not tel.dead and not run.stopping and not run.skipping:
            run.emit(ev.RunWarning(None, f"server still busy after {run.scenario.ramp.drain_timeout_s:g} s of drain"))

    def dead(self) -> str | None:
        return self.telemetry.dead if self.telemetry is not None else None

    def after_step(self, md: dict[str, Any], load: float, measured: Measured) -> None:
        pass  # the telemetry thread keeps the series

    # -- the end -----------------------------------------------------------------------------
    def end_mode(self, md: dict[str, Any], prior_series: list[dict[str, Any]]) -> None:
        self.release_held()
        if self.run.scenario.quality.at_knee and md.get("quality") and not self.run.stopping and not md.get("error"):
            from kvtui.explore.knee_quality import quality_at_knee  # its own phase, after the search

            quality_at_knee(self, md)
        md["series"] = prior_series + (list(self.telemetry.rows) if self.telemetry else [])
        self.teardown()

    def complete(self, md: dict[str, Any]) -> bool:
        return not self.run.stopping or md["search"].get("done", False)

    def interrupt(self) -> None:
        engine = self.engine
        if self._starting and engine is not None and self._cancel is None:
            # A start waits for /health (vLLM: minutes): end it now. From a thread, because this
            # may run in a signal handler on the very thread that waits in engine.start().
            self._cancel = threading.Thread(target=engine.stop, name="kvtui-cancel-start", daemon=True)
            self._cancel.start()

    def teardown(self) -> None:
        if self._cancel is not None:
            self._cancel.join()  # the cancelled start's server group is gone before we go on
        if self.loadgen is not None:
            try:
                self.loadgen.close()
            finally:
                self.loadgen = None
        if self.telemetry is not None:
            self.telemetry.stop()
            if self.md is not None and not self.md.get("series"):
                self.md["series"] = list(self.telemetry.rows)
            self.telemetry = None
        if self.engine is not None:
            try:
                self.engine.stop()
            finally:
                self.engine = None
