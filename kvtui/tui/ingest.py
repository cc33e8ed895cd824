"""How the view-model fills: the run's events one by one (live), or a whole snapshot (replay).

Mixins of `kvtui.tui.state.RunState` (they use its fields and helpers: `_mode`, `_bump`,
`_append_log`, `modes`, …); kept apart so the state itself stays a small model.

They read the run's documents through the snapshot schema's typed views (kvtui.io.snapshot.schema:
`Run`, `Mode`, `ServerFacts`, `EngineInfo`, `Search`, `Quality`…) and keep views: each event's
payload is the TUI's own copy (kvtui.explore.events.detached) and a replayed snapshot is read, never
written, so a view (no copy) shares nothing anyone changes. Still dicts: the scenario (a document
of its own schema), telemetry rows (thousands per mode) and the envelopes of the events' payloads
(a step's start, the load generator's progress, an engine's {facts, info}).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Mapping

from kvtui import clock
from kvtui.explore import events
from kvtui.explore.events import check_kind
from kvtui.io.scenario.slo_table import slo_of
from kvtui.io.snapshot.schema import EngineInfo, Environment, Mode, Quality, Run, RunInfo, Search, ServerFacts
from kvtui.terminal import visible_tree
from kvtui.tui.cellfmt import as_stored
from kvtui.tui.loglines import classify_log_line
from kvtui.tui.modeview import ModeView
from kvtui.tui.series import Series, _num
from kvtui.tui.statehost import StateHost

SERIES_KEYS = ("kv_usage", "running", "waiting", "preempt", "gen_tok_s", "prompt_tok_s", "kv_in_use_gib",
               "gpu_mem_used_gib", "gpu_mem_total_gib", "load")


class RunEvents(StateHost):
    """Live: one `kvtui.explore.run.Event` at a time, on the UI thread."""

    def ingest(self, ev: Any) -> None:
        """Dispatch on the event's class (HANDLERS below). An untyped object with a `kind` (a test,
        an old listener) goes by the class that declares that kind; a kind no one declared fails
        loudly here, never dropped (kvtui.explore.events). The handlers of TYPED events get the
        event itself; the others its payload."""
        cls = type(ev) if isinstance(ev, events.Event) else _BY_KIND.get(ev.kind)
        if cls is None:
            check_kind(ev.kind)
        handler = HANDLERS.get(cls) if cls is not None else None
        if handler is None:
            return
        # A server's text (log lines, errors) and the run's names: controls made visible here.
        mode = visible_tree(ev.mode)
        if cls in TYPED:
            typed = ev if isinstance(ev, events.Event) else cls(mode=mode, **dict(ev.data or {}))
            handler(self, mode, dataclasses.replace(typed, **{
                f.name: visible_tree(getattr(typed, f.name)) for f in dataclasses.fields(typed)}))
        else:
            handler(self, mode, visible_tree(ev.data))

    def _on_run_started(self, _name: str | None, doc: dict[str, Any]) -> None:
        run = Run.view(doc)
        self.doc = doc
        self.scenario = run.scenario or {}
        self.environment = run.environment or Environment()
        self.slo = slo_of(self.scenario)
        self.status = "running"
        requested = (run.run or RunInfo()).modes_requested or []
        for m in run.all_modes:  # modes kept from a resumed snapshot
            self._load_mode(m, kept=True)
        for n in requested:
            self._mode(n)
        if doc.get("trace"):  # the trace the run replays, read before any server started
            from kvtui.io.scenario.trace import describe

            for line in describe(dict(doc["trace"])):
                self._append_log(None, f"kvtui: {line}", "kvtui")
        self._bump(steps=True, header=True)

    def _on_mode_starting(self, name: str | None, data: dict[str, Any]) -> None:
        mv = self._mode(name)
        if mv is None:
            return
        md = Mode.view(data.get("mode") or {})
        mv.doc = md  # a copy of its own (events.detached); ModeUpdated brings the later ones
        mv.index = data.get("index", mv.index)
        mv.settings = md.settings or {}
        mv.engine = md.engine or ""
        mv.simulated = bool(md.simulated)
        mv.status = "starting"
        mv.t_start = self.series_t_now(mv)
        mv.started_mono = clock.monotonic()
        from kvtui.runtime.engines.vllm.logparse import StartupLogParser

        mv.parser = StartupLogParser()
        mv.phase = mv.parser.phase
        self.current = name
        self.step = None
        self._bump(steps=True, header=True)

    def series_t_now(self, mv: ModeView) -> float | None:
        return mv.series.t[-1] if mv.series.t else None

    def _on_log(self, name: str | None, line: Any) -> None:
        line = str(line)
        kind = classify_log_line(line)
        mv = self.modes.get(name) if name else None
        if mv is not None and mv.parser is not None and mv.status == "starting":
            try:
                moved = mv.parser.feed(line)
            except Exception:  # a parser bug must not hide the log
                moved = None
            if moved:
                mv.phase = moved
                kind = kind or "fact"
                self._bump(header=True)
        self._append_log(name, line, kind)
        self.version += 1

    def _on_quality_started(self, name: str | None, _data: Any) -> None:
        """The quality suite runs before the load (kvtui.quality): the header says so."""
        mv = self._mode(name)
        if mv is not None:
            mv.phase = "quality"
            self._bump(header=True)

    def _on_quality(self, name: str | None, q: dict[str, Any]) -> None:
        """The mode's quality suite finished: its figures in the log, the phase back to the load."""
        mv = self._mode(name)
        if mv is None:
            return
        quality = Quality.view(q or {})
        for task, t in (quality.tasks or {}).items():
            if task == "agreement" or t.n is None:
                continue
            lo, hi = (t.ci or [0, 0])[:2]
            self._append_log(name, f"quality {task}: {t.correct}/{t.n} = {t.accuracy or 0:.0%} "
                                   f"[{lo:.0%}–{hi:.0%}]", "fact")
        wall_s = quality.suite.wall_s if quality.suite is not None else None
        if wall_s is not None:
            self._append_log(name, f"quality phase took {wall_s:.0f} s (not counted in any step)", "fact")
        mv.phase = "ready"
        self._bump(header=True)

    def _on_engine_ready(self, name: str | None, data: dict[str, Any]) -> None:
        mv = self._mode(name)
        if mv is None:
            return
        mv.server = ServerFacts.view(data.get("facts") or {})
        mv.info = EngineInfo.view(data.get("info") or {})
        mv.status = "running"
        mv.phase = "ready"
        mv.parser = None
        if mv.predicted_kv is None:
            mv.predicted_kv = self.kv_bound(mv.server.kv_cache_tokens)
        self._bump(header=True)

    def kv_bound(self, kv_tokens: Any) -> float | None:
        """Requests of the scenario's mean length that fit in the KV cache (the run's own prediction
        arrives with the mode's end; this is the same rule, known as soon as the server is up)."""
        if not self.closed or not isinstance(kv_tokens, (int, float)) or kv_tokens <= 0:
            return None
        w = self.scenario.get("workload") or {}

        def mean(ln: Any) -> float:
            if not isinstance(ln, dict):
                return float(ln or 0)
            if ln.get("dist") == "fixed":
                return float(ln.get("value") or 0)
            if ln.get("dist") == "uniform":
                return (float(ln.get("min") or 0) + float(ln.get("max") or 0)) / 2
            return float(ln.get("mean") or 0)

        per = (mean(w.get("prompt_tokens")) + mean(w.get("output_tokens"))) * float(w.get("turns") or 1)
        return round(kv_tokens / per, 1) if per > 0 else None

    def _on_telemetry(self, name: str | None, row: dict[str, Any]) -> None:
        mv = self._mode(name)
        if mv is None or not isinstance(row, dict):
            return
        self._add_row(mv, row)
        self.version += 1

    def _add_row(self, mv: ModeView, row: dict[str, Any]) -> None:
        vals = {k: row.get(k) for k in SERIES_KEYS if k in row}
        gpus = [g for g in row.get("gpus") or [] if isinstance(g, dict)]
        # What explains why decode binds: SM utilisation, power (summed over the GPUs), SM clock.
        for key, col, how in (("util_pct", "gpu_util_pct", "mean"), ("power_w", "gpu_power_w", "sum"),
                              ("sm_clock_mhz", "gpu_sm_clock_mhz", "mean")):
            known = [v for v in (_num(g.get(key)) for g in gpus) if v is not None]
            if known and len(known) == len(gpus):
                vals[col] = sum(known) if how == "sum" else sum(known) / len(known)
        if row.get("replicas"):  # several replicas or DP engines: the per-replica panel's columns
            from kvtui.tui.replica_cols import series_values

            vals.update(series_values(row, mv.replica_names))
        if len(gpus) > 1:  # tensor parallel: one memory line per GPU
            for g in gpus:
                vals[f"gpu{int(g.get('index', 0))}_mem_gib"] = g.get("mem_used_gib")
        p = _num(row.get("preemptions"))
        if p is not None:
            vals["preempt"] = max(0.0, p - mv._last_preempt) if mv._last_preempt is not None else 0.0
            mv._last_preempt = p
        t = _num(row.get("t"))
        if t is None:
            return
        mv.series.append(t, vals)

    def _on_step_started(self, name: str | None, ev: events.StepStarted) -> None:
        self.step = ev
        self.progress = None
        self._bump(header=True)

    def _on_step_progress(self, name: str | None, ev: events.StepProgress) -> None:
        self.progress = ev
        self.version += 1

    def _on_records(self, name: str | None, recs: Any) -> None:
        """The dashboard keeps no records (they are in the records file); every event has a handler."""

    def _on_mode_updated(self, name: str | None, md: dict[str, Any]) -> None:
        mv = self._mode(name)
        if mv is None:
            return
        mv.doc = Mode.view(md)  # the run's entry after its prediction or a step: a copy of its own
        self._bump(header=True)

    def _on_step_finished(self, name: str | None, step: dict[str, Any]) -> None:
        mv = self._mode(name)
        if mv is None:
            return
        mv.steps.append(dict(step))
        self.step = None
        self.progress = None
        self._bump(steps=True, header=True)

    def _on_mode_finished(self, name: str | None, md: dict[str, Any]) -> None:
        mv = self._mode(name)
        if mv is None:
            return
        self._finish_mode(mv, md)
        self._bump(steps=True, header=True)

    def _finish_mode(self, mv: ModeView, md: Mode | Mapping[str, Any]) -> None:
        m = Mode.of(md)
        mv.search = m.search or Search()
        mv.run_best = m.best_concurrency
        mv.predicted_kv = m.predicted_kv_concurrency
        mv.doc = m
        mv.knee_limited_by = m.knee_limited_by
        if m.server:
            mv.server = m.server
        if m.engine_info:
            mv.info = m.engine_info
        if m.error is not None:
            mv.error = m.error.message
        else:  # an older snapshot's error may be a bare string, kept as stored
            err = m.stored("error")
            mv.error = str(err) if err else None
        if mv.error:
            mv.status = "failed"
        elif mv.search.skipped:
            mv.status = "skipped"
        elif m.complete is False:
            mv.status = "stopped"
        else:
            mv.status = "done"
        mv.parser = None
        if len(mv.series) == 0 and m.series:  # offline (fast) modes send no telemetry events
            for row in m.series:
                self._add_row(mv, row)
        if len(mv.steps) < len(m.all_steps):
            mv.steps = _step_dicts(m)

    def _on_run_finished(self, _name: str | None, doc: dict[str, Any]) -> None:
        r = Run.view(doc)
        run = r.run or RunInfo()
        self.comparison = r.comparison
        self.stop_reason = run.stop_reason
        self.status = "finished" if run.finished else "stopped"
        from kvtui.report.outcome import NO_MODE_STARTED, no_mode_started

        if no_mode_started(doc):  # a failed run, not a finished one
            self.status, self.stop_reason = "failed", NO_MODE_STARTED
        self.step = None
        for m in r.all_modes:
            mv = self.modes.get(m.name) if m.name is not None else None
            if mv is not None and mv.status in ("starting", "running", "waiting"):
                self._finish_mode(mv, m)
        for mv in self.modes.values():
            if mv.status == "waiting":
                mv.status = "not run"
        self._bump(steps=True, header=True)

    def _on_warning(self, name: str | None, text: Any) -> None:
        self.notices.append(("warning", f"{name + ': ' if name else ''}{text}"))
        self._append_log(name, f"kvtui: warning: {text}", "warning")
        self.version += 1

    def _on_note(self, name: str | None, text: Any) -> None:
        self._append_log(name, f"kvtui: {text}", "kvtui")  # news, not a fault: logged, no warning toast
        self.version += 1

    def _on_error(self, name: str | None, text: Any) -> None:
        self.notices.append(("error", f"{name + ': ' if name else ''}{text}"))
        self._append_log(name, f"kvtui: error: {text}", "error")
        self.version += 1


