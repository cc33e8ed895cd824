"""The data the dashboard shows, apart from any widget: what a run reported, bounded.

`RunState` ingests the run's `Event`s (on the UI thread, from messages) or a whole
snapshot document (replay), and keeps per mode: the startup facts, the steps as measured,
the steps re-evaluated under an edited SLO, and the telemetry as a bounded columnar
series that views downsample to their width. Widgets read it; nothing here draws.

Every mutation bumps a version counter, so a view redraws only what changed.
"""

from __future__ import annotations

import collections
import math
import re
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from kvtui.explore.evaluate import LIMIT_WORDS
from kvtui.explore.search import best_load  # noqa: F401 - the knee rule lives with the search
from kvtui.scenario.schema import SLO_KEY, Slo

SERIES_MAX = 4000  # rows per mode before the series is thinned 2:1
LOG_MAX = 3000  # server log lines kept
NOTICES_MAX = 200

# What the charts and sparklines read from a telemetry row.
SERIES_KEYS = ("kv_usage", "running", "waiting", "preempt", "gen_tok_s", "prompt_tok_s", "kv_in_use_gib",
               "gpu_mem_used_gib", "gpu_mem_total_gib", "load")

# Log lines worth a highlight: vLLM's startup facts and milestones (and the simulator's copies).
_FACT_LINE = re.compile(
    r"(Model loading took|model weights took|Available KV cache memory|KV cache size|Maximum concurrency|"
    r"CUDA graph|Graph capturing|torch\.compile|Compil(ed|ing)|init engine|Starting vLLM API server|"
    r"Application startup complete|Using .*backend|vLLM API server version|SIMULATED vLLM|kv_cache_dtype|"
    r"Loading weights|Loading safetensors)", re.I)
_WARN_LINE = re.compile(r"\b(WARNING|WARN)\b")
_ERR_LINE = re.compile(r"\b(ERROR|CRITICAL|Traceback|Exception|Error:)\b")


def classify_log_line(line: str) -> str:
    """'error', 'warning', 'fact' (a vLLM startup line worth highlighting) or ''."""
    if _ERR_LINE.search(line):
        return "error"
    if _WARN_LINE.search(line):
        return "warning"
    if _FACT_LINE.search(line):
        return "fact"
    return ""


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    if math.isnan(x):
        return None
    return float(x)


class Series:
    """A bounded columnar time series: `t` plus named columns (None where a row lacked the key)."""

    def __init__(self, maxlen: int = SERIES_MAX):
        self.maxlen = maxlen
        self.t: list[float] = []
        self.cols: dict[str, list[float | None]] = {}
        self.version = 0

    def __len__(self) -> int:
        return len(self.t)

    def append(self, t: float, values: dict[str, Any]) -> None:
        n = len(self.t)
        self.t.append(t)
        for k, v in values.items():
            col = self.cols.get(k)
            if col is None:
                col = self.cols[k] = [None] * n
            col.append(_num(v))
        for col in self.cols.values():
            if len(col) < n + 1:
                col.append(None)
        if len(self.t) > self.maxlen:
            self.t = self.t[::2]
            for k in self.cols:
                self.cols[k] = self.cols[k][::2]
        self.version += 1

    def last(self, key: str) -> float | None:
        col = self.cols.get(key)
        if not col:
            return None
        for v in reversed(col):
            if v is not None:
                return v
        return None

    def end_index(self, t_max: float | None) -> int:
        return len(self.t) if t_max is None else bisect_right(self.t, t_max)

    def view(self, key: str, buckets: int, t_max: float | None = None, how: str = "max") -> tuple[list[float], list[float]]:
        """(xs, ys) of one column up to t_max, downsampled to at most `buckets` points.

        Each bucket keeps its max (gauges: a spike must not vanish) or mean (rates).
        """
        col = self.cols.get(key)
        end = self.end_index(t_max)
        if not col or end == 0:
            return [], []
        ts, vs = self.t[:end], col[:end]
        pairs = [(t, v) for t, v in zip(ts, vs) if v is not None]
        return downsample(pairs, buckets, how)

    def values(self, key: str, t_max: float | None = None) -> list[float]:
        col = self.cols.get(key) or []
        return [v for v in col[: self.end_index(t_max)] if v is not None]


