"""The run: for each precision mode, start the engine, search for the max load at SLO, stop it.

The same `Run` serves the headless command and the TUI (which runs it in a worker
thread). It knows nothing of the screen: it reports through `listener(Event)`, called
from the run thread and from the telemetry thread — a UI must marshal to its own thread.
The run owns the only mutable document: a listener gets copies of the events' payloads, and a
view reads the whole document through `published()`, a copy made on the run thread at each
milestone (a step, a mode's start and end, the run's end).

The search loop lives here, once; a `StepExecutor` (kvtui.explore.executor) measures each
step — on a live server, or offline in virtual time (`fast`). The pieces around it:
telemetry_loop (the telemetry thread), resume (--resume), document (the snapshot's dicts).

Controls (thread-safe): stop, skip_mode, pause/resume, hold, nudge(±1).
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import threading
from pathlib import Path
from typing import Any, Mapping

from kvtui import clock
from kvtui.core import knee_interval
from kvtui.core.evaluate import evaluate_step, no_server_verdict
from kvtui.core.results import ModeResult
from kvtui.core.search import Search, ramp_levels
from kvtui.core.settled import settle_passes, settled_reason
from kvtui.core.stats import PCTS, min_samples_for
from kvtui.errors import KvtuiError, UsageError
from kvtui.explore import document, predict_loop
from kvtui.explore import events as ev
from kvtui.explore.events import Event, Listener
from kvtui.explore.executor import StepExecutor
from kvtui.explore.live_step import LiveStepExecutor
from kvtui.explore.offline_step import OfflineStepExecutor
from kvtui.explore.replica_step import mark_remeasure
from kvtui.explore.resume import Resume, finished_steps
from kvtui.explore.telemetry_loop import SERIES_MAX, TelemetryLoop
from kvtui.io.scenario import lengths
from kvtui.io.scenario.schema import Mode, Scenario
from kvtui.io.snapshot.file import SnapshotWriter
from kvtui.runtime.engines import registry
from kvtui.runtime.engines.base import Engine, StartupFacts
from kvtui.runtime.load.generator import LoadGenerator
from kvtui.secrets import Redactor, strip_url_password

__all__ = ["Event", "Listener", "Run", "SERIES_MAX", "make_engine", "mean_request_tokens"]



def make_engine(name: str) -> Engine:
    """A new engine of this name (kvtui.runtime.engines.registry)."""
    return registry.create(name)


def mean_request_tokens(scenario: Scenario) -> float:
    """A request's mean prompt + output tokens over all its turns (the KV-bound guess's length)."""
    return lengths.mean_request_tokens(scenario.workload)


class Run:
    def __init__(
        self,
        scenario: Scenario,
        out: str | Path,
        modes: list[str] | None = None,
        listener: Listener | None = None,
        resume: dict[str, Any] | list[dict[str, Any]] | None = None,
        fast: bool = False,
        join: dict[str, str] | None = None,
        join_info: dict[str, Any] | None = None,
        calibration: Any = None,
        refit: bool | None = None,
        publish: bool = True,
        pace: Any = None,
    ):
        self.scenario = scenario
        # A kvtui.clock.PacedClock: the run is the offline simulation (--fast, the same figures),
        # each step released over its modelled time on it (kvtui.explore.pacing: "watch it live").
        self.pace = pace
        fast = fast or pace is not None
        # A join (kvtui run --parallel): every mode is taken as its snapshot has it, nothing is
        # measured here; `join` names why a mode that no snapshot has is missing.
        self.join = join
        self.join_info = join_info  # the lanes (device, mode, exit code, files): the snapshot's run.parallel
        self.out = Path(out)
        self.listener = listener
        self.fast = fast
        names = modes or [m.name for m in scenario.modes]
        unknown = [n for n in names if n not in {m.name for m in scenario.modes}]
        if unknown:
            valid = ", ".join(m.name for m in scenario.modes)
            raise UsageError(f"--mode {unknown[0]}: no such mode in {scenario.source or 'the scenario'} (modes: "
                             f"{valid})")
        self.modes: list[Mode] = [scenario.mode(n) for n in names]
        from kvtui.io.scenario.checks import protocol_problem

        why = protocol_problem(scenario.ramp.protocol)  # set in code, past the loader's checks
        if why:
            raise UsageError(f"{scenario.source or 'the scenario'}: ramp.protocol: {why}")
        # Snapshots to resume from, oldest first (a later one's mode wins over an earlier one's).
        resumes: list[dict[str, Any]] = [resume] if isinstance(resume, dict) else list(resume or [])
        self.resumes = resumes
        if resumes and join is None:  # another measurement or impossible figures: refused (resume_guard)
            from kvtui.explore.resume_guard import check_resumable

            check_resumable(scenario.to_dict(), resumes)
        self._resume = Resume(resumes, self.emit)
        self._prior_series: list[dict[str, Any]] = []
        self.closed = scenario.ramp.load == "concurrency"
        self.salt = secrets.randbits(32)
        self.t0 = clock.monotonic()
        from urllib.parse import urlsplit

        try:
            url_pw = [urlsplit(u).password or "" for u in (scenario.server.url, scenario.server.metrics_url)]
        except ValueError:
            url_pw = []
        self.redactor = Redactor([scenario.server.api_key] + url_pw
                                 + [v for k, v in scenario.server.env.items() if k in scenario.server.secret_env])
        # controls
        self._stop_reason: str | None = None
        self._skip = threading.Event()
        self._paused = threading.Event()
        self._hold = False
        self._nudge = 0
        self._lock = threading.Lock()
        self.executor: StepExecutor = OfflineStepExecutor(self) if fast else LiveStepExecutor(self)
        # The prediction per mode and its recalibration (kvtui.explore.refit); a --fast run's steps
        # are the simulator's own, so it is not refitted unless asked (bench: a perturbed truth).
        self.predictor = predict_loop.make_predictor(calibration, refit if refit is not None else not fast)
        self.predictor.halt = lambda: self.stopping or self.skipping  # its simulated steps stop with the run
        self.sim_calibration = self.predictor.prior if calibration is not None else None
        self.writer: SnapshotWriter | None = None
        # The document: the run's own, written on the run thread (and by a refit thread into the
        # mode's prediction). No one else reads it: they read `published()`, a copy of their own.
        self._doc: dict[str, Any] = {}
        self._published: Mapping[str, Any] | None = None
        # False where no one reads published() (the headless commands: their listener prints the
        # events): a copy of the whole document per milestone is a fifth of a --fast run's time.
        self.publish = publish
        self._thread: int | None = None  # the thread that runs run(): the only one that publishes
        self.records_written = 0
        # The first write of the records, the journal or the snapshot that failed (a full disk, a
        # file-size limit, the --out folder deleted): the run stops on it and never ends as a
        # success; its snapshot (run.output_failure) and last lines say what was lost.
        self.output_failure: str | None = None

    # -- what a live step's parts are now (the TUI and tests look at them) ---------------------
    @property
    def engine(self) -> Engine | None:
        return self.executor.engine if isinstance(self.executor, LiveStepExecutor) else None

    @property
    def loadgen(self) -> LoadGenerator | None:
        return self.executor.loadgen if isinstance(self.executor, LiveStepExecutor) else None

    @property
    def telemetry(self) -> TelemetryLoop | None:
        return self.executor.telemetry if isinstance(self.executor, LiveStepExecutor) else None

    # -- controls (any thread) --------------------------------------------------------------
    def stop(self, reason: str = "stopped by the user") -> None:
        self._stop_reason = self._stop_reason or reason
        self._paused.clear()
        self.executor.interrupt()

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

    @property
    def skipping(self) -> bool:
        return self._skip.is_set()

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    # -- what the run shows of its document ---------------------------------------------------
    def published(self) -> Mapping[str, Any] | None:
        """The whole document as it stood at the run's last milestone (`events.PUBLISHED_AFTER`:
        a mode's start, a step, a mode's end, the run's end…), or None before the run starts (and
        always where the run was made with publish=False).

        A deep copy made on the run thread and never written again (read-only: a reader that
        changes it copies it first), so a view on another thread (the TUI's answer screen, its
        comparison, its export) reads a consistent document while the run goes on writing its
        own. Any thread may call it."""
        return self._published

    def _publish(self) -> None:
        # On the run thread only: it is the one that writes the document (the telemetry thread
        # emits too, but changes nothing here).
        if self.publish and threading.get_ident() == self._thread:
            self._published = ev.deep_copy(self._doc)

    # -- events and the journal (kvtui.explore.executor.Controls) -----------------------------
    def emit(self, event: Event) -> None:
        # Warnings, errors and log lines carry no URL password and no known secret.
        for fld in ("text", "line"):
            val = getattr(event, fld, None)
            if isinstance(val, str):
                clean = strip_url_password(self.redactor(val)) if hasattr(self, "redactor") else strip_url_password(val)
                if clean != val:
                    event = dataclasses.replace(event, **{fld: clean})
        if isinstance(event, ev.PUBLISHED_AFTER):
            self._publish()  # before the listener hears of it: the copy it reads has what it heard
        if self.listener is not None:
            try:
                self.listener(ev.detached(event))  # its own copy: the run's document stays the run's
            except Exception as e:  # a listener bug must not kill the measurement
                if not isinstance(event, ev.RunWarning):
                    self.emit(ev.RunWarning(event.mode, f"listener failed on {event.kind}: {type(e).__name__}: {e}"))

    @property
    def records_path(self) -> Path:
        assert self.writer is not None
        return self.writer.records_path

    def mode_started(self, md: dict[str, Any]) -> None:
        assert self.writer is not None
        self._journal(self.writer.mode_started, md)

    def mode_finished(self, md: dict[str, Any]) -> None:
        assert self.writer is not None
        self._journal(self.writer.mode_finished, md)
        self._publish()  # a mode may end without its event (an engine that failed to start)

    def step_finished(self, mode: str, step: dict[str, Any]) -> None:
        assert self.writer is not None
        self._journal(self.writer.step_finished, mode, step)

    def _journal(self, write: Any, *args: Any) -> None:
        assert self.writer is not None
        if self.output_failure is not None:
            return  # the run is stopping on an earlier failed write
        try:
            write(*args)
        except OSError as e:
            self.output_failed("journal", self.writer.journal, e)

    def write_records(self, records: list[Any]) -> int:
        """Append records to the run's records file (whole lines or none: kvtui.io.records); a
        failed write stops the run (output_failed). How many were written."""
        from kvtui.io.records import write_records

        if self.output_failure is not None or not records:
            return 0
        try:
            n = write_records(self.records_path, records)
        except OSError as e:
            self.output_failed("records file", self.records_path, e)
            return 0
        self.records_written += n
        return n

    def output_failed(self, what: str, path: Path, e: OSError) -> None:
        """A write of the run's output failed: said once, in true words, and the run stops (a run that
        goes on could keep nothing of what it measures)."""
        if self.output_failure is not None:
            return
        why = e.strerror or str(e)
        verb = "append records to" if what == "records file" else f"write the {what}"
        self.output_failure = f"cannot {verb} {path}: {why}"
        self.emit(ev.RunError(None, f"{self.output_failure} — the run stops: nothing more it measured could be "
                                    "kept"))
        self.stop(f"{what} unwritable: {why}")

    # -- main --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        from kvtui.safeio import thread_stop

        # Every request this thread makes to a server (an engine's probes and /health, /tokenize,
        # the quality prompts) ends within kvtui.safeio.STOP_POLL_S of the run's stop.
        with thread_stop(lambda: self.stopping):
            return self._run()

    def _run(self) -> dict[str, Any]:
        self._thread = threading.get_ident()
        self._doc = document.new_doc(self.scenario, self.salt, self.fast, [m.name for m in self.modes], self.t0)
        if self.join_info is not None:
            self._doc["run"]["parallel"] = self.join_info
        kept: list[dict[str, Any]] = []
        if self.resumes:
            kept = self._resume.take(self._doc, self.scenario, self.modes, self.fast, join=self.join is not None)
        self._doc["modes"] = list(kept)
        self.writer = SnapshotWriter(self.out, self._doc, resumed=[p["_path"] for p in self.resumes if p.get("_path")])
        if self.resumes:
            try:
                self.records_written += self._resume.carry_records(self.writer, self._doc)
            except OSError as e:  # the run stops on it (the loop below starts no mode)
                self.output_failed("records file", self.writer.records_path, e)
        for m in kept:
            self.mode_finished(m)
        self.emit(ev.RunStarted(None, self._doc))
        done = {m["name"] for m in kept}
        failure: BaseException | None = None
        try:
            for i, mode in enumerate(self.modes):
                if self.stopping:
                    break
                if mode.name in done:
                    if self.join is None:
                        self.emit(ev.RunNote(mode.name, f"mode {mode.name} kept from the resumed snapshot"))
                    continue
                if self.join is not None:
                    self._not_measured(mode, i, self.join.get(mode.name, "no lane measured it"))
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
            self.executor.teardown()
            self.predictor.join()  # a refit still running writes into the mode's entry: before the snapshot
            self._finalize(failure)
        return self._doc

    def _run_mode(self, mode: Mode, index: int) -> None:
        md = document.mode_doc(self.scenario, mode, index, self._doc)
        self._prior_series = []
        self._doc["modes"].append(md)
        self.emit(ev.ModeStarting(mode.name, index, len(self.modes), md))
        ex = self.executor
        partial = self._resume.partial.pop(mode.name, None)
        facts = ex.start_mode(mode, md, partial)
        if facts is None:
            return  # it did not start; the executor closed the mode's entry
        try:
            ex.begin_search(mode, md)
            if not md.get("error"):  # refused before any load (the server's context too small): no search
                self._search_mode(mode, md, facts, partial)
        finally:
            ex.end_mode(md, self._prior_series)
        md["complete"] = ex.complete(md) and self._search_ended(md)
        if (md.get("error") or {}).get("kind") == "client":
            md["complete"] = False  # cut by the client's failure: --resume continues it
        md["finished_at"] = clock.time()
        self.mode_finished(md)
        self.emit(ev.ModeFinished(mode.name, md))

    def _search_ended(self, md: dict[str, Any]) -> bool:
        """A stop is never a verdict: a mode the run's stop cut before its search ended (in its
        engine's start, its prediction, or between steps) is not complete, whatever its executor
        says; the snapshot's run.modes_cut names it and --resume runs it again. An error that
        ended the mode is its own verdict (its entry says so)."""
        if not self.stopping or md.get("error"):
            return True
        return bool((md.get("search") or {}).get("done"))

    def _not_measured(self, mode: Mode, index: int, why: str) -> None:
        """A joined mode no snapshot has (its lane died before writing one): named, not measured."""
        md = document.mode_doc(self.scenario, mode, index, self._doc)
        md["error"] = {"kind": "lane", "message": why}
        md["finished_at"] = clock.time()
        self._doc["modes"].append(md)
        self.mode_started(md)
        self.mode_finished(md)
        self.emit(ev.RunError(mode.name, f"mode {mode.name}: {why}"))

    def _search_mode(self, mode: Mode, md: dict[str, Any], facts: StartupFacts, old: dict[str, Any] | None) -> None:
        sc = self.scenario
        kv_guess = facts.kv_bound_concurrency(int(mean_request_tokens(sc))) if self.closed else None
        md["predicted_kv_concurrency"] = round(kv_guess, 1) if kv_guess else None
        # A continued mode searches from the guess it started with, so its finished steps replay.
        guess = (old.get("search") or {}).get("guess", kv_guess) if old is not None else kv_guess
        prediction = predict_loop.before_search(self, mode, md, old)
        search = predict_loop.choose(self, guess, prediction)
        md["search"] = {"strategy": search.name, "guess": guess, **predict_loop.search_keys(search)}
        self.emit(ev.ModeUpdated(mode.name, md))  # the prediction and the search's start, as copies
        levels = ramp_levels(sc.ramp, self.closed)
        # Enough window samples for every SLO percentile (p99 needs hundreds).
        need = max([min_samples_for(PCTS[p]) for _, p, _ in sc.slo.targets()] + [sc.ramp.min_samples])
        t_search = clock.monotonic()
        last_load: float | None = None
        step_index = 0
        client_retries = 0
        retry: tuple[float, str] | None = None  # a load the client failed, measured again
        remeasured: set[float] = set()  # loads measured again after a replica died in them (once each)
        if old is not None:
            assert self.writer is not None
            kept, self._prior_series = self._resume.replay_finished_steps(search, md, old, self.t0, self.writer,
                                                                          self.scenario)
            if kept:
                last_load = md["steps"][-1]["load"]
            step_index = len(finished_steps(old))  # never reuse the index of a carried step's records
        ex = self.executor
        while not self.stopping and not self._skip.is_set():
            while self._paused.is_set() and not self.stopping:
                clock.sleep(0.1)
            nxt: tuple[float | None, str] = retry if retry is not None else self._next_load(search, last_load, levels)
            retry = None
            load, why = nxt
            if load is None:
                break
            step = self._one_step(mode, md, load, step_index, why, need,
                                  may_remeasure=why in ("search", "confirm") and load not in remeasured)
            step_index += 1
            last_load = load
            if step is None:
                break
            if why in ("search", "confirm"):
                if no_server_verdict(step):
                    # The client stalled or failed: the load is measured again, not judged.
                    client_retries += 1
                    if client_retries > 2:
                        why = f"the client failed {client_retries} steps in a row: {step.get('flags')}"
                        md["error"] = {"kind": "client", "message": why}
                        self.emit(ev.RunError(mode.name, md["error"]["message"]))
                        break
                    retry = (load, why)
                    continue
                client_retries = 0
                if step.get("remeasured"):  # a replica died in it: the survivors are measured at this load
                    remeasured.add(load)
                    retry = (load, why)
                    continue
                search.record(load, step["passed"], step.get("settled"))
                # a pass whose own samples were too few, settled by the loads measured above it since
                settle_passes(md["steps"], md.get("server") or {}, self.scenario, search)
                predict_loop.after_step(self, mode, md, search)
                self.emit(ev.ModeUpdated(mode.name, md))
            dead = ex.dead()
            if dead:  # died after its step was measured
                md.setdefault("error", document.crashed(dead))
                break
        res = search.result()
        predict_loop.after_search(self, md, res.best)
        predict_loop.prefix_gain(self, mode, md, res.best)
        ki = knee_interval.for_mode(md["steps"], res.best)
        if ki is not None:
            md["knee_interval"] = ki
        describe = knee_interval.describe(res.describe(), res.best, ki)
        if self.stopping and not search.s.done and not md.get("error"):
            # Cut by the run's stop: what was found so far, never "no load met the SLO".
            so_far = f"{res.best:g} passed so far" if res.best is not None else "no verdict"
            describe = f"cut short before its search ended ({self._stop_reason}): {so_far}"
        ModeResult(md).record_search(
            best=res.best, first_fail=res.first_fail, confirmed=res.confirmed, flips=res.flips, noisy=res.noisy,
            reached_max=res.reached_max, settled={f"{k:g}": v for k, v in res.settled.items()},
            wall_s=round(clock.monotonic() - t_search, ex.wall_s_digits),
            describe=describe, done=search.s.done,
            skipped=self._skip.is_set(),
        )

    def _next_load(self, search: Search, last: float | None, levels: list[float]) -> tuple[float | None, str]:
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
        phase = "confirm" if search.s.confirming else "search"
        nxt = search.next()
        if search.s.confirming:
            phase = "confirm"
        return nxt, phase

    def _say_eta(self, mode: Mode, md: dict[str, Any], load: float) -> None:
        """A live step's place in its mode and the time left, as a note (headless lines, the TUI's
        log): "step 1 of about 6 (c=152): mode ETA 4 min". Not offline (--fast: seconds in all)."""
        if self.fast:
            return
        from kvtui.explore.plan import fmt_eta, mode_eta

        srch = md.get("search") or {}
        eng = self.engine
        ts = float(getattr(eng, "time_scale", 1.0) or 1.0)
        try:
            n, about, left = mode_eta(self.scenario.ramp, list(md.get("steps") or []), self.closed,
                                      guess=srch.get("guess"), seed=srch.get("seed"), time_scale=ts)
        except Exception:  # an estimate: never the run's failure
            return
        word = "c" if self.closed else "rate"
        self.emit(ev.RunNote(mode.name, f"step {n} of about {about} ({word}={load:g}): mode ETA {fmt_eta(left)}"
                                        + (f" (simulator in slow motion ×{ts:g})" if ts > 1 else "")))

    def _one_step(self, mode: Mode, md: dict[str, Any], load: float, index: int, why: str,
                  need: int, may_remeasure: bool = False) -> dict[str, Any] | None:
        """Measure one step (the executor), evaluate it against the SLO, journal it.
        `may_remeasure`: a failed step that lost a replica is marked to be measured again on the
        replicas left (replica_step.mark_remeasure), not judged."""
        self.emit(ev.StepStarted(mode.name, load, index, why, self.closed))
        self._say_eta(mode, md, load)
        m = self.executor.measure(mode, md, load, index, why, need)
        step = evaluate_step(m.records, m.ctx, self.scenario.slo)
        step.update(m.extra)
        if may_remeasure and mark_remeasure(step):
            self.emit(ev.RunWarning(mode.name, f"step {index} at {load:g}: {step['notes'][-1]}"))
        pp = knee_interval.for_step(step, m.records, self.scenario.slo, f"{mode.name}#{index}")
        if pp is not None:  # how sure the verdict is: the knee's interval (modes[].knee_interval)
            step["pass_probability"] = pp
        predict_loop.annotate(md, step)
        if self.scenario.ramp.confirm_when == "doubt" and why in ("search", "confirm"):
            # Whether the confirmation needs to repeat this verdict (ramp.confirm_when = "doubt").
            step["settled"] = settled_reason(step, md.get("server") or {}, self.scenario)
        if m.check_samples and step["samples"]["ttft"] < need and step["passed"] is not None:
            step.setdefault("notes",
                            []).append(f"{step['requests']} window requests; the SLO's percentiles want {need}")
        md["steps"].append(step)
        self.executor.after_step(md, load, m)
        self.step_finished(mode.name, step)
        self.emit(ev.StepFinished(mode.name, step))
        dead = self.executor.dead()
        if dead:
            md["error"] = document.crashed(dead)
            return None
        if m.ctx.client_failure:
            # The client cannot measure on (a dead worker, a crashed load task): the mode is not
            # complete, the run fails, and --resume continues it (never a final-looking knee).
            md["error"] = {"kind": "client", "message": f"the load generator failed: {m.ctx.client_failure}"}
            self.emit(ev.RunError(mode.name, md["error"]["message"]))
            return None
        if m.mode_error:  # the step could not be measured to its end (a modelled step past its bound)
            md["error"] = {"kind": "bounded", "message": m.mode_error}
            self.emit(ev.RunError(mode.name, f"mode {mode.name}: {m.mode_error}"))
            return None
        if m.aborted and (self.stopping or self._skip.is_set()):
            return None
        return step

    def _finalize(self, failure: BaseException | None) -> None:
        document.close_doc(self._doc, self.scenario, finished=failure is None and not self.stopping,
                           stop_reason=self._stop_reason, records_written=self.records_written,
                           wall_s=round(clock.monotonic() - self.t0, 1))
        if self.output_failure is not None:
            self._doc["run"]["output_failure"] = self.output_failure
        if self.writer is not None:
            try:
                self.writer.finalize(self._doc)
            except (OSError, UsageError) as e:  # UsageError: a directory or a FIFO put at --out meanwhile
                self._rescue(e)
        self.emit(ev.RunFinished(None, self._doc))

    def _rescue(self, e: OSError | UsageError) -> None:
        """The snapshot could not be written at --out: written to a named safe place instead (the
        user's state folder, else the temp folder), or, failing that, a true account of what is
        left. Either way the run fails (KvtuiError: exit 1), never exit 0 over a cut file."""
        from kvtui.io.snapshot.file import atomic_write, dumps
        from kvtui.paths import rescue_dir

        assert self.writer is not None
        why = (f"cannot write the snapshot {self.out}: {e.strerror or e}" if isinstance(e, OSError)
               else f"cannot write the snapshot: {e}")
        self.output_failure = self.output_failure or why
        self._doc["run"]["output_failure"] = self.output_failure
        journal_ok = self.writer.journal.is_file() and not self.output_failure.startswith("cannot write the journal")
        kept = (f"finished steps are in {self.writer.journal} (--resume {self.out} continues from it)"
                if journal_ok else f"its journal {self.writer.journal} is incomplete or gone")
        tried = []
        for folder in rescue_dir():
            target = folder / self.out.name
            try:
                folder.mkdir(parents=True, exist_ok=True)
                atomic_write(target, dumps(self._doc))
            except OSError as e2:
                tried.append(f"{folder}: {e2.strerror or e2}")
                if folder.name.startswith("kvtui-rescued-"):
                    with contextlib.suppress(OSError):
                        folder.rmdir()  # the fresh temp folder, left empty
                continue
            raise KvtuiError(f"{why}; the snapshot was written to {target} instead (its per-request records "
                             f"stay in {self.records_path}, if that is still there); {kept}")
        raise KvtuiError(f"{why}; nor to a safe place ({'; '.join(tried)}); {kept}")