# The state's handler for each event class (kvtui.explore.events.EVENT_TYPES: every class has one,
# tests/core/test_events.py checks it).
HANDLERS: dict[type[events.Event], Callable[[RunEvents, str | None, Any], None]] = {
    events.RunStarted: RunEvents._on_run_started,
    events.ModeStarting: RunEvents._on_mode_starting,
    events.Log: RunEvents._on_log,
    events.EngineReady: RunEvents._on_engine_ready,
    events.Telemetry: RunEvents._on_telemetry,
    events.StepStarted: RunEvents._on_step_started,
    events.StepProgress: RunEvents._on_step_progress,
    events.QualityStarted: RunEvents._on_quality_started,
    events.QualityMeasured: RunEvents._on_quality,
    events.Records: RunEvents._on_records,
    events.StepFinished: RunEvents._on_step_finished,
    events.ModeUpdated: RunEvents._on_mode_updated,
    events.ModeFinished: RunEvents._on_mode_finished,
    events.RunFinished: RunEvents._on_run_finished,
    events.RunWarning: RunEvents._on_warning,
    events.RunNote: RunEvents._on_note,
    events.RunError: RunEvents._on_error,
}
_BY_KIND: dict[str, type[events.Event]] = {t.kind: t for t in events.EVENT_TYPES}
# The events whose handlers read the typed event, not its `data` payload.
TYPED: frozenset[type[events.Event]] = frozenset({events.StepStarted, events.StepProgress})


