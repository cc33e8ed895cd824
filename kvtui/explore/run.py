"""The run: for each precision mode, start the engine, search for the max load at SLO, stop it.

The same `Run` serves the headless command and the TUI (which runs it in a worker
thread). It knows nothing of the screen: it reports through `listener(Event)`, called
from the run thread and from the telemetry thread — a UI must marshal to its own thread.

Controls (thread-safe): stop, skip_mode, pause/resume, hold, nudge(±1).
"""

from __future__ import annotations

import dataclasses
import platform
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kvtui import __version__
from kvtui.engines.base import Endpoint, StartupFacts
from kvtui.errors import EngineError, KvtuiError, RunAborted, UsageError
from kvtui.explore.evaluate import StepContext, evaluate_step, ran_to_its_end
from kvtui.explore.search import make_search, ramp_levels
from kvtui.load.generator import LoadGenerator, WorkerConfig
from kvtui.load.records import Record, iter_record_lines, write_records
from kvtui.report.diff import setting_changes
from kvtui.report.redact import Redactor
from kvtui.report.snapshot import SCHEMA, SnapshotWriter, ran_on_devices
from kvtui.scenario.schema import Mode, Scenario

SERIES_MAX = 7200  # rows per mode before the series is thinned 2:1


@dataclass
class Event:
    kind: str  # run_started, mode_starting, log, engine_ready, telemetry, step_started, step_progress,
    #            records, step_finished, mode_finished, run_finished, warning, error
    mode: str | None = None
    data: Any = None


Listener = Callable[[Event], None]


def make_engine(name: str):
    if name == "external":
        from kvtui.engines.external import ExternalEngine

        return ExternalEngine()
    if name == "sim":
        from kvtui.engines.sim.engine import SimEngine

        return SimEngine()
    if name == "vllm":
        from kvtui.engines.vllm.launcher import VllmEngine

        return VllmEngine()
    raise UsageError(f"unknown engine {name!r}")


def _mean_request_tokens(scenario: Scenario) -> float:
    w = scenario.workload
    def mean(ln) -> float:
        if ln.dist == "fixed":
            return ln.value
        if ln.dist == "uniform":
            return (ln.min + ln.max) / 2
        return ln.mean
    return (mean(w.prompt_tokens) + mean(w.output_tokens)) * w.turns