def downsample(pairs: list[tuple[float, float]], buckets: int, how: str = "max") -> tuple[list[float], list[float]]:
    """Reduce (x, y) points to ≤ `buckets` by grouping neighbours (max or mean of y, last x)."""
    n = len(pairs)
    if n == 0:
        return [], []
    buckets = max(1, int(buckets))
    if n <= buckets:
        return [p[0] for p in pairs], [p[1] for p in pairs]
    xs: list[float] = []
    ys: list[float] = []
    for b in range(buckets):
        lo = b * n // buckets
        hi = (b + 1) * n // buckets
        if hi <= lo:
            continue
        chunk = pairs[lo:hi]
        vals = [p[1] for p in chunk]
        xs.append(chunk[-1][0])
        ys.append(max(vals) if how == "max" else sum(vals) / len(vals))
    return xs, ys


@dataclass
class ModeView:
    """One precision mode as the dashboard knows it."""

    name: str
    index: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    engine: str = ""
    simulated: bool = False
    server: dict[str, Any] = field(default_factory=dict)  # startup facts
    info: dict[str, Any] = field(default_factory=dict)  # engine info (version, time scale, dummy weights)
    steps: list[dict[str, Any]] = field(default_factory=list)  # as measured, under the run's SLO
    view_steps: dict[int, dict[str, Any]] = field(default_factory=dict)  # step index → re-evaluated step
    run_best: float | None = None  # the search's answer (set when the mode finished)
    search: dict[str, Any] = field(default_factory=dict)
    predicted_kv: float | None = None
    knee_limited_by: str | None = None
    series: Series = field(default_factory=Series)
    status: str = "waiting"  # waiting, starting, running, done, failed, skipped, stopped, kept
    phase: str = ""  # startup phase (from the log)
    error: str | None = None
    t_start: float | None = None
    started_mono: float | None = None  # when the engine start began (live)
    records_file: str | None = None  # resumed modes keep the earlier run's records
    parser: Any = None  # StartupLogParser while the engine starts
    _last_preempt: float | None = None

    def shown_steps(self, edited: bool) -> list[dict[str, Any]]:
        if not edited:
            return self.steps
        return [self.view_steps.get(s.get("index", i), s) for i, s in enumerate(self.steps)]


def slo_from_table(table: dict[str, Any]) -> Slo:
    """Validate an SLO table with the scenario loader's rules (raises ScenarioError)."""
    from kvtui.scenario.loader import scenario_from_dict

    return scenario_from_dict({"slo": table}, source="SLO").slo


def slo_table(slo: Slo) -> dict[str, Any]:
    d: dict[str, Any] = dict(slo.latency)
    d["max_error_rate"] = slo.max_error_rate
    if slo.min_goodput:
        d["min_goodput"] = slo.min_goodput
    if slo.max_preemptions_per_request is not None:
        d["max_preemptions_per_request"] = slo.max_preemptions_per_request
    return d


def slo_of(scenario: dict[str, Any] | None) -> Slo:
    sd = (scenario or {}).get("slo") or {}
    slo = Slo()
    lat = sd.get("latency")
    if isinstance(lat, dict) and all(SLO_KEY.match(k) for k in lat):
        slo.latency = {k: float(v) for k, v in lat.items()}
    if isinstance(sd.get("max_error_rate"), (int, float)):
        slo.max_error_rate = float(sd["max_error_rate"])
    if isinstance(sd.get("min_goodput"), (int, float)):
        slo.min_goodput = float(sd["min_goodput"])
    if isinstance(sd.get("max_preemptions_per_request"), (int, float)):
        slo.max_preemptions_per_request = float(sd["max_preemptions_per_request"])
    return slo


