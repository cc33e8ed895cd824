"""The telemetry thread of one mode: scrapes /metrics (≤ 1 Hz), reads NVML, checks liveness.

It reports through `emit(event)` (the run's event sink, kvtui.explore.events) and keeps the mode's
series rows and gauge samples for the step evaluation.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from kvtui import clock
from kvtui.explore import events as ev
from kvtui.runtime.engines.base import Endpoint, Engine, StartupFacts

SERIES_MAX = 7200  # rows per mode before the series is thinned 2:1


class TelemetryLoop(threading.Thread):
    """Scrapes /metrics (≤ 1 Hz), reads NVML (through its own sampler thread), checks liveness."""

    def __init__(self, emit: ev.Listener, engine: Engine, endpoint: Endpoint, facts: StartupFacts, mode: str,
                 t0: float, tensor_parallel_size: int = 1, interval_s: float = 1.0):
        super().__init__(name="kvtui-telemetry", daemon=True)
        from kvtui.runtime.telemetry.prom import MetricsScraper

        self.emit = emit
        self.engine = engine
        self.mode = mode
        self.facts = facts
        self.t0 = t0  # the run's monotonic origin: rows carry t relative to it
        self.tp = max(1, tensor_parallel_size)
        self.interval_s = interval_s
        from kvtui.secrets import same_origin

        # The server's credentials (a bearer key, or Basic from user:password@ in its URL) go to its
        # own origin only: a metrics_url elsewhere never sees them.
        auth = endpoint.headers() if same_origin(endpoint.metrics_url or "", endpoint.base_url) else {}
        self.scraper: Any = (MetricsScraper(endpoint.metrics_url, headers=auth, timeout_s=5.0)
                             if endpoint.metrics_url else None)
        # Several replicas: one scraper each, merged (kvtui.runtime.telemetry.replicas); a replica that
        # stops answering is named once, and the run goes on with the others.
        self.replica_names = [r.name for r in endpoint.replicas if r.metrics_url]
        self.replica_down: dict[str, tuple[float, str]] = {}  # name → (monotonic time, why)
        if self.replica_names:
            from kvtui.runtime.telemetry.replicas import ReplicaScrapers

            targets = []
            for r in endpoint.replicas:
                if not r.metrics_url:
                    continue
                origin = r.base_url or endpoint.base_url
                targets.append((r.name, r.metrics_url, r.headers if same_origin(r.metrics_url, origin) else {}))
            self.scraper = ReplicaScrapers(targets, timeout_s=5.0)
        self.samples: list[Any] = []  # MetricsSample, bounded
        self.rows: list[dict[str, Any]] = []
        self.dead: str | None = None
        self.failed: str | None = None  # this thread's own failure (kvtui's, not the server's)
        self.on_failure: Callable[[str], None] | None = None  # the run stops on it
        self._dead_lock = threading.Lock()
        self.metrics_error: str | None = None
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self.nvml: Any = None
        if not engine.simulated:
            from kvtui.runtime.telemetry.nvml import NvmlSampler, process_tree_provider

            providers = [process_tree_provider(p) for p in sorted(engine.pids())]

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
        self.emit(ev.RunWarning(self.mode, reason))

    def scrape_now(self) -> Any:
        if self.scraper is None:
            return None
        with self._lock:
            s = self.scraper.scrape()
        if not s.ok:
            if s.error != self.metrics_error:
                self.metrics_error = s.error
                self.emit(ev.RunWarning(self.mode, s.error or "metrics scrape failed"))
        else:
            self.metrics_error = None
        if s.replicas:
            self._replica_states(s)
        return s

    def _replica_states(self, s: Any) -> None:
        n = len(s.replicas)
        for name, r in zip(self.replica_names, s.replicas):
            if not r.ok and name not in self.replica_down:
                self.replica_down[name] = (clock.monotonic(), r.error or "metrics scrape failed")
                up = n - sum(1 for x in s.replicas if not x.ok)
                self.emit(ev.RunWarning(self.mode, f"replica {name} is down ({r.error}); "
                                                   f"the run goes on with {up} of {n}"))
            elif r.ok and name in self.replica_down:
                del self.replica_down[name]
                self.emit(ev.RunWarning(self.mode, f"replica {name} answers again"))

    def run(self) -> None:
        from kvtui.safeio import thread_stop

        try:
            with thread_stop(self._halt.is_set):  # a scrape or /health cut within 0.25 s of stop()
                self._loop()
        except BaseException as e:  # a dead telemetry thread fails the run, loudly (not exit 0 without telemetry)
            why = f"telemetry thread failed: {type(e).__name__}: {e}"
            self.failed = why
            self.emit(ev.RunError(self.mode, why))
            if self.on_failure is not None:
                self.on_failure(why)

    def _loop(self) -> None:
        if self.nvml is not None:
            self.nvml.start()
        last_alive = 0.0
        prev = None
        while not self._halt.wait(self.interval_s):
            now = clock.monotonic()
            s = self.scrape_now()
            if s is not None and s.ok:
                # window() reads only the gauges: a full scrape with its histograms is ~10 KB, and
                # 4000 of them grew a long run's memory by 40 MB (bench/soak.py, docs/SOAK.md).
                from kvtui.runtime.telemetry.replicas import light

                self.samples.append(light(s))
                if len(self.samples) > 4000:
                    del self.samples[: len(self.samples) // 2]
            row = self._row(s, prev)
            if s is not None and s.ok:
                prev = s
            self.rows.append(row)
            if len(self.rows) > SERIES_MAX:
                self.rows = self.rows[::2]
            self.emit(ev.Telemetry(self.mode, row))
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
                self.emit(ev.RunError(self.mode, f"engine died: {reason}"))

    def _row(self, s: Any, prev: Any) -> dict[str, Any]:
        t = clock.monotonic() - self.t0
        row: dict[str, Any] = {"t": round(t, 2), "load": self.load, "phase": self.phase}
        if s is not None and s.ok:
            row.update(kv_usage=s.kv_usage, running=s.running, waiting=s.waiting, preemptions=s.preemptions)
            if (prev is not None and s.generation_tokens is not None and prev.generation_tokens is not None
                    and s.t > prev.t):
                row["gen_tok_s"] = round((s.generation_tokens - prev.generation_tokens) / (s.t - prev.t), 1)
                if s.prompt_tokens is not None and prev.prompt_tokens is not None:
                    row["prompt_tok_s"] = round((s.prompt_tokens - prev.prompt_tokens) / (s.t - prev.t), 1)
            if s.kv_usage is not None and self.facts.kv_cache_gib:
                row["kv_in_use_gib"] = round(s.kv_usage * self.facts.kv_cache_gib, 3)
            from kvtui.runtime.telemetry.replicas import replica_view

            per = replica_view(s, self.replica_names)
            if per:
                row["replicas"] = per
        row.update(self._gpu_reading())
        return row

    def _gpu_reading(self) -> dict[str, Any]:
        """The GPUs' memory now: the simulated GPU's model, or NVML's latest sample ({} if neither)."""
        out: dict[str, Any] = {}
        m = self.engine.gpu_memory()  # a simulated GPU's memory; None for a real one (NVML below)
        if m is not None:
            if m.get("used_gib") is not None:
                # The simulator models one GPU of the tensor-parallel group; every rank holds the same.
                tp = self.tp
                out["gpus"] = [{"index": i, "mem_used_gib": m["used_gib"], "mem_total_gib": m.get("gpu_total_gib"),
                                "simulated": True} for i in range(tp)]
                out["gpu_mem_used_gib"] = round(m["used_gib"] * tp, 3)
                out["gpu_mem_total_gib"] = round((m.get("gpu_total_gib") or 0) * tp, 2)
        elif self.nvml is not None and self.nvml.available:
            g = self.nvml.latest()
            if g:
                out["gpus"] = [
                    {"index": x.index, "mem_used_gib": round(x.mem_used_gib, 3),
                     "mem_total_gib": round(x.mem_total_gib, 2),
                     "util_pct": x.util_pct, "power_w": x.power_w, "sm_clock_mhz": x.sm_clock_mhz,
                     "proc_mem_gib": x.proc_mem_gib, "throttle": x.throttle}
                    for x in g
                ]
                used = [x for x in g if x.proc_mem_gib] or g
                out["gpu_mem_used_gib"] = round(sum(x.mem_used_gib for x in used), 3)
                out["gpu_mem_total_gib"] = round(sum(x.mem_total_gib for x in used), 2)
        return out

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
        from kvtui.runtime.telemetry.replicas import replica_view

        per: dict[str, dict[str, Any]] = {}
        for s in inside:
            for row in replica_view(s, self.replica_names):
                acc = per.setdefault(row["name"], {})
                for key, name in (("kv_usage", "kv_usage_max"), ("running", "running_max"), ("waiting", "waiting_max")):
                    if row.get(key) is not None:
                        acc[name] = round(max(acc.get(name, 0.0), row[key]), 4)
        if per:
            out["replicas"] = per
        bad = sorted({x for s in inside for x in s.out_of_range})
        if bad:  # flagged on the step: those values were dropped, no verdict or label uses them
            out["metrics_out_of_range"] = bad
        missing = self.missing_why(inside, t1 - t0)
        if missing:  # a figure that stopped arriving is named, never silently blank
            out["metrics_missing"] = missing
        return out

    def missing_why(self, inside: list[Any], window_s: float) -> str | None:
        """Why the step has no /metrics figures (KV, running, waiting), or None: the scrapes failed
        (their error), or none landed in a window of two intervals or more (this thread was held:
        a trickling /health or /metrics, a starved host)."""
        if self.scraper is None or any(s.kv_usage is not None or s.running is not None for s in inside):
            return None
        if self.metrics_error:
            return self.metrics_error
        if window_s >= 2 * self.interval_s:
            return "no /metrics scrape landed in the step's window (the telemetry was held up)"
        return None

    def gpu_mem_max(self, t0: float, t1: float) -> float | None:
        rows = [r for r in self.rows if t0 - self.t0 <= r["t"] <= t1 - self.t0 + self.interval_s]
        vals = [r["gpu_mem_used_gib"] for r in rows if r.get("gpu_mem_used_gib") is not None]
        if not vals:
            # No sample fell in the step: this thread was starved (a loaded host, a slow scrape) or the
            # step was shorter than one interval. The step has just ended, so the reading now is the
            # memory the step left in use, not a gap in the comparison's peak (a CI run lost one so).
            now = self._gpu_reading().get("gpu_mem_used_gib")
            vals = [now] if now is not None else []
        return round(max(vals), 3) if vals else None

    def stop(self) -> None:
        self._halt.set()
        self.join(5)
        if self.nvml is not None:
            self.nvml.stop()
        if self.scraper is not None:
            self.scraper.close()