class _Telemetry(threading.Thread):
    """Scrapes /metrics (≤ 1 Hz), reads NVML (through its own sampler thread), checks liveness."""

    def __init__(self, run: "Run", engine: Any, endpoint: Endpoint, facts: StartupFacts, mode: str, interval_s: float = 1.0):
        super().__init__(name="kvtui-telemetry", daemon=True)
        from kvtui.telemetry.prom import MetricsScraper

        self.run_ = run
        self.engine = engine
        self.mode = mode
        self.facts = facts
        self.interval_s = interval_s
        self.scraper = MetricsScraper(endpoint.metrics_url, endpoint.api_key, timeout_s=5.0) if endpoint.metrics_url else None
        self.samples: list[Any] = []  # MetricsSample, bounded
        self.rows: list[dict[str, Any]] = []
        self.dead: str | None = None
        self._dead_lock = threading.Lock()
        self.metrics_error: str | None = None
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self.nvml = None
        self.gpu_latest: list[Any] = []
        pids = getattr(engine, "pids", None)
        if not getattr(engine, "simulated", False):
            from kvtui.telemetry.nvml import NvmlSampler, process_tree_provider

            roots = sorted(pids()) if pids else []
            providers = [process_tree_provider(p) for p in roots]

            def provider() -> set[int]:
                out: set[int] = set()
                for prov in providers:
                    out |= prov()
                return out

            self.nvml = NvmlSampler(interval_s=interval_s, pids_provider=provider if providers else None,
                                    on_unavailable=self._nvml_gone)
        self.load = 0.0
        self.phase = "startup"

    def _nvml_gone(self, reason: str) -> None:
        self.run_._emit("warning", self.mode, reason)

    def scrape_now(self):
        if self.scraper is None:
            return None
        with self._lock:
            s = self.scraper.scrape()
        if not s.ok:
            if s.error != self.metrics_error:
                self.metrics_error = s.error
                self.run_._emit("warning", self.mode, s.error)
        else:
            self.metrics_error = None
        return s

    def run(self) -> None:
        if self.nvml is not None:
            self.nvml.start()
        last_alive = 0.0
        prev = None
        while not self._halt.wait(self.interval_s):
            now = time.monotonic()
            s = self.scrape_now()
            if s is not None and s.ok:
                # window() reads only the gauges: a full scrape with its histograms is ~10 KB, and
                # 4000 of them grew a long run's memory by 40 MB (bench/soak.py, docs/SOAK.md).
                self.samples.append(dataclasses.replace(s, histograms={}, cache_config={}))
                if len(self.samples) > 4000:
                    del self.samples[: len(self.samples) // 2]
            row = self._row(s, prev)
            if s is not None and s.ok:
                prev = s
            self.rows.append(row)
            if len(self.rows) > SERIES_MAX:
                self.rows = self.rows[::2]
            self.run_._emit("telemetry", self.mode, row)
            if now - last_alive >= 1.0:
                last_alive = now
                self.confirm_alive()

    def confirm_alive(self) -> None:
        """Ask the engine now; on death record it once. Also called by the run after a step
        ended in errors: the errors can end a step before this thread's next 1 s poll."""
        reason = self.engine.check_alive()
        with self._dead_lock:
            if reason and not self.dead and not self._halt.is_set():  # not the stop we are making
                self.dead = reason
                self.run_._emit("error", self.mode, f"engine died: {reason}")

    def _row(self, s, prev) -> dict[str, Any]:
        t = time.monotonic() - self.run_.t0
        row: dict[str, Any] = {"t": round(t, 2), "load": self.load, "phase": self.phase}
        if s is not None and s.ok:
            row.update(kv_usage=s.kv_usage, running=s.running, waiting=s.waiting, preemptions=s.preemptions)
            if prev is not None and s.generation_tokens is not None and prev.generation_tokens is not None and s.t > prev.t:
                row["gen_tok_s"] = round((s.generation_tokens - prev.generation_tokens) / (s.t - prev.t), 1)
                if s.prompt_tokens is not None and prev.prompt_tokens is not None:
                    row["prompt_tok_s"] = round((s.prompt_tokens - prev.prompt_tokens) / (s.t - prev.t), 1)
            if s.kv_usage is not None and self.facts.kv_cache_gib:
                row["kv_in_use_gib"] = round(s.kv_usage * self.facts.kv_cache_gib, 3)
        sim_mem = getattr(self.engine, "gpu_memory", None)
        if sim_mem is not None:
            m = sim_mem()
            if m and m.get("used_gib") is not None:
                # The simulator models one GPU of the tensor-parallel group; every rank holds the same.
                tp = max(1, self.run_.scenario.server.tensor_parallel_size)
                row["gpus"] = [{"index": i, "mem_used_gib": m["used_gib"], "mem_total_gib": m.get("gpu_total_gib"), "simulated": True}
                               for i in range(tp)]
                row["gpu_mem_used_gib"] = round(m["used_gib"] * tp, 3)
                row["gpu_mem_total_gib"] = round((m.get("gpu_total_gib") or 0) * tp, 2)
        elif self.nvml is not None and self.nvml.available:
            g = self.nvml.latest()
            if g:
                self.gpu_latest = g
                row["gpus"] = [
                    {"index": x.index, "mem_used_gib": round(x.mem_used_gib, 3), "mem_total_gib": round(x.mem_total_gib, 2),
                     "util_pct": x.util_pct, "power_w": x.power_w, "sm_clock_mhz": x.sm_clock_mhz,
                     "proc_mem_gib": x.proc_mem_gib, "throttle": x.throttle}
                    for x in g
                ]
                used = [x for x in g if x.proc_mem_gib] or g
                row["gpu_mem_used_gib"] = round(sum(x.mem_used_gib for x in used), 3)
                row["gpu_mem_total_gib"] = round(sum(x.mem_total_gib for x in used), 2)
        return row

    def window(self, t0: float, t1: float) -> dict[str, Any]:
        """Gauge maxima/means over [t0, t1] (monotonic) from the scrapes."""
        inside = [s for s in self.samples if t0 <= s.t <= t1 + self.interval_s]
        out: dict[str, Any] = {}
        kv = [s.kv_usage for s in inside if s.kv_usage is not None]
        if kv:
            out["kv_usage_max"] = round(max(kv), 4)
            out["kv_usage_mean"] = round(sum(kv) / len(kv), 4)
        for key in ("running", "waiting"):
            vals = [getattr(s, key) for s in inside if getattr(s, key) is not None]
            if vals:
                out[f"{key}_max"] = max(vals)
        return out

    def gpu_mem_max(self, t0: float, t1: float) -> float | None:
        rows = [r for r in self.rows if t0 - self.run_.t0 <= r["t"] <= t1 - self.run_.t0 + self.interval_s]
        vals = [r["gpu_mem_used_gib"] for r in rows if r.get("gpu_mem_used_gib") is not None]
        return round(max(vals), 3) if vals else None

    def stop(self) -> None:
        self._halt.set()
        self.join(5)
        if self.nvml is not None:
            self.nvml.stop()
        if self.scraper is not None:
            self.scraper.close()


def _crashed(reason: str) -> dict[str, str]:
    return {"kind": "crashed", "message": f"engine died during the run: {reason}"}


def _record_key(line: str) -> tuple[str | None, int | None]:
    """(mode, step index) of one records line."""
    import json

    try:
        d = json.loads(line)
        return d.get("mode"), d.get("step")
    except (ValueError, AttributeError):
        return None, None  # a line cut by a crash mid-write


def _finished_steps(mode_doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A mode's steps up to the first one cut short (its verdict would be a stop's, not a measurement's)."""
    out = []
    for st in mode_doc.get("steps") or []:
        if not isinstance(st, dict) or not ran_to_its_end(st) or "load" not in st:
            break
        out.append(st)
    return out


class Run:
    def __init__(
        self,
        scenario: Scenario,
        out: str | Path,
        modes: list[str] | None = None,
        listener: Listener | None = None,
        resume: dict[str, Any] | list[dict[str, Any]] | None = None,
        fast: bool = False,
    ):
        self.scenario = scenario
        self.out = Path(out)
        self.listener = listener
        self.fast = fast
        names = modes or [m.name for m in scenario.modes]
        unknown = [n for n in names if n not in {m.name for m in scenario.modes}]
        if unknown:
            valid = ", ".join(m.name for m in scenario.modes)
            raise UsageError(f"--mode {unknown[0]}: no such mode in {scenario.source or 'the scenario'} (modes: {valid})")
        self.modes: list[Mode] = [scenario.mode(n) for n in names]
        # Snapshots to resume from, oldest first (a later one's mode wins over an earlier one's).
        self.resumes: list[dict[str, Any]] = [resume] if isinstance(resume, dict) else list(resume or [])
        self._partial: dict[str, dict[str, Any]] = {}  # mode name -> its interrupted doc, continued
        self._origin: dict[str, dict[str, Any]] = {}  # mode name -> the snapshot its kept data comes from
        self._prior_series: list[dict[str, Any]] = []
        self.closed = scenario.ramp.load == "concurrency"
        self.salt = secrets.randbits(32)
        self.t0 = time.monotonic()
        self.redactor = Redactor([scenario.server.api_key] + [v for k, v in scenario.server.env.items() if k in scenario.server.secret_env])
        # controls
        self._stop_reason: str | None = None
        self._skip = threading.Event()
        self._paused = threading.Event()
        self._hold = False
        self._nudge = 0
        self._lock = threading.Lock()
        self.engine = None
        self._starting = False  # engine.start() in progress (vLLM: minutes)
        self._cancel: threading.Thread | None = None
        self.loadgen: LoadGenerator | None = None
        self.telemetry: _Telemetry | None = None
        self.writer: SnapshotWriter | None = None
        self.doc: dict[str, Any] = {}
        self.current_mode: dict[str, Any] | None = None
        self.records_written = 0

    # -- controls (any thread) --------------------------------------------------------------
    def stop(self, reason: str = "stopped by the user") -> None:
        self._stop_reason = self._stop_reason or reason
        self._paused.clear()
        engine = self.engine
        if self._starting and engine is not None and self._cancel is None:
            # A start waits for /health (vLLM: minutes): end it now. From a thread, because this
            # may run in a signal handler on the very thread that waits in engine.start().
            self._cancel = threading.Thread(target=engine.stop, name="kvtui-cancel-start", daemon=True)
            self._cancel.start()

    def skip_mode(self) -> None:
        self._skip.set()

    def pause(self) -> None:
        self._paused.set()

    def unpause(self) -> None:
        self._paused.clear()

    @property
    def paused(self) -> bool:
        return self._paused.is_set()

    def hold(self, on: bool | None = None) -> bool:
        self._hold = (not self._hold) if on is None else on
        return self._hold

    def nudge(self, delta: int) -> None:
        with self._lock:
            self._nudge += delta

    @property
    def stopping(self) -> bool:
        return self._stop_reason is not None

    # -- events ------------------------------------------------------------------------------
    def _emit(self, kind: str, mode: str | None = None, data: Any = None) -> None:
        if self.listener is not None:
            try:
                self.listener(Event(kind, mode, data))
            except Exception as e:  # a listener bug must not kill the measurement
                if kind != "warning":
                    self._emit("warning", mode, f"listener failed on {kind}: {type(e).__name__}: {e}")

    # -- the document ------------------------------------------------------------------------
    def _environment(self) -> dict[str, Any]:
        from kvtui.telemetry.nvml import gpu_inventory

        env: dict[str, Any] = {
            "host": platform.node(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "kvtui_version": __version__,
            "engine": self.scenario.server.engine,
            "simulated": self.scenario.server.engine == "sim",
            "started_at": time.time(),
            "t0_epoch": time.time(),
        }
        if self.scenario.server.engine == "sim":
            env["gpu_names"] = [f"{self.scenario.server.gpu} (SIMULATED)"]
            env["gpu_count"] = self.scenario.server.tensor_parallel_size
        else:
            inv = gpu_inventory()
            env["gpu_names"] = [g["name"] for g in inv.gpus] or ["no GPU seen"]
            # Which physical devices: modes run in parallel on one host's GPUs, or on two hosts, and
            # joined by --resume carry this in their mode's "ran_on".
            env["gpu_uuids"] = [g["uuid"] for g in inv.gpus]
            env["gpu_indices"] = [g["index"] for g in inv.gpus]
            env["gpu_memory_gib"] = [round(g["mem_total_gib"], 2) for g in inv.gpus]
            env["driver"] = inv.driver_version
            env["cuda"] = inv.cuda_version
            env["gpu_count"] = len(inv.gpus)
            if not inv.available:
                env["gpu_telemetry"] = inv.reason
        return env

    def _new_doc(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "kvtui_version": __version__,
            "scenario": self.scenario.to_dict(),
            "environment": self._environment(),
            "run": {"salt": f"{self.salt:08x}", "fast": self.fast, "modes_requested": [m.name for m in self.modes],
                    "t0_monotonic": self.t0},
            "modes": [],
        }

    # -- main --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.doc = self._new_doc()
        kept: list[dict[str, Any]] = []
        if self.resumes:
            kept = self._take_resumed()
        self.doc["modes"] = list(kept)
        self.writer = SnapshotWriter(self.out, self.doc)
        if self.resumes:
            self._carry_records()
        for m in kept:
            self.writer.mode_finished(m)
        self._emit("run_started", None, self.doc)
        done = {m["name"] for m in kept}
        failure: BaseException | None = None
        try:
            for i, mode in enumerate(self.modes):
                if self.stopping:
                    break
                if mode.name in done:
                    self._emit("warning", mode.name, f"mode {mode.name} kept from the resumed snapshot")
                    continue
                self._skip.clear()
                self._run_mode(mode, i)
        except KeyboardInterrupt as e:
            self.stop("interrupted (Ctrl-C)")
            failure = e
        except BaseException as e:
            failure = e
            self.stop(f"kvtui failed: {type(e).__name__}: {e}")
            raise
        finally:
            self._teardown_mode()
            self._finalize(failure)
        return self.doc

    def _take_resumed(self) -> list[dict[str, Any]]:
        """The modes of the resumed snapshot(s) this run keeps, and those it continues.

        Kept: modes that finished, under the settings the scenario has now. Run again: modes
        that failed to start (the cause may be fixed: a model path, a dtype) and modes whose
        settings changed since. Continued: modes cut short (a device call's time limit, Ctrl-C,
        kill -9) keep their finished steps, and their search goes on from them.
        """
        new = self.scenario.to_dict()
        wanted = {m.name: m for m in self.scenario.modes}
        requested = {m.name for m in self.modes}
        done: dict[str, dict[str, Any]] = {}
        partial: dict[str, dict[str, Any]] = {}
        origin: dict[str, dict[str, Any]] = {}
        for prev in self.resumes:
            src = prev.get("_path") or "(snapshot)"
            old = prev.get("scenario") or {}
            for key in ("server", "workload", "ramp", "slo"):
                # A key the older kvtui did not write is unset (None) there: not a change.
                a = {k: v for k, v in (old.get(key) or {}).items() if k not in ("port", "startup_timeout_s") and v is not None}
                b = {k: v for k, v in (new.get(key) or {}).items() if k not in ("port", "startup_timeout_s") and v is not None}
                if a and a != b:
                    self._emit("warning", None, f"resumed snapshot's [{key}] differs from this scenario: modes are not under identical settings")
                    self.doc.setdefault("warnings", []).append(f"resumed across a changed [{key}]")
            for m in prev.get("modes") or []:
                name = m.get("name")
                if not isinstance(name, str):
                    continue
                if name in wanted:
                    changed = setting_changes(m.get("settings") or {}, self._mode_doc(wanted[name], 0)["settings"])
                    if changed:
                        self._note_resume(name, f"mode {name}: settings changed since the resumed run {src} ({', '.join(changed)}): not kept from it")
                        continue
                error = m.get("error") or {}
                if error and not m.get("steps"):
                    if error.get("kind") != "cancelled":  # a start the user stopped is simply run now
                        self._note_resume(name, f"mode {name} failed in the resumed run {src} ({error.get('message', error.get('kind'))}): not kept from it")
                    continue
                if m.get("complete") or (name not in requested and m.get("steps")):
                    # Finished, or cut short but not asked for this time: kept as it is.
                    if name in done and done[name].get("complete") and not m.get("complete"):
                        continue
                    done[name] = m
                    partial.pop(name, None)
                    origin[name] = prev
                elif name not in done and _finished_steps(m):
                    partial[name] = m
                    origin[name] = prev
        if self.fast:  # an offline simulation is seconds long: measure a cut-short mode again
            for name in partial:
                origin.pop(name, None)
            partial = {}
        self._partial = partial
        self._origin = origin
        kept = list(done.values())
        if kept and all(m.name in done for m in self.modes):
            # Nothing is measured here (a join of earlier runs): the figures are of the machine they ran on.
            envs = [origin[n].get("environment") for n in done if origin[n].get("environment")]
            if envs:
                self.doc["environment"] = {**envs[-1], "joined_on": (self.doc.get("environment") or {}).get("host")}
                gpus = {tuple(e.get("gpu_names") or ()) for e in envs}
                if len(gpus) > 1:
                    self._note_resume(None, "the joined modes ran on different GPUs: " + "; ".join(", ".join(g) for g in sorted(gpus)))
            devices = ran_on_devices(list(done.values()))
            if len(devices) > 1:
                self._note_resume(None, "the joined modes ran on " + str(len(devices)) + " devices: "
                                  + "; ".join(f"{d} ({', '.join(ms)})" for d, ms in devices.items()))
        self.doc["resumed_from"] = {
            "path": self.resumes[-1].get("_path"), "environment": self.resumes[-1].get("environment"),
            "modes": [m["name"] for m in kept], "continued": sorted(partial),
            "paths": [p.get("_path") for p in self.resumes],
        }
        return kept

    def _note_resume(self, name: str | None, msg: str) -> None:
        self._emit("warning", name, msg)
        self.doc.setdefault("warnings", []).append(msg)

    def _carry_records(self) -> None:
        """Copy the kept modes' per-request records (and those of the continued modes' finished
        steps) into this run's sidecar, so the snapshot stays self-contained.

        Resuming into the same sidecar rewrites it with those records only: the records of a
        mode measured again, or of a step cut short, are dropped.
        """
        if self.writer is None:
            return
        lines: list[str] = []
        srcs: set[Path] = set()
        for prev in self.resumes:
            name, path = prev.get("records"), prev.get("_path")
            if not name or not path:
                continue
            src = Path(name) if Path(name).is_absolute() else Path(path).with_name(name)
            srcs.add(src.resolve())
            want: dict[str, int | None] = {}  # mode -> records of steps below this index (None: all)
            for mname, m in self._origin.items():
                if m is prev:
                    want[mname] = len(_finished_steps(self._partial[mname])) if mname in self._partial else None
            if not want:
                continue
            try:
                for rec in iter_record_lines(src):
                    mode, step = _record_key(rec)
                    if mode in want and (want[mode] is None or (step is not None and step < want[mode])):
                        lines.append(rec if rec.endswith("\n") else rec + "\n")
            except OSError as e:
                self.doc.setdefault("warnings", []).append(f"per-request records of the kept modes not carried over ({src}: {e.strerror or e})")
        dst = self.writer.records_path
        if dst.resolve() in srcs:
            from kvtui.report.snapshot import atomic_write

            atomic_write(dst, "".join(lines))
        elif lines:
            with open(dst, "a", encoding="utf-8") as f:
                f.writelines(lines)
        self.records_written += len(lines)

    def _replay_finished_steps(self, search, md: dict[str, Any], old: dict[str, Any]) -> int:
        """Feed a continued mode's finished steps to its search, in their order, as long as the
        search asks for exactly those loads; returns how many were kept. The kept steps and
        their telemetry are moved onto this run's clock, ending just before now."""
        steps = _finished_steps(old)
        old_t0 = (self._origin[md["name"]].get("run") or {}).get("t0_monotonic")
        end = max([s.get("t_rel_end") or 0.0 for s in steps] + [r.get("t", 0.0) for r in old.get("series") or []] + [0.0])
        shift = (time.monotonic() - self.t0) - end - 1.0
        kept = 0
        for st in steps:
            if st.get("why") in ("search", "confirm"):
                if search.next() != st.get("load"):
                    break  # the search now wants another load: measure from here
                search.record(st["load"], st.get("passed"))
            st = dict(st)
            for k in ("t_rel_start", "t_rel_end"):
                if isinstance(st.get(k), (int, float)):
                    st[k] = round(st[k] + shift, 3)
            if isinstance(old_t0, (int, float)):
                for k in ("t_window_start", "t_window_end"):
                    if isinstance(st.get(k), (int, float)):
                        st[k] = st[k] - old_t0 + self.t0 + shift
            st["resumed"] = True
            md["steps"].append(st)
            self.writer.step_finished(md["name"], st)
            self._emit("step_finished", md["name"], st)
            kept += 1
        last_t = md["steps"][-1]["t_rel_end"] if kept else None
        self._prior_series = [
            {**r, "t": round(r["t"] + shift, 2)} for r in old.get("series") or []
            if isinstance(r.get("t"), (int, float)) and (last_t is None or r["t"] + shift <= last_t)
        ] if kept else []
        md["continued"] = {"steps": kept, "of": len(steps), "started_at": old.get("started_at")}
        if kept and old.get("ran_on"):
            md["continued"]["ran_on"] = old["ran_on"]  # the kept steps' device: maybe another GPU or host
        self._emit("warning", md["name"], f"mode {md['name']}: continued from {kept} finished step(s) of the resumed run")
        return kept

    def _mode_doc(self, mode: Mode, index: int) -> dict[str, Any]:
        md = dataclasses.asdict(mode)
        md["extra_args"] = self.redactor_args(md["extra_args"])
        from kvtui.report.redact import is_secret_env

        md["env"] = {k: ("<redacted>" if is_secret_env(k, self.scenario.server.secret_env) else v) for k, v in md["env"].items()}
        return {
            "name": mode.name,
            "index": index,
            "settings": md,
            "engine": self.scenario.server.engine,
            "simulated": self.scenario.server.engine == "sim",
            "server": {},
            "engine_info": {},
            "best_concurrency": None,
            "search": {},
            "steps": [],
            "series": [],
            "complete": False,
            "started_at": time.time(),
            "ran_on": self._ran_on(),
        }

    def _ran_on(self) -> dict[str, Any]:
        env = self.doc.get("environment") or {}
        return {k: env[k] for k in ("host", "gpu_names", "gpu_uuids", "gpu_indices") if k in env}

    def redactor_args(self, args: list[str]) -> list[str]:
        from kvtui.report.redact import redact_args

        return redact_args(args)

    def _run_mode(self, mode: Mode, index: int) -> None:
        md = self._mode_doc(mode, index)
        self._prior_series = []
        self.current_mode = md
        self.doc["modes"].append(md)
        self._emit("mode_starting", mode.name, {"index": index, "of": len(self.modes), "mode": md})
        if self.fast:
            return self._run_mode_fast(mode, md)
        self.engine = make_engine(self.scenario.server.engine)
        t_start = time.monotonic()
        self._starting = True
        try:
            if self.stopping:
                raise RunAborted("engine start cancelled")
            endpoint = self.engine.start(self.scenario, mode, lambda line: self._emit("log", mode.name, self.redactor(line)))
        except (EngineError, RunAborted) as e:
            if isinstance(e, RunAborted) or self._cancel is not None:  # stopped while starting: not the engine's fault
                md["error"] = {"kind": "cancelled", "message": f"engine start cancelled: {self._stop_reason}",
                               "log_tail": self.redactor(getattr(e, "log_tail", ""))}
            else:
                md["error"] = {"kind": e.kind, "message": str(e), "log_tail": self.redactor(e.log_tail)}
            md["server"] = self.engine.facts().to_dict()
            md["engine_info"] = self._info_dict()
            self._emit("error", mode.name, f"mode {mode.name}: {md['error']['message'] if md['error']['kind'] == 'cancelled' else e}")
            self.writer.mode_started(md)
            md["complete"] = md["error"]["kind"] != "cancelled"
            old = self._partial.pop(mode.name, None)
            if old is not None:  # nothing measured is lost: keep the finished steps, to continue another time
                md.update(steps=[dict(st, resumed=True) for st in _finished_steps(old)], series=old.get("series") or [],
                          search=old.get("search") or {}, best_concurrency=old.get("best_concurrency"), complete=False,
                          continued={"steps": 0, "of": len(_finished_steps(old)), "started_at": old.get("started_at")})
                for st in md["steps"]:
                    self.writer.step_finished(mode.name, st)
            self.writer.mode_finished(md)
            self._teardown_mode()
            return
        finally:
            self._starting = False
        facts = self.engine.facts()
        if facts.startup_s is None:
            facts.startup_s = round(time.monotonic() - t_start, 2)
        md["server"] = facts.to_dict()
        md["engine_info"] = self._info_dict()
        md["endpoint"] = {"base_url": endpoint.base_url, "model": endpoint.model, "max_model_len": endpoint.max_model_len}
        self.writer.mode_started(md)
        self._emit("engine_ready", mode.name, {"facts": md["server"], "info": md["engine_info"]})
        self.telemetry = _Telemetry(self, self.engine, endpoint, facts, mode.name)
        self.telemetry.start()
        try:
            self._search_mode(mode, md, endpoint, facts)
        finally:
            md["series"] = self._prior_series + (list(self.telemetry.rows) if self.telemetry else [])
            self._teardown_mode()
        md["complete"] = not self.stopping or md["search"].get("done", False)
        md["finished_at"] = time.time()
        self.writer.mode_finished(md)
        self._emit("mode_finished", mode.name, md)

    def _info_dict(self) -> dict[str, Any]:
        info = self.engine.info() if self.engine else None
        return dataclasses.asdict(info) if info else {}

    def _time_scale(self) -> float:
        return getattr(self.engine, "time_scale", 1.0) or 1.0

    def _search_mode(self, mode: Mode, md: dict[str, Any], endpoint: Endpoint, facts: StartupFacts) -> None:
        from kvtui.load.workload import discover_token_space

        sc = self.scenario
        space = discover_token_space(endpoint.base_url, endpoint.model, endpoint.headers())
        md["token_space"] = space.to_dict()
        if not space.verified:
            self._emit("warning", mode.name, space.source)
        if sc.quality.enabled:
            from kvtui.explore.quality import collect_outputs

            md["quality"] = collect_outputs(endpoint, sc, space, dummy_weights=bool(self._info_dict().get("dummy_weights")))
            if sc.quality.tasks or sc.quality.task_files:
                self._quality_suite(mode, md, endpoint)
        max_len = endpoint.max_model_len or sc.server.max_model_len
        cfg = WorkerConfig(
            base_url=endpoint.base_url, model=endpoint.model, headers=endpoint.headers(),
            workload=dataclasses.asdict(sc.workload), space=dataclasses.asdict(space), max_model_len=max_len,
            salt=self.salt, seed=sc.seed + sc.workload.seed, request_timeout_s=sc.ramp.request_timeout_s * max(1.0, self._time_scale()),
        )
        self.loadgen = LoadGenerator(cfg, sc.ramp.processes)
        self.loadgen.counter = 1_000_000 * (md["index"] + 1)  # disjoint counters per mode
        self.loadgen.start()
        req_tokens = _mean_request_tokens(sc)
        kv_guess = facts.kv_bound_concurrency(int(req_tokens)) if self.closed else None
        md["predicted_kv_concurrency"] = round(kv_guess, 1) if kv_guess else None
        old = self._partial.pop(mode.name, None)
        # A continued mode searches from the guess it started with, so its finished steps replay.
        guess = (old.get("search") or {}).get("guess", kv_guess) if old is not None else kv_guess
        search = make_search(sc.ramp, self.closed, guess=guess)
        md["search"] = {"strategy": search.name, "guess": guess}
        levels = ramp_levels(sc.ramp, self.closed)
        t_search = time.monotonic()
        last_load: float | None = None
        step_index = 0
        if old is not None:
            if self._replay_finished_steps(search, md, old):
                last_load = md["steps"][-1]["load"]
            step_index = len(_finished_steps(old))  # never reuse the index of a carried step's records
        while not self.stopping and not self._skip.is_set():
            while self._paused.is_set() and not self.stopping:
                time.sleep(0.1)
            load, why = self._next_load(search, last_load, levels)
            if load is None:
                break
            step = self._one_step(mode, md, load, step_index, why)
            step_index += 1
            last_load = load
            if step is None:
                break
            if why in ("search", "confirm"):
                search.record(load, step["passed"])
            if self.telemetry and self.telemetry.dead:  # died after its step was measured
                md.setdefault("error", _crashed(self.telemetry.dead))
                break
        res = search.result()
        md["best_concurrency"] = res.best
        md["search"].update(
            best=res.best, first_fail=res.first_fail, confirmed=res.confirmed, flips=res.flips, noisy=res.noisy,
            reached_max=res.reached_max, steps=len(md["steps"]), wall_s=round(time.monotonic() - t_search, 1),
            describe=res.describe(), done=search.s.done,
        )
        knee = next((s for s in md["steps"] if res.first_fail is not None and s["load"] == res.first_fail and s["passed"] is False), None)
        md["knee_limited_by"] = knee["limited_by"] if knee else None
        if self._skip.is_set():
            md["search"]["skipped"] = True

    def _quality_suite(self, mode: Mode, md: dict[str, Any], endpoint: Endpoint) -> None:
        """The quality phase: tasks with ground truth, before the load (none of it counts in a step)."""
        q = md.get("quality") or {}
        if q.get("skipped"):
            return  # no weights (dummy, simulated) or no output at all: nothing to judge
        from kvtui.quality.runner import run_suite

        self._emit("log", mode.name, f"[kvtui] quality phase for {mode.name} (not counted in any step)")
        suite = run_suite(endpoint, self.scenario, on_log=lambda line: self._emit("log", mode.name, line))
        q["tasks"] = suite.pop("tasks")
        q["suite"] = suite
        md["quality"] = q
        self._emit("quality", mode.name, q)

    def _next_load(self, search, last: float | None, levels: list[float]) -> tuple[float | None, str]:
        with self._lock:
            nudge, self._nudge = self._nudge, 0
        if nudge and last is not None:
            higher = [x for x in levels if x > last]
            lower = [x for x in levels if x < last]
            if nudge > 0:
                return (higher[0] if higher else last), "manual"
            return (lower[-1] if lower else last), "manual"
        if self._hold and last is not None:
            return last, "hold"
        phase = "confirm" if getattr(search.s, "confirming", False) else "search"
        nxt = search.next()
        if getattr(search.s, "confirming", False):
            phase = "confirm"
        return nxt, phase

    def _one_step(self, mode: Mode, md: dict[str, Any], load: float, index: int, why: str) -> dict[str, Any] | None:
        sc, r = self.scenario, self.scenario.ramp
        tel = self.telemetry
        assert self.loadgen is not None and tel is not None
        tel.load, tel.phase = load, "warmup"
        self._emit("step_started", mode.name, {"load": load, "index": index, "why": why, "closed": self.closed})
        before = tel.scrape_now()
        started_at = time.time()
        # Enough window samples for every SLO percentile (p99 needs hundreds).
        from kvtui.explore.stats import PCTS, min_samples_for

        need = max([min_samples_for(PCTS[p]) for _, p, _ in sc.slo.targets()] + [r.min_samples])
        window_requests = r.window_requests

        def on_status(st: dict[str, Any]) -> None:
            tel.phase = st.get("phase", tel.phase)
            self._emit("step_progress", mode.name, {"load": load, **st})

        records_error: list[str] = []

        def on_records(recs: list[Record]) -> None:
            # Appended as they stream in (every ~0.2 s), so a crash mid-step keeps them too.
            if not records_error:
                try:
                    self.records_written += write_records(self.writer.records_path, recs)
                except OSError as e:
                    records_error.append(e.strerror or str(e))
            self._emit("records", mode.name, recs)

        def should_stop() -> str | None:
            if self._stop_reason:
                return self._stop_reason
            if self._skip.is_set():
                return "mode skipped by the user"
            if tel.dead:
                return f"engine died: {tel.dead}"
            if records_error:
                return f"records file unwritable: {records_error[0]}"
            return None

        # Warm-up and window are modelled seconds: a simulator in slow motion (time_scale s)
        # needs s wall seconds for each. Open-loop rates are per modelled second too.
        ts = self._time_scale()
        wall_load = load if self.closed else load / ts
        run = self.loadgen.run_step(
            mode.name, index, wall_load, self.closed, r.warmup_s * ts, r.window_s * ts, window_requests, r.arrival, r.burst_size,
            r.max_error_burst, on_records=on_records, on_status=on_status, should_stop=should_stop,
            min_window_requests=need, window_timeout_s=r.request_timeout_s * ts,
        )
        if not tel.dead and (run.aborted or any(not x.ok for x in run.records)):
            tel.confirm_alive()  # a dead server ends the mode now, not after another whole step
        tel.phase = "drain"
        self._drain(tel)
        after = tel.scrape_now()
        recs = run.records
        if records_error:
            self._emit("error", mode.name, f"cannot append records to {self.writer.records_path}: {records_error[0]}")
            self.stop(f"records file unwritable: {records_error[0]}")
        metrics = tel.window(run.t_window_start, run.t_window_end)
        if before is not None and after is not None and before.ok and after.ok:
            from kvtui.telemetry.prom import window_delta

            d = window_delta(before, after)
            metrics["preemptions"] = d.get("preemptions")
            metrics["prefix_cache_hit_rate"] = d.get("prefix_cache_hit_rate")
            metrics["server_tokens"] = {"prompt": d.get("prompt_tokens"), "generation": d.get("generation_tokens")}
            # The simulator reports modelled seconds already: no time-scale correction here.
            metrics["server_means_ms"] = {
                k: (round(d[f"{k}_mean_s"] * 1000, 3) if d.get(f"{k}_mean_s") is not None else None) for k in ("ttft", "itl", "tpot", "e2e", "queue")
            }
        ctx = StepContext(
            load=load, closed=self.closed, t_window_start=run.t_window_start, t_window_end=run.t_window_end,
            time_scale=self._time_scale(), metrics=metrics, client=run.stats.to_dict(),
            gpu_mem_used_gib_max=tel.gpu_mem_max(run.t_start, run.t_end), max_num_seqs=md["server"].get("max_num_seqs"),
            error_burst=run.error_burst, aborted=run.aborted or (f"engine died: {tel.dead}" if tel.dead else None),
            cut=bool(run.aborted) and not tel.dead,
        )
        step = evaluate_step(recs, ctx, sc.slo)
        all_ok = [x for x in recs if x.ok]
        step["client_tokens"] = {"prompt": sum(x.prompt_tokens or 0 for x in all_ok), "generation": sum(x.output_tokens or 0 for x in all_ok),
                                 "requests": len(recs), "cancelled": sum(1 for x in recs if x.error == "cancelled")}
        step.update(
            index=index, why=why, started_at=started_at, duration_s=round(run.t_end - run.t_start, 2),
            t_window_start=run.t_window_start, t_window_end=run.t_window_end,
            t_rel_start=round(run.t_start - self.t0, 3), t_rel_end=round(run.t_end - self.t0, 3),
        )
        if step["samples"]["ttft"] < need and step["passed"] is not None:
            step.setdefault("notes", []).append(f"{step['requests']} window requests; the SLO's percentiles want {need}")
        md["steps"].append(step)
        self.writer.step_finished(mode.name, step)
        self._emit("step_finished", mode.name, step)
        if tel.dead:
            md["error"] = _crashed(tel.dead)
            return None
        if run.aborted and (self.stopping or self._skip.is_set()):
            return None
        return step

    def _drain(self, tel: _Telemetry) -> None:
        """Between steps: wait until the server reports running = waiting = 0."""
        deadline = time.monotonic() + self.scenario.ramp.drain_timeout_s
        if tel.scraper is None:
            time.sleep(0.5)
            return
        while time.monotonic() < deadline and not tel.dead and not self.stopping and not self._skip.is_set():
            s = tel.scrape_now()
            if s is None or not s.ok:
                time.sleep(0.5)
                return
            if not (s.running or 0) and not (s.waiting or 0):
                return
            time.sleep(0.25)
        if not tel.dead and not self.stopping and not self._skip.is_set():
            self._emit("warning", None, f"server still busy after {self.scenario.ramp.drain_timeout_s:g} s of drain")

    def _teardown_mode(self) -> None:
        if self._cancel is not None:
            self._cancel.join()  # the cancelled start's server group is gone before we go on
        if self.loadgen is not None:
            try:
                self.loadgen.close()
            finally:
                self.loadgen = None
        if self.telemetry is not None:
            self.telemetry.stop()
            if self.current_mode is not None and not self.current_mode.get("series"):
                self.current_mode["series"] = list(self.telemetry.rows)
            self.telemetry = None
        if self.engine is not None:
            try:
                self.engine.stop()
            finally:
                self.engine = None

    def _run_mode_fast(self, mode: Mode, md: dict[str, Any]) -> None:
        from kvtui.engines.sim.fastrun import run_mode_fast

        run_mode_fast(self, mode, md)
        md["complete"] = True
        md["finished_at"] = time.time()
        self.writer.mode_finished(md)
        self._emit("mode_finished", mode.name, md)

    def _finalize(self, failure: BaseException | None) -> None:
        from kvtui.report.compare import compare_modes

        # The scenario's order (baseline first), also for modes kept from a resumed snapshot.
        order = {m.name: i for i, m in enumerate(self.scenario.modes)}
        self.doc["modes"].sort(key=lambda m: order.get(m.get("name"), len(order)))
        self.doc["comparison"] = compare_modes(self.doc, self.scenario)
        self.doc["run"]["finished"] = failure is None and not self.stopping
        self.doc["run"]["stop_reason"] = self._stop_reason
        self.doc["run"]["records_written"] = self.records_written
        self.doc["run"]["wall_s"] = round(time.monotonic() - self.t0, 1)
        if self.writer is not None:
            try:
                self.writer.finalize(self.doc)
            except OSError as e:
                self._emit("error", None, f"cannot write {self.out}: {e.strerror or e}; the journal {self.writer.journal} keeps every finished step")
                raise KvtuiError(f"cannot write {self.out}: {e.strerror or e}; finished steps are in {self.writer.journal}")
        self._emit("run_finished", None, self.doc)