class RunState:
    """Everything the dashboard shows, fed by events (live) or a snapshot (replay)."""

    def __init__(self) -> None:
        self.doc: dict[str, Any] = {}
        self.scenario: dict[str, Any] = {}
        self.environment: dict[str, Any] = {}
        self.modes: dict[str, ModeView] = {}
        self.current: str | None = None  # mode the run is on
        self.viewing: str | None = None  # mode the user picked (None: follow the run)
        self.status = "idle"  # idle, starting, running, paused, stopping, finished, stopped, failed, replay
        self.step: dict[str, Any] | None = None  # the step in progress
        self.progress: dict[str, Any] = {}
        self.records_seen = 0
        self.slo: Slo = Slo()  # the run's (scenario's) SLO
        self.view_slo: Slo | None = None  # an SLO edited on screen; None = the run's
        self.slo_note: str | None = None
        self.log: collections.deque[tuple[str | None, str, str]] = collections.deque(maxlen=LOG_MAX)
        self.log_total = 0  # lines ever appended (views track what they have shown)
        self.notices: collections.deque[tuple[str, str]] = collections.deque(maxlen=NOTICES_MAX)
        self.comparison: dict[str, Any] | None = None
        self.replay = False
        self.source_name = ""  # snapshot file name (replay)
        self.records_path: Path | None = None
        self.cursor: int | None = None  # replay: index of the last step shown in the viewed mode
        self.finished_at: float | None = None
        self.stop_reason: str | None = None
        self.version = 0  # any change
        self.steps_version = 0
        self.header_version = 0
        self.slo_version = 0

    # -- helpers ----------------------------------------------------------------------------
    def _bump(self, steps: bool = False, header: bool = False) -> None:
        self.version += 1
        if steps:
            self.steps_version += 1
        if header:
            self.header_version += 1

    @property
    def closed(self) -> bool:
        return ((self.scenario.get("ramp") or {}).get("load") or "concurrency") == "concurrency"

    @property
    def load_word(self) -> str:
        return "c" if self.closed else "req/s"

    @property
    def edited(self) -> bool:
        return self.view_slo is not None

    @property
    def shown_slo(self) -> Slo:
        return self.view_slo or self.slo

    @property
    def mode_names(self) -> list[str]:
        return list(self.modes)

    @property
    def viewed(self) -> ModeView | None:
        name = self.viewing if self.viewing in self.modes else self.current
        if name is None and self.modes:
            name = next(iter(self.modes))
        return self.modes.get(name) if name else None

    def _mode(self, name: str | None) -> ModeView | None:
        if name is None:
            return None
        mv = self.modes.get(name)
        if mv is None:
            mv = self.modes[name] = ModeView(name=name, index=len(self.modes))
        return mv

    def note(self, level: str, text: str) -> None:
        self.notices.append((level, text))
        self._append_log(None, f"kvtui: {level}: {text}", level if level in ("warning", "error") else "kvtui")

    def _append_log(self, mode: str | None, line: str, kind: str | None = None) -> None:
        self.log.append((mode, line, classify_log_line(line) if kind is None else kind))
        self.log_total += 1

    def cycle_view(self, delta: int = 1) -> str | None:
        names = self.mode_names
        if not names:
            return None
        cur = self.viewed.name if self.viewed else names[0]
        i = (names.index(cur) + delta) % len(names)
        self.viewing = names[i]
        self.cursor = None if not self.replay else len(self.modes[names[i]].steps) - 1
        self._bump(steps=True, header=True)
        return self.viewing

    # -- the things views ask --------------------------------------------------------------
    def steps_of(self, mv: ModeView, upto_cursor: bool = True) -> list[dict[str, Any]]:
        steps = mv.shown_steps(self.edited)
        if upto_cursor and self.replay and self.cursor is not None and mv is self.viewed:
            steps = steps[: self.cursor + 1]
        return steps

    def best(self, mv: ModeView | None, upto_cursor: bool = True) -> float | None:
        """The best load so far: the search's answer once the mode is done under the run's SLO."""
        if mv is None:
            return None
        partial = (upto_cursor and self.replay and self.cursor is not None and mv is self.viewed
                   and self.cursor < len(mv.steps) - 1)
        if not self.edited and not partial and "best" in mv.search:
            return mv.run_best
        return best_load(self.steps_of(mv, upto_cursor))

    def t_max(self) -> float | None:
        """Replay: the end of the selected step (series are cut there); live: None."""
        mv = self.viewed
        if not self.replay or mv is None or self.cursor is None or not mv.steps:
            return None
        if self.cursor >= len(mv.steps) - 1:
            return None
        return mv.steps[self.cursor].get("t_rel_end")

    def labels(self) -> dict[str, Any]:
        """The caveats that travel with every figure."""
        env = self.environment
        mv = self.viewed
        info = (mv.info if mv else {}) or {}
        server = (mv.server if mv else {}) or {}
        version = info.get("version")
        if not version:
            vs = sorted({(m.info or {}).get("version") for m in self.modes.values() if (m.info or {}).get("version")})
            version = ", ".join(vs) if vs else None
        warnings = list(server.get("warnings") or [])
        return {
            "scenario": self.scenario.get("name") or "—",
            "mode": mv.name if mv else "—",
            "mode_pos": f"{mv.index + 1}/{len(self.modes)}" if mv else "",
            "engine": env.get("engine") or (mv.engine if mv else "") or (self.scenario.get("server") or {}).get("engine") or "—",
            "gpu": ", ".join(env.get("gpu_names") or []) or "—",
            "version": version or "—",
            "simulated": bool(env.get("simulated") or (mv.simulated if mv else False)),
            "dummy_weights": bool(info.get("dummy_weights")),
            "time_scale": info.get("time_scale") or 1.0,
            "warnings": warnings,
        }

    # -- live events --------------------------------------------------------------------------
    def ingest(self, ev: Any) -> None:
        k, name, data = ev.kind, ev.mode, ev.data
        handler: Callable[[str | None, Any], None] | None = getattr(self, f"_on_{k}", None)
        if handler is not None:
            handler(name, data)

    def _on_run_started(self, _name: str | None, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.scenario = doc.get("scenario") or {}
        self.environment = doc.get("environment") or {}
        self.slo = slo_of(self.scenario)
        self.status = "running"
        requested = (doc.get("run") or {}).get("modes_requested") or []
        for m in doc.get("modes") or []:  # modes kept from a resumed snapshot
            self._load_mode(m, kept=True)
        for n in requested:
            self._mode(n)
        self._bump(steps=True, header=True)

    def _on_mode_starting(self, name: str | None, data: dict[str, Any]) -> None:
        mv = self._mode(name)
        if mv is None:
            return
        md = data.get("mode") or {}
        mv.index = data.get("index", mv.index)
        mv.settings = md.get("settings") or {}
        mv.engine = md.get("engine") or ""
        mv.simulated = bool(md.get("simulated"))
        mv.status = "starting"
        mv.t_start = self.series_t_now(mv)
        mv.started_mono = time.monotonic()
        from kvtui.engines.vllm.logparse import StartupLogParser

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

    def _on_engine_ready(self, name: str | None, data: dict[str, Any]) -> None:
        mv = self._mode(name)
        if mv is None:
            return
        mv.server = dict(data.get("facts") or {})
        mv.info = dict(data.get("info") or {})
        mv.status = "running"
        mv.phase = "ready"
        mv.parser = None
        if mv.predicted_kv is None:
            mv.predicted_kv = self.kv_bound(mv.server.get("kv_cache_tokens"))
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

    def _on_step_started(self, name: str | None, data: dict[str, Any]) -> None:
        self.step = {"mode": name, **data}
        self.progress = {}
        self._bump(header=True)

    def _on_step_progress(self, name: str | None, data: dict[str, Any]) -> None:
        self.progress = data
        self.version += 1

    def _on_records(self, name: str | None, recs: Any) -> None:
        try:
            self.records_seen += len(recs)
        except TypeError:
            pass

    def _on_step_finished(self, name: str | None, step: dict[str, Any]) -> None:
        mv = self._mode(name)
        if mv is None:
            return
        mv.steps.append(dict(step))
        self.step = None
        self.progress = {}
        self._bump(steps=True, header=True)

    def _on_mode_finished(self, name: str | None, md: dict[str, Any]) -> None:
        mv = self._mode(name)
        if mv is None:
            return
        self._finish_mode(mv, md)
        self._bump(steps=True, header=True)

    def _finish_mode(self, mv: ModeView, md: dict[str, Any]) -> None:
        mv.search = dict(md.get("search") or {})
        mv.run_best = md.get("best_concurrency")
        mv.predicted_kv = md.get("predicted_kv_concurrency")
        mv.knee_limited_by = md.get("knee_limited_by")
        if md.get("server"):
            mv.server = dict(md["server"])
        if md.get("engine_info"):
            mv.info = dict(md["engine_info"])
        err = md.get("error")
        mv.error = (err or {}).get("message") if isinstance(err, dict) else (str(err) if err else None)
        if mv.error:
            mv.status = "failed"
        elif mv.search.get("skipped"):
            mv.status = "skipped"
        elif md.get("complete") is False:
            mv.status = "stopped"
        else:
            mv.status = "done"
        mv.parser = None
        if len(mv.series) == 0 and md.get("series"):  # offline (fast) modes send no telemetry events
            for row in md["series"]:
                self._add_row(mv, row)
        if len(mv.steps) < len(md.get("steps") or []):
            mv.steps = [dict(s) for s in md["steps"]]

    def _on_run_finished(self, _name: str | None, doc: dict[str, Any]) -> None:
        run = doc.get("run") or {}
        self.comparison = doc.get("comparison")
        self.stop_reason = run.get("stop_reason")
        self.status = "finished" if run.get("finished") else "stopped"
        self.finished_at = time.time()
        self.step = None
        for m in doc.get("modes") or []:
            mv = self.modes.get(m.get("name"))
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

    def _on_error(self, name: str | None, text: Any) -> None:
        self.notices.append(("error", f"{name + ': ' if name else ''}{text}"))
        self._append_log(name, f"kvtui: error: {text}", "error")
        self.version += 1

    # -- replay --------------------------------------------------------------------------------
    def _load_mode(self, m: dict[str, Any], kept: bool = False) -> ModeView:
        mv = self._mode(m.get("name") or f"mode{len(self.modes)}")
        assert mv is not None
        mv.index = m.get("index", mv.index)
        mv.settings = m.get("settings") or {}
        mv.engine = m.get("engine") or ""
        mv.simulated = bool(m.get("simulated"))
        mv.steps = [dict(s) for s in m.get("steps") or []]
        mv.records_file = m.get("records_file")
        mv.series = Series()
        mv._last_preempt = None
        for row in m.get("series") or []:
            if isinstance(row, dict):
                self._add_row(mv, row)
        self._finish_mode(mv, m)
        if kept:
            mv.status = "kept"
        elif not m.get("complete") and not mv.error:
            mv.status = "stopped"
        return mv

    def load_snapshot(self, doc: dict[str, Any]) -> None:
        """Show a saved run (replay): every mode, cursor on the last step of the first mode."""
        self.doc = doc
        self.replay = True
        self.status = "replay"
        self.scenario = doc.get("scenario") or {}
        self.environment = doc.get("environment") or {}
        self.slo = slo_of(self.scenario)
        self.comparison = doc.get("comparison")
        self.stop_reason = (doc.get("run") or {}).get("stop_reason")
        self.modes = {}
        for m in doc.get("modes") or []:
            if isinstance(m, dict):
                self._load_mode(m)
        self.current = next(iter(self.modes), None)
        self.viewing = self.current
        mv = self.viewed
        self.cursor = (len(mv.steps) - 1) if mv and mv.steps else None
        path = doc.get("_path")
        self.source_name = Path(path).name if path else ""
        rec = doc.get("records")
        if rec and path:
            p = Path(rec)
            self.records_path = p if p.is_absolute() else Path(path).with_name(p.name)
        for w in doc.get("load_warnings") or []:
            self.notices.append(("warning", w))
        self._replay_log(doc)
        self._bump(steps=True, header=True)

    def _replay_log(self, doc: dict[str, Any]) -> None:
        """Snapshots keep no server log; the log pane shows what they do keep about each server."""
        self._append_log(None, "replay: the server's own log is not stored in snapshots; what the snapshot keeps:", "kvtui")
        for m in doc.get("modes") or []:
            name = m.get("name")
            info = m.get("engine_info") or {}
            f = m.get("server") or {}
            if info.get("command"):
                self._append_log(name, "command: " + " ".join(map(str, info["command"])), "")
            if f:
                self._append_log(name, f"startup {f.get('startup_s', '—')} s: weights {f.get('weights_gib', '—')} GiB, "
                                       f"KV cache {f.get('kv_cache_gib', '—')} GiB = {f.get('kv_cache_tokens', '—')} tokens, "
                                       f"max concurrency reported {f.get('max_concurrency_reported', '—')}", "fact")
                if f.get("phases"):
                    self._append_log(name, "phases: " + " → ".join(f["phases"]), "fact")
                for w in f.get("warnings") or []:
                    self._append_log(name, f"warning: {w}", "warning")
            err = m.get("error")
            if isinstance(err, dict):
                self._append_log(name, f"error ({err.get('kind')}): {err.get('message')}", "error")
                for line in str(err.get("log_tail") or "").splitlines()[-40:]:
                    self._append_log(name, line)
            search = m.get("search") or {}
            if search.get("describe"):
                self._append_log(name, f"search ({search.get('strategy')}): {search['describe']}", "kvtui")
        for w in doc.get("warnings") or []:
            self._append_log(None, f"warning: {w}", "warning")

    def move_cursor(self, delta: int | None = None, to: int | None = None) -> int | None:
        mv = self.viewed
        if mv is None or not mv.steps:
            return None
        n = len(mv.steps)
        cur = n - 1 if self.cursor is None else self.cursor
        new = to if to is not None else cur + (delta or 0)
        new = max(0, min(n - 1, new if new >= 0 else n + new))
        if new != self.cursor:
            self.cursor = new
            self._bump(steps=True, header=True)
        return self.cursor

    # -- SLO re-evaluation ---------------------------------------------------------------------
    def records_file_for(self, mv: ModeView) -> Path | None:
        if mv.records_file:
            return Path(mv.records_file)
        return self.records_path

    def set_view_slo(self, slo: Slo | None, results: dict[str, dict[int, dict[str, Any]]] | None = None,
                     note: str | None = None) -> None:
        """Show the steps under `slo` (None: back to the run's SLO), with re-evaluated steps."""
        self.view_slo = slo
        self.slo_note = note
        for mv in self.modes.values():
            mv.view_steps = dict((results or {}).get(mv.name, {})) if slo is not None else {}
        self.slo_version += 1
        self._bump(steps=True, header=True)

    def merge_view_steps(self, results: dict[str, dict[int, dict[str, Any]]]) -> None:
        for name, by_index in results.items():
            mv = self.modes.get(name)
            if mv is not None:
                mv.view_steps.update(by_index)
        self._bump(steps=True, header=True)

    def export_doc(self, base: dict[str, Any] | None = None) -> dict[str, Any]:
        """The document as shown: the run's (or the snapshot's), with an edited SLO applied."""
        import copy

        doc = copy.deepcopy(base if base is not None else self.doc)
        doc.pop("_path", None)
        for m in doc.get("modes") or []:
            mv = self.modes.get(m.get("name"))
            if mv is None:
                continue
            if not m.get("series") and len(mv.series):
                m["series"] = [
                    {"t": t, **{k: col[i] for k, col in mv.series.cols.items() if col[i] is not None and k != "preempt"}}
                    for i, t in enumerate(mv.series.t)
                ]
            if self.edited:
                m["steps"] = [copy.deepcopy(s) for s in mv.shown_steps(True)]
                m["best_concurrency_at_run_slo"] = m.get("best_concurrency")
                m["best_concurrency"] = best_load(m["steps"])
        if self.edited:
            from kvtui.report.compare import compare_modes

            doc["reevaluated"] = {
                "slo": slo_table(self.view_slo),
                "run_slo": slo_table(self.slo),
                "note": "pass/fail and best concurrency recomputed from the per-request records under this SLO; "
                        "the search ran under run_slo",
            }
            doc["comparison"] = compare_modes(doc, doc.get("scenario"))
        elif "comparison" not in doc:
            from kvtui.report.compare import compare_modes

            doc["comparison"] = compare_modes(doc, doc.get("scenario"))
        return doc


def reevaluate_modes(modes: list[tuple[str, list[dict[str, Any]], Path | None]], slo: Slo,
                     only: set[tuple[str, int]] | None = None) -> tuple[dict[str, dict[int, dict[str, Any]]], list[str]]:
    """Re-evaluate steps under `slo` from the records sidecar(s). Pure; runs off the UI thread.

    `modes` is [(mode name, steps, records path)]. Returns ({mode: {step index: step}}, problems).
    """
    from kvtui.explore.evaluate import reevaluate
    from kvtui.load.records import read_records

    wanted: dict[Path, set[str]] = {}
    problems: list[str] = []
    for name, _steps, path in modes:
        if path is None:
            problems.append(f"{name}: no per-request records file: verdicts kept as measured")
            continue
        wanted.setdefault(path, set()).add(name)
    grouped: dict[tuple[str, int], list[Any]] = collections.defaultdict(list)
    for path, names in wanted.items():
        try:
            for r in read_records(path):
                if r.mode in names and (only is None or (r.mode, r.step) in only):
                    grouped[(r.mode, r.step)].append(r)
        except OSError as e:
            problems.append(f"cannot read the records {path}: {e.strerror or e}; verdicts kept as measured")
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for name, steps, path in modes:
        if path is None:
            continue
        for i, s in enumerate(steps):
            idx = s.get("index", i)
            if only is not None and (name, idx) not in only:
                continue
            recs = grouped.get((name, idx))
            if not recs or "t_window_start" not in s:
                continue
            try:
                new = reevaluate(s, recs, slo)
            except (KeyError, TypeError, ValueError) as e:
                problems.append(f"{name} step {idx}: cannot re-evaluate ({type(e).__name__}: {e})")
                continue
            for key, v in s.items():  # keep what re-evaluation does not recompute (why, times, tokens)
                new.setdefault(key, v)
            out.setdefault(name, {})[idx] = new
    return out, problems


def limit_word(step: dict[str, Any]) -> str:
    lim = step.get("limited_by") or ""
    return LIMIT_WORDS.get(lim, lim) or "—"
