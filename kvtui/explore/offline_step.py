"""Steps simulated offline (`kvtui run --fast`): the scheduler model in virtual time, no HTTP.

The records it produces are evaluated exactly as a live step's are; every figure is labelled
SIMULATED (fast, offline).
"""

from __future__ import annotations

from typing import Any

from kvtui import clock
from kvtui.core.evaluate import StepContext
from kvtui.explore import events as ev
from kvtui.explore.executor import Controls, Measured
from kvtui.explore.pacing import Pacer, kept_by, rows_by
from kvtui.io.scenario.schema import Mode
from kvtui.runtime.engines.base import StartupFacts
from kvtui.simulator.engine.budget import STOPPED, refusal
from kvtui.simulator.engine.fastrun import OfflineServer, SimConfigError


class OfflineStepExecutor:
    wall_s_digits = 2

    def __init__(self, run: Controls):
        self.run = run
        self.server: OfflineServer | None = None
        self._counter = 0
        self._rows: list[dict[str, Any]] = []
        self._cut_at = 0.0  # where the run's stop or skip cut a paced step (modelled, absolute)
        # A paced run (the TUI's "watch it live"): each step, computed as --fast computes it, is
        # released over its modelled time on the run's PacedClock (kvtui.explore.pacing).
        pace = getattr(run, "pace", None)
        self.pacer: Pacer | None = Pacer(pace, run) if pace is not None else None

    def start_mode(self, mode: Mode, md: dict[str, Any], partial: dict[str, Any] | None) -> StartupFacts | None:
        run = self.run
        try:
            # the run's calibration (kvtui run --fast --calibration FILE) is the simulated GPU's speed
            self.server = srv = OfflineServer(run.scenario, mode, run.salt,
                                              calibration=getattr(run, "sim_calibration", None),
                                              halt=lambda: run.stopping or run.skipping)
        except SimConfigError as e:
            self.server = None
            md["error"] = {"kind": "oom_kv", "message": f"mode {mode.name}: {e}"}
            run.mode_started(md)
            run.emit(ev.RunError(mode.name, md["error"]["message"]))
            md["complete"] = True
            md["finished_at"] = clock.time()
            run.mode_finished(md)
            run.emit(ev.ModeFinished(mode.name, md))
            return None
        md["server"] = srv.facts.to_dict()
        md["engine_info"] = srv.engine_info()
        run.mode_started(md)
        run.emit(ev.EngineReady(mode.name, md["server"], md["engine_info"]))
        self._counter = 1_000_000 * (md["index"] + 1)  # disjoint counters per mode
        if self.pacer is not None:
            self.pacer.start_mode()
        return srv.facts

    def begin_search(self, mode: Mode, md: dict[str, Any]) -> None:
        pass  # a model needs no token space, quality probe or workers

    def measure(self, mode: Mode, md: dict[str, Any], load: float, index: int, why: str, need: int) -> Measured:
        run, srv = self.run, self.server
        assert srv is not None
        if run.closed:
            return self._continuous(mode, md, load, index, why, need)
        # An open loop (a rate) has no continuous protocol: each step from an idle server, full tail.
        res = srv.step(mode.name, index, load, run.closed, self._counter, need)
        # (a trace step aligns its first counter to the trace's first row: up to a trace's length on)
        self._counter += len(res.records) + 1 + (srv.trace_rows if run.scenario.ramp.load == "trace" else 0)
        self._rows = srv.series_rows(res, load)
        records, ended = self._paced(mode, load, res, list(res.records), list(res.records))
        run.write_records(records)  # a failed write stops the run (Run.output_failed)
        from kvtui.simulator.engine.fastrun import step_metrics

        ctx = StepContext(load=load, closed=run.closed, load_kind=run.scenario.ramp.load,
                          t_window_start=res.window_start or res.t_start,
                          t_window_end=res.window_end or res.t_end, metrics=step_metrics(res),
                          gpu_mem_used_gib_max=srv.gpu_mem_used_gib(), max_num_seqs=srv.facts.max_num_seqs,
                          cut=bool(ended), aborted=self._cut_why(ended))
        extra = {"index": index, "why": why, "started_at": clock.time(),
                 "duration_s": round(res.t_end - res.t_start, 2),
                 "t_window_start": ctx.t_window_start, "t_window_end": ctx.t_window_end, "fast": True,
                 "engine_limits": res.limited_by}
        return Measured(records, ctx, extra, check_samples=False, aborted=bool(ended),
                        mode_error=refusal(res.ended, load))

    def _continuous(self, mode: Mode, md: dict[str, Any], load: float, index: int, why: str, need: int) -> Measured:
        """One step of the continuous protocol (kvtui.simulator.engine.continuous) in modelled time."""
        run, srv = self.run, self.server
        assert srv is not None
        res, ctx, extra, self._counter = continuous_step(srv, run.scenario, mode, md, load, index, why, need,
                                                         self._counter)
        self._rows = srv.series_rows(res, load)
        records, ended = self._paced(mode, load, res, list(res.records), list(res.to_write()))
        run.write_records(records)
        ctx.cut, ctx.aborted = bool(ended), self._cut_why(ended)
        head = {"index": index, "why": why, "started_at": clock.time()}
        timing = {k: extra.pop(k) for k in ("duration_s", "t_window_start", "t_window_end", "t_end")}
        extra = {**head, **timing, "fast": True, **extra}
        measured = list(res.records) if ended == res.ended else kept_by(list(res.records), self._cut_at)
        return Measured(measured, ctx, extra, check_samples=False, aborted=bool(ended),
                        mode_error=refusal(res.ended, load))

    def _paced(self, mode: Mode, load: float, res: Any, records: list[Any],
               to_write: list[Any]) -> tuple[list[Any], str]:
        """Release the computed step over its modelled time where the run is paced. (The records to
        write, why the step ended: the result's own, or the run's stop or skip during the pacing, which
        cuts the step where the modelled time had reached: only what ended by then is kept.)"""
        if self.pacer is None or res.ended:
            return to_write, res.ended
        srv = self.server
        assert srv is not None
        cut_at = self.pacer.release(mode.name, load, self._rows, records, srv.t_mode, res.t_start, res.t_end,
                                    (res.window_start or res.t_start, res.window_end or res.t_end))
        if cut_at is None:
            return to_write, res.ended
        self._cut_at = cut_at
        self._rows = rows_by(self._rows, cut_at - srv.t_mode)
        return kept_by(to_write, cut_at), STOPPED

    def _cut_why(self, ended: str) -> str | None:
        """Why a step was cut short (its `aborted`): the run's stop or skip, or the bound it reached."""
        if not ended:
            return None
        if ended == STOPPED:
            return self.run.stop_reason or "skipped"
        return f"bound reached: {ended}"

    def dead(self) -> str | None:
        return None  # a model does not die

    def after_step(self, md: dict[str, Any], load: float, measured: Measured) -> None:
        md["series"].extend(self._rows)
        self._rows = []

    def end_mode(self, md: dict[str, Any], prior_series: list[dict[str, Any]]) -> None:
        if self.server is not None:
            left = self.server.release_records()
            if left:
                self.run.write_records(left)
        self.server = None

    def complete(self, md: dict[str, Any]) -> bool:
        return True  # an offline mode is measured again, never continued (Resume.take)

    def interrupt(self) -> None:
        pass  # each step's loop looks at the run's stop itself (OfflineServer.halt, kvtui.simulator.engine.budget)

    def teardown(self) -> None:
        self.server = None