class SnapshotLoading(StateHost):
    """Replay: a saved document, every mode at once."""

    def _load_mode(self, md: Mode | Mapping[str, Any], kept: bool = False) -> ModeView:
        m = Mode.of(md)
        mv = self._mode(m.name or f"mode{len(self.modes)}")
        assert mv is not None
        mv.index = m.index if m.index is not None else mv.index
        mv.settings = m.settings or {}
        mv.engine = m.engine or ""
        mv.simulated = bool(m.simulated)
        mv.steps = _step_dicts(m)
        mv.records_file = m.records_file
        mv.series = Series()
        mv._last_preempt = None
        for row in m.series or []:
            if isinstance(row, dict):
                self._add_row(mv, row)
        self._finish_mode(mv, m)
        if kept:
            mv.status = "kept"
        elif not m.complete and not mv.error:
            mv.status = "stopped"
        return mv

    def load_snapshot(self, doc: dict[str, Any]) -> None:
        """Show a saved run (replay): every mode, cursor on the last step of the first mode."""
        run = Run.view(doc)
        self.doc = doc
        self.replay = True
        self.status = "replay"
        self.scenario = run.scenario or {}
        self.environment = run.environment or Environment()
        self.slo = slo_of(self.scenario)
        self.comparison = run.comparison
        self.stop_reason = (run.run or RunInfo()).stop_reason
        self.modes = {}
        for m in run.all_modes:
            self._load_mode(m)
        self.current = next(iter(self.modes), None)
        self.viewing = self.current
        mv = self.viewed
        self.cursor = (len(mv.steps) - 1) if mv and mv.steps else None
        path = doc.get("_path")  # where the reader found it (kvtui.io.snapshot.file): not a key of the run's
        self.source_name = Path(path).name if path else ""
        rec = run.records
        if rec and path:
            p = Path(rec)
            self.records_path = p if p.is_absolute() else Path(path).with_name(p.name)
        for w in run.load_warnings or []:
            self.notices.append(("warning", w))
        self._replay_log(run)
        self._bump(steps=True, header=True)

    def _replay_log(self, run: Run) -> None:
        """Snapshots keep no server log; the log pane shows what they do keep about each server."""
        self._append_log(None, "replay: the server's own log is not stored in snapshots; what the snapshot keeps:",
                         "kvtui")
        for m in run.all_modes:
            name = m.name
            info, f = m.info, m.facts
            if info.command:
                self._append_log(name, "command: " + " ".join(map(str, info.command)), "")
            if f:
                self._append_log(name, f"startup {as_stored(f, 'startup_s')} s: weights {as_stored(f, 'weights_gib')} "
                                       f"GiB, KV cache {as_stored(f, 'kv_cache_gib')} GiB = "
                                       f"{as_stored(f, 'kv_cache_tokens')} tokens, "
                                       f"max concurrency reported {as_stored(f, 'max_concurrency_reported')}", "fact")
                from kvtui.runtime.engines.vllm.compile_cache import start_line

                if start_line(f):
                    self._append_log(name, "start: " + start_line(f), "fact")
                if f.phases:
                    self._append_log(name, "phases: " + " → ".join(f.phases), "fact")
                for w in f.warnings or []:
                    self._append_log(name, f"warning: {w}", "warning")
            err = m.error
            if err is not None:
                self._append_log(name, f"error ({err.kind}): {err.message}", "error")
                for line in str(err.log_tail or "").splitlines()[-40:]:
                    self._append_log(name, line)
            search = m.search or Search()
            if search.describe:
                self._append_log(name, f"search ({search.strategy}): {search.describe}", "kvtui")
        for w in run.warnings or []:
            self._append_log(None, f"warning: {w}", "warning")


def _step_dicts(m: Mode) -> list[dict[str, Any]]:
    """The mode's steps as the state keeps them: dicts of their own, as the snapshot holds them
    (the search's replay and the SLO's re-evaluation, kvtui.explore, read dicts)."""
    return [s.to_dict() for s in m.all_steps]