def continuous_step(srv: Any, sc: Any, mode: Mode, md: dict[str, Any], load: float, index: int, why: str, need: int,
                    counter: int) -> tuple[Any, StepContext, dict[str, Any], int]:
    """One continuous-protocol step of an OfflineServer in modelled time (docs/PROTOCOL.md): the drain
    rule, the ramp, the sequential test and the tail rule, as `kvtui run --fast` and a paced run
    (kvtui.explore.pacing) both take it. (result, context, step fields, next counter)."""
    from kvtui.core.protocol import (
        drain_reason,
        preemption_decides,
        ramp_plan_for_step,
        sequential_for,
        step_sequential,
        tail_for,
    )
    from kvtui.simulator.engine.fastrun import step_metrics

    prev = md["steps"][-1] if md.get("steps") else None
    why_drain = drain_reason(index, why, prev, load)
    ramp = ramp_plan_for_step(sc, md, load, prev, bool(why_drain))
    test = sequential_for(sc, need)
    tail = tail_for(sc)
    plan = srv.plan(load, need, why_drain, tail, test, ramp, stop_on_preemption=preemption_decides(sc))
    res, info, counter = srv.continuous_step(mode.name, index, counter, plan)
    ctx = StepContext(load=load, closed=True, t_window_start=res.window_start or res.t_start,
                      t_window_end=res.window_end or res.t_end, metrics=step_metrics(res),
                      gpu_mem_used_gib_max=srv.gpu_mem_used_gib(), max_num_seqs=srv.facts.max_num_seqs,
                      window_stats=tail != "full", t_end=res.t_end, births=tail == "births",
                      t_births_end=res.t_births_end)
    by_test = info.stopped_early and (info.early_stop or {}).get("by") == "sequential"
    extra: dict[str, Any] = {
        "duration_s": round(res.t_end - res.t_start, 2),
        "t_window_start": ctx.t_window_start, "t_window_end": ctx.t_window_end, "t_end": res.t_end,
        "engine_limits": res.limited_by, "protocol": "continuous",
        "drain": {"before": bool(why_drain), "why": why_drain or ""},
        "phases_s": {"warmup": info.warmup_s, "window": info.window_s, "tail": info.tail_s},
        "ramp": ramp.to_dict() | ({"watched_s": info.window_s} if ramp.window_s else {}),
        "stopped_early": info.stopped_early,
        # As a live step: the looks' own record where they ended the step, else one look at its end
        # with the confidence they left (a watch, protocol.watch_window, takes no look: all of it).
        "sequential": step_sequential(sc, test, by_test, res.records, need, tail, res.t_births_end, info.window_s,
                                      looked=not ramp.window_s),
    }
    if info.early_stop:
        extra["early_stop"] = dict(info.early_stop)
    if prev is not None and not why_drain:
        extra["continued_from"] = {"step": prev.get("index"), "load": prev.get("load"), "in_flight": info.carried_in}
    return res, ctx, extra, counter
