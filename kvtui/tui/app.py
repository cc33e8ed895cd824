"""The Textual app: one factory (`create_app`) for the CLI, the web demo, the SVG export and the tests.

Threads: the `Run` (kvtui.explore.run) runs in a thread worker; its load generator is a
separate process. Its listener — called from the run thread, the telemetry thread and the
server-log reader — only posts a `RunEvent` message (non-blocking, thread-safe). On the UI
thread the message updates the `RunState`; one timer (≤ 2 Hz) then brings the visible
widgets up to date inside `batch_update()`. Nothing that measures waits on the UI.
"""

from __future__ import annotations

import asyncio
import copy
import signal
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from kvtui.errors import KvtuiError
from kvtui.scenario.schema import Scenario, Slo
from kvtui.tui.state import RunState, reevaluate_modes
from kvtui.tui.themes import DEFAULT_THEME, ChartPalette, builtin_palette, load_themes, palette_for

REFRESH_HZ = 2.0  # the one redraw timer; ≤ 2 Hz by design (a chart rebuild costs milliseconds of CPU)
QUIT_GRACE_S = 3.0  # after this, a run still starting its engine is killed rather than waited for


class RunEvent(Message):
    """One `kvtui.explore.run.Event`, carried to the UI thread."""

    def __init__(self, event: Any) -> None:
        super().__init__()
        self.event = event


class KvtuiApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "kvtui"
    ENABLE_COMMAND_PALETTE = True

    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "interrupt", "quit", show=False, priority=True),
        Binding("t", "cycle_theme", "theme"),
    ]

    def __init__(
        self,
        scenario: Scenario | None = None,
        *,
        out: str | Path | None = None,
        modes: list[str] | None = None,
        resume: dict[str, Any] | list[dict[str, Any]] | None = None,
        theme: str | None = None,
        autostart: bool = False,
        fast: bool = False,
        snapshot: dict[str, Any] | None = None,
        setup_notice: str | None = None,
        refresh_hz: float = REFRESH_HZ,
        handle_signals: bool = False,
        replay_mode: str | None = None,
        replay_step: int | None = None,
        view: str | None = None,
    ):
        super().__init__()
        # Which screen a replay opens on: the answer, unless a step or "dashboard" was asked for.
        self.view = view or ("dashboard" if replay_step else "answer")
        self.replay_mode = replay_mode
        self.replay_step = replay_step
        self.scenario = scenario
        self.out = Path(out) if out else None
        self.modes = modes
        self.resume = resume
        self.autostart = autostart
        self.fast = fast
        self.snapshot = snapshot
        self.setup_notice = setup_notice
        self.refresh_hz = min(2.0, max(0.2, refresh_hz))
        self.handle_signals = handle_signals
        self.state = RunState()
        self.run_obj: Any = None  # kvtui.explore.run.Run
        self.worker_run: Worker | None = None
        self.run_done = threading.Event()
        self.run_done.set()
        self.run_error: str | None = None
        self.quitting = False
        self.exports: list[Path] = []
        self.reports: list[Path] = []  # Markdown reports written with an export
        self._warned: set[str] = set()
        self.ticks = 0
        self.rc = 0
        self._palettes: dict[str, ChartPalette] = {}
        self._theme_names: list[str] = []
        self.theme_problems: list[str] = []
        themes, self.theme_problems = load_themes()
        for name, (th, pal) in themes.items():
            self.register_theme(th)
            self._palettes[name] = pal
            self._theme_names.append(name)
        want = theme or DEFAULT_THEME
        if want not in self.available_themes:
            self.theme_problems.append(f"theme {want!r} not found; using {DEFAULT_THEME}")
            want = DEFAULT_THEME if DEFAULT_THEME in self.available_themes else "textual-dark"
        self.theme = want
        self.dashboard: Any = None

    # -- palette ---------------------------------------------------------------------------------
    @property
    def palette(self) -> ChartPalette:
        pal = self._palettes.get(self.theme)
        if pal is None:
            pal = builtin_palette(self.theme) or palette_for(self.current_theme)
            self._palettes[self.theme] = pal
        return pal

    # -- lifecycle -------------------------------------------------------------------------------
    def on_mount(self) -> None:
        from kvtui.tui.screens import DashboardScreen, SetupScreen

        for p in self.theme_problems:
            self.notify(p, severity="warning")
        if self.snapshot is not None:
            self.state.load_snapshot(self.snapshot)
            if self.replay_mode in self.state.modes:
                self.state.viewing = self.replay_mode
                self.state.move_cursor(to=-1)
            if self.replay_step:
                self.state.move_cursor(to=self.replay_step - 1)
            self.dashboard = DashboardScreen(self.state, replay=True)
            self.push_screen(self.dashboard)
            if self.view == "answer":
                self.show_answer()
        elif self.autostart and self.scenario is not None:
            self.dashboard = DashboardScreen(self.state)
            self.push_screen(self.dashboard)
            self.start_run(self.scenario, modes=self.modes)
        else:
            self.push_screen(SetupScreen(self.scenario, modes=self.modes, notice=self.setup_notice))
        self.set_interval(1.0 / self.refresh_hz, self.tick, name="kvtui-refresh")
        if self.handle_signals:
            try:
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGTERM, signal.SIGHUP):
                    loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    def _on_signal(self, sig: int) -> None:
        self.quitting = True
        self.stop_run(f"stopped by {signal.Signals(sig).name}")
        if sig == signal.SIGHUP:
            # The terminal is gone (a dropped SSH session): Textual's own exit writes to it and can
            # block on a full output queue. Exit from a watchdog thread once the run has stopped
            # the load and the server and finalised the snapshot.
            threading.Thread(target=self._exit_without_terminal, name="kvtui-hup", daemon=True).start()
            return
        if self.run_done.is_set():
            self.exit(self.rc)

    def _exit_without_terminal(self) -> None:
        import os

        if not self.run_done.wait(QUIT_GRACE_S + 60.0):
            from kvtui.engines.procs import kill_all

            kill_all()
            self.run_done.wait(30.0)
        os._exit(129)  # 128 + SIGHUP

    def tick(self) -> None:
        """The one redraw timer: only the visible screen's views, only what changed."""
        self.ticks += 1
        if self.dashboard is not None and self.dashboard.is_attached:
            self.dashboard.sync()
        sync = getattr(self.screen, "sync", None)
        if sync is not None and self.screen is not self.dashboard:
            sync()

    LIVE_ONLY = ("toggle_pause", "stop_run", "skip_mode", "hold", "nudge")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Footer and keys per context: no run controls in a replay, no step keys live."""
        if action in self.LIVE_ONLY:
            return not self.state.replay
        if action == "replay_step":
            return self.state.replay
        if action == "start":
            return not self.state.replay
        if action in ("cycle_mode", "show_answer") and not self.state.replay and self.size.width < 100:
            return False  # 80 columns live: the run's controls, SLO, export, compare, help, quit, theme first
        return True

    async def on_unmount(self) -> None:
        """Whatever closed the app (q, ctrl+c, the browser tab, a signal): stop the run first."""
        await self._finish_run(grace_s=QUIT_GRACE_S)

    # -- the run ---------------------------------------------------------------------------------
    @property
    def run_active(self) -> bool:
        return not self.run_done.is_set()

    def control_flags(self) -> dict[str, Any]:
        r = self.run_obj
        if r is None or not self.run_active:
            return {}
        return {"paused": bool(r.paused), "hold": bool(r._hold), "stopping": bool(r.stopping)}

    def start_run(self, scenario: Scenario, modes: list[str] | None = None, out: str | Path | None = None) -> bool:
        from kvtui.commands.run import default_out
        from kvtui.explore.run import Run
        from kvtui.report.snapshot import paths_for
        from kvtui.tui.screens import DashboardScreen

        if self.run_active:
            self.notify("a run is going: stop it first (x)", severity="warning")
            return False
        out_path = Path(out) if out else (self.out if self.out and self.run_obj is None else default_out(scenario.name))
        try:
            run = Run(scenario, out_path, modes=modes, listener=self._listener, resume=self.resume, fast=self.fast)
        except KvtuiError as e:
            self.notify(str(e), severity="error", timeout=10)
            return False
        self.scenario = scenario
        self.modes = modes
        st = self.state
        st.__init__()  # widgets keep their reference; the content starts over
        st.scenario = scenario.to_dict()
        st.slo = scenario.slo
        st.status = "starting"
        st.records_path = paths_for(out_path)[2]
        for m in run.modes:
            st._mode(m.name)
        for w in scenario.warnings:
            st.note("warning", w)
        _start_resource_tracker()
        self.run_obj = run
        self.run_error = None
        self.run_done.clear()
        if self.dashboard is None or self.dashboard.replay:
            self.dashboard = DashboardScreen(st)
        if self.screen is not self.dashboard:
            if isinstance(self.screen, Screen) and self.screen.__class__.__name__ == "SetupScreen":
                self.switch_screen(self.dashboard)
            else:
                self.push_screen(self.dashboard)
        self.worker_run = self._run_thread(run)
        return True

    def _listener(self, ev: Any) -> None:
        # Any thread. post_message is non-blocking: the run never waits on the screen.
        self.post_message(RunEvent(ev))

    @work(thread=True, exclusive=True, group="run", exit_on_error=False, name="kvtui-run")
    def _run_thread(self, run: Any) -> dict[str, Any]:
        try:
            return run.run()
        finally:
            self.run_done.set()

    @on(RunEvent)
    def _on_run_event(self, message: RunEvent) -> None:
        ev = message.event
        self.state.ingest(ev)
        k = ev.kind
        if k == "mode_finished":
            d = ev.data
            best = d.get("best_concurrency")
            if best is not None:
                text = f"{ev.mode}: best {self.state.load_word}={best:g}"
            elif d.get("complete") is False or (d.get("search") or {}).get("done") is False:
                # A stop mid-mode: lower loads may never have been tried; no verdict to claim.
                text = f"{ev.mode}: stopped before its search finished: no verdict"
            else:
                text = f"{ev.mode}: {(d.get('search') or {}).get('describe') or 'no result'}"
            self.notify(text, title="mode finished", timeout=6)
        elif k == "error":
            self.notify(str(ev.data), severity="error", timeout=10)
        elif k == "warning":
            text = f"{ev.mode + ': ' if ev.mode else ''}{ev.data}"
            if text not in self._warned:  # once each: a flapping /metrics must not bury the screen
                self._warned.add(text)
                self.notify(text, severity="warning", timeout=8)
        elif k == "run_finished" and not self.quitting:
            # The run ends on its answer (over the dashboard: d goes back to it).
            self.call_after_refresh(self.show_answer)
        elif k == "step_finished" and self.state.edited:
            self._reevaluate_new_step(self.state.view_slo, ev.mode, ev.data.get("index"))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        w = event.worker
        if w.group == "run" and event.state in (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED):
            if event.state == WorkerState.ERROR:
                self.run_error = f"{type(w.error).__name__}: {w.error}"
                self.state.status = "failed"
                self.state.note("error", f"the run failed: {self.run_error}")
                self.notify(f"the run failed: {self.run_error}", severity="error", timeout=15)
                self.rc = 1
            if self.quitting:
                self.exit(self.rc)
        elif w.group == "slo" and event.state == WorkerState.SUCCESS:
            slo, results, problems = w.result
            before = {n: self.state.best(m, upto_cursor=False) for n, m in self.state.modes.items()}
            self.state.set_view_slo(slo, results, note="; ".join(problems) or None)
            after = {n: self.state.best(m, upto_cursor=False) for n, m in self.state.modes.items()}
            changes = ", ".join(f"{n} {_g(before[n])}→{_g(after[n])}" for n in after) or "no steps yet"
            for p in problems:
                self.notify(p, severity="warning", timeout=10)
            self.notify(f"verdicts recomputed under {slo.describe()}: best {changes}", title="SLO applied", timeout=8)
            self.dashboard and self.dashboard.sync()
        elif w.group == "slo-step" and event.state == WorkerState.SUCCESS:
            slo, results, _ = w.result
            if self.state.view_slo is slo:
                self.state.merge_view_steps(results)

    def stop_run(self, reason: str = "stopped by the user") -> None:
        if self.run_obj is not None and self.run_active:
            self.run_obj.stop(reason)
            self.state.status = "stopping" if self.state.status != "replay" else "replay"

    async def _finish_run(self, grace_s: float) -> None:
        """Stop the run and wait for its thread (server and load generator stopped, snapshot final)."""
        if self.run_obj is None or self.run_done.is_set():
            return
        self.run_obj.stop("kvtui closed")
        loop = asyncio.get_running_loop()
        done = await loop.run_in_executor(None, self.run_done.wait, grace_s)
        if not done:
            if self._engine_starting():
                await loop.run_in_executor(None, self._end_starting_engine)
            await loop.run_in_executor(None, self.run_done.wait, 120.0)

    def _engine_starting(self) -> bool:
        mv = self.state.modes.get(self.state.current or "")
        return mv is not None and mv.status == "starting"

    def _end_starting_engine(self) -> None:
        """A run stopped while its engine starts waits for /health (vLLM: minutes). Stop the server
        (SIGINT, SIGTERM, SIGKILL to its group): the start fails, the run tears down and finalises."""
        engine = getattr(self.run_obj, "engine", None)
        try:
            if engine is not None:
                engine.stop()
                return
        except Exception:
            pass
        from kvtui.engines.procs import kill_all

        kill_all()

    def _quit_grace_over(self) -> None:
        if self.run_active and self._engine_starting():
            self.notify("the engine is still starting: stopping it", severity="warning")
            self._in_thread(self._end_starting_engine)

    def _in_thread(self, fn: Any) -> None:
        self.run_worker(fn, thread=True, group="engine-stop", exit_on_error=False, name="kvtui-engine-stop")

    # -- actions -------------------------------------------------------------------------------------
    async def action_quit(self) -> None:
        if self.run_active:
            if self.quitting:  # asked twice: do not wait for a graceful drain
                from kvtui.engines.procs import kill_all

                self.notify("killing the server…", severity="warning")
                kill_all()
                return
            self.quitting = True
            self.stop_run("quit")
            self.set_timer(QUIT_GRACE_S, self._quit_grace_over)
            self.notify("stopping the load and the server, keeping what was measured… (q again to force)", timeout=10)
            if self.dashboard is not None:
                self.dashboard.sync()
            return
        self.exit(self.rc)

    async def action_interrupt(self) -> None:
        """ctrl+c: as q, with the exit code of an interrupted program (130 = 128 + SIGINT)."""
        self.rc = 130
        await self.action_quit()

    def action_help(self) -> None:
        from kvtui.tui.answer import AnswerScreen
        from kvtui.tui.dialogs import HelpScreen
        from kvtui.tui.screens import DashboardScreen

        scr = self.screen
        if isinstance(scr, AnswerScreen):
            ctx = "answer"
        elif isinstance(scr, DashboardScreen):
            ctx = "replay dashboard" if scr.replay else "live dashboard"
        else:
            ctx = "setup"
        self.push_screen(HelpScreen(ctx))

    def show_answer(self) -> None:
        """The answer screen over the dashboard (d or enter goes back)."""
        from kvtui.tui.answer import AnswerScreen
        from kvtui.tui.screens import DashboardScreen

        if isinstance(self.screen, AnswerScreen):
            self.screen.sync()
            return
        if not isinstance(self.screen, DashboardScreen) or not self.state.modes:
            return  # a dialog is open, or nothing to answer yet
        self.push_screen(AnswerScreen(self.state))

    action_show_answer = show_answer

    def show_dashboard(self, open_log: bool = False) -> None:
        from kvtui.tui.answer import AnswerScreen

        if isinstance(self.screen, AnswerScreen):
            self.pop_screen()
        if open_log and self.dashboard is not None:
            box = self.dashboard.query("#logbox")
            if box and box.first().collapsed:
                self.dashboard.action_toggle_log()
        self.dashboard and self.dashboard.sync()

    def snapshot_path(self) -> Path | None:
        """Where this run's (or this replay's) snapshot is on disk."""
        if self.run_obj is not None:
            return Path(self.run_obj.out)
        if self.snapshot and self.snapshot.get("_path"):
            return Path(self.snapshot["_path"])
        return None

    def action_start(self) -> None:
        if self.run_active:
            self.notify("the run is going", severity="information")
            return
        if self.scenario is None:
            self.notify("no scenario: open one in the setup screen", severity="warning")
            return
        if self.state.replay:
            self.notify("replay: nothing to start (kvtui run SCENARIO to measure)", severity="information")
            return
        if self.state.modes and any(m.steps for m in self.state.modes.values()):
            # A new run over a finished one: the old snapshot stays on disk, but the screen starts over.
            self.confirm("Start a new run?", "The run on screen is kept in its snapshot; the screen starts over.",
                         lambda: self.start_run(self.scenario, modes=self.modes))
            return
        self.start_run(self.scenario, modes=self.modes)

    def confirm(self, question: str, detail: str, then: Any) -> None:
        """Ask y/n first (stop, skip-mode, new run while live); `then()` on yes."""
        from kvtui.tui.dialogs import ConfirmScreen

        def done(yes: bool | None) -> None:
            if yes:
                then()

        self.push_screen(ConfirmScreen(question, detail), done)

    def action_toggle_pause(self) -> None:
        r = self.run_obj
        if r is None or not self.run_active:
            if self.state.status in ("idle",) and self.scenario is not None and not self.state.replay:
                self.action_start()
            return
        if r.paused:
            r.unpause()
            self.notify("resumed")
        else:
            r.pause()
            self.notify("pausing after this step")
        self.dashboard and self.dashboard.sync()

    def action_stop_run(self) -> None:
        if not self.run_active:
            self.notify("no run is going", severity="information")
            return
        self.confirm("Stop the run?", "The step in flight ends, the server stops, the snapshot is finalised. "
                     "What was measured is kept.", self._stop_confirmed)

    def _stop_confirmed(self) -> None:
        if not self.run_active:
            return
        self.stop_run()
        self.notify("stopping: the step in flight ends, the server stops, the snapshot is finalised")

    def action_skip_mode(self) -> None:
        if self.run_active and self.run_obj is not None:
            mv = self.state.modes.get(self.state.current or "")
            self.confirm(f"Skip {mv.name if mv else 'this mode'}?",
                         "Its steps so far are kept; the search moves to the next mode.", self._skip_confirmed)

    def _skip_confirmed(self) -> None:
        if self.run_active and self.run_obj is not None:
            self.run_obj.skip_mode()
            self.notify("skipping to the next mode")

    def action_hold(self) -> None:
        if self.run_active and self.run_obj is not None:
            on = self.run_obj.hold()
            self.notify("holding this load: steps repeat until h again" if on else "hold released: the search goes on")
            self.dashboard and self.dashboard.sync()

    def action_nudge(self, delta: int) -> None:
        if self.run_active and self.run_obj is not None:
            self.run_obj.nudge(delta)
            self.notify(f"next step one level {'up' if delta > 0 else 'down'} (by hand)")
        elif self.state.replay:
            self.action_replay_step(delta)

    def action_replay_step(self, delta: int) -> None:
        if self.state.replay:
            self.state.move_cursor(delta)
            self.dashboard and self.dashboard.sync()

    def action_cycle_mode(self) -> None:
        name = self.state.cycle_view(1)
        if name:
            self.notify(f"showing mode {name}")
            self.dashboard and self.dashboard.sync()

    def action_cycle_theme(self) -> None:
        names = self._theme_names or [self.theme]
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]
        self.notify(f"theme {self.theme}", timeout=2)
        self.dashboard and self.dashboard.sync()

    def action_edit_slo(self) -> None:
        from kvtui.tui.screens import SloScreen

        def done(result: Any) -> None:
            if result is None:
                return
            if result == "reset":
                self.state.set_view_slo(None)
                self.notify(f"back to the run's SLO: {self.state.slo.describe()}")
                self.dashboard and self.dashboard.sync()
                return
            self.apply_slo(result)

        self.push_screen(SloScreen(self.state.shown_slo, self.state.slo), done)

    def apply_slo(self, slo: Slo) -> Worker:
        """Re-evaluate every step under `slo` from the records sidecar (a thread; the screen stays live)."""
        modes = [(mv.name, list(mv.steps), self.state.records_file_for(mv)) for mv in self.state.modes.values()]
        return self._reevaluate(slo, modes)

    @work(thread=True, exclusive=True, group="slo", exit_on_error=False, name="kvtui-slo")
    def _reevaluate(self, slo: Slo, modes: list) -> tuple[Slo, dict, list[str]]:
        results, problems = reevaluate_modes(modes, slo)
        return slo, results, problems

    def _reevaluate_new_step(self, slo: Slo | None, mode: str | None, index: int | None) -> None:
        mv = self.state.modes.get(mode or "")
        if slo is None or mv is None or index is None:
            return
        step = next((s for s in mv.steps if s.get("index") == index), None)
        if step is not None:
            self._reevaluate_step(slo, [(mv.name, [step], self.state.records_file_for(mv))], {(mv.name, index)})

    @work(thread=True, group="slo-step", exit_on_error=False, name="kvtui-slo-step")
    def _reevaluate_step(self, slo: Slo, modes: list, only: set) -> tuple[Slo, dict, list[str]]:
        results, problems = reevaluate_modes(modes, slo, only=only)
        return slo, results, problems

    def action_compare(self) -> None:
        from kvtui.report.text import comparison_table
        from kvtui.tui.screens import CompareScreen

        doc = self._current_doc()
        if doc is None:
            self.notify("nothing measured yet", severity="information")
            return
        shown = None
        try:
            shown = self.state.export_doc(doc)
            text = comparison_table(shown)
        except Exception as e:  # a half-written mode must not take the screen down
            text = f"cannot compare yet: {type(e).__name__}: {e}"
            shown = None
        self.push_screen(CompareScreen(text, shown))

    def _current_doc(self) -> dict[str, Any] | None:
        """A consistent copy of the run's document (the run thread keeps writing it)."""
        if self.run_obj is not None and self.run_obj.doc:
            for _ in range(20):
                try:
                    return copy.deepcopy(self.run_obj.doc)
                except RuntimeError:  # changed size during the copy: try again
                    time.sleep(0.005)
            return None
        return self.state.doc or None

    def action_export(self) -> None:
        self._export()

    @work(thread=True, exclusive=True, group="export", exit_on_error=False, name="kvtui-export")
    def _export(self) -> Path | None:
        try:
            path, md = self.export_now()
        except (OSError, KvtuiError, ValueError, TypeError) as e:
            self.call_from_thread(self.notify, f"export failed: {e}", severity="error", timeout=10)
            return None
        msg = f"snapshot written: {path}" + (f"\nreport: {md}" if md else "")
        self.call_from_thread(self.notify, msg, title="export", timeout=10)
        return path

    def export_now(self) -> tuple[Path, Path | None]:
        """Write the document as shown (edited SLO applied) next to the run's snapshot; a Markdown report too."""
        from kvtui.report.snapshot import atomic_write, dumps

        base = self._current_doc()
        if not base:
            raise ValueError("nothing to export yet")
        doc = self.state.export_doc(base)
        doc["exported"] = {"at": time.time(), "by": "kvtui tui", "finished": bool((doc.get("run") or {}).get("finished")),
                           "replay_of": self.state.source_name or None}
        stamp = time.strftime("%Y%m%d-%H%M%S")
        if self.state.replay:
            src = Path(self.snapshot.get("_path") or "snapshot.json") if self.snapshot else Path("snapshot.json")
            folder, stem = src.parent, src.name.split(".json")[0]  # run.json and run.json.journal → run
        else:
            out = self.run_obj.out if self.run_obj is not None else Path("runs/kvtui.json")
            folder, stem = out.parent, out.stem
        rec = doc.get("records")
        if rec and not Path(rec).is_absolute():
            doc["records"] = rec  # the sidecar sits in the same folder as the export
        path = folder / f"{stem}-export-{stamp}.json"
        n = 1
        while path.exists():
            n += 1
            path = folder / f"{stem}-export-{stamp}-{n}.json"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write(path, dumps(doc))
        except OSError:
            if rec and not Path(rec).is_absolute():
                doc["records"] = str((folder / rec).resolve())
            fallback = Path("runs")
            fallback.mkdir(exist_ok=True)
            path = fallback / path.name
            atomic_write(path, dumps(doc))
        md_path = None
        if (doc.get("run") or {}).get("finished") or self.state.replay:
            md_path = write_markdown(doc, path.with_suffix(".md"))
            if md_path is not None:
                self.reports.append(md_path)
        self.exports.append(path)
        return path, md_path

    def action_svg_screenshot(self) -> None:
        folder = _svg_folder(self)
        name = f"kvtui-{time.strftime('%Y%m%d-%H%M%S')}.svg"
        try:
            path = self.save_screenshot(filename=name, path=str(folder))
        except OSError as e:
            self.notify(f"screenshot failed: {folder}: {e.strerror or e}", severity="error")
            return
        self.notify(f"screenshot written: {path}", title="screenshot")

    # -- command palette --------------------------------------------------------------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for c in super().get_system_commands(screen):
            if c.title.lower().startswith(("save screenshot", "screenshot", "quit")):
                continue  # Textual's screenshot needs ~/Downloads (ours below); its Quit would be a second one
            yield c
        cmds = [
            ("Start the run", "s · start (or restart) the scenario's run", self.action_start),
            ("Pause / resume", "space · pause after the step in flight", self.action_toggle_pause),
            ("Stop the run", "x · end the step, stop the server, finalise the snapshot", self.action_stop_run),
            ("Next mode", "n · skip to the next precision mode", self.action_skip_mode),
            ("Hold this load", "h · repeat the current concurrency until released", self.action_hold),
            ("Step up", "+ · next step one level higher, by hand", lambda: self.action_nudge(1)),
            ("Step down", "- · next step one level lower, by hand", lambda: self.action_nudge(-1)),
            ("Change the SLO", "e · recompute pass/fail and the best load from the stored records", self.action_edit_slo),
            ("Export snapshot", "ctrl+s · write the document as shown (and a Markdown report)", self.action_export),
            ("Compare modes", "c · the modes side by side against the baseline", self.action_compare),
            ("Show next mode", "m · view another mode's charts and steps", self.action_cycle_mode),
            ("Cycle theme", "t · " + ", ".join(self._theme_names), self.action_cycle_theme),
            ("Toggle server log", "l · the server's output, startup lines highlighted",
             lambda: self.dashboard and self.dashboard.action_toggle_log()),
            ("Quit", "q / ctrl+c · stops the run cleanly first", self.action_quit),
            ("Show the answer", "a · who won each question, and why", self.show_answer),
            ("Help: every key", "? · keys per screen and the abbreviations", self.action_help),
            ("Screenshot (SVG)", "the screen as an SVG beside the snapshot (or in the current folder)",
             self.action_svg_screenshot),
        ]
        for title, help_text, cb in cmds:
            yield SystemCommand(title, help_text, cb)


def _svg_folder(app: KvtuiApp) -> Path:
    snap = app.snapshot_path()
    return snap.parent if snap is not None and snap.parent.is_dir() else Path.cwd()


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker with its stderr on /dev/null.

    The load generator's processes are spawned; spawning starts the tracker, which passes
    `sys.stderr.fileno()` on — under Textual that is the app's print capture (fileno -1:
    "bad value(s) in fds_to_keep"), and the real terminal would get its warnings mid-screen.
    """
    import os
    import sys
    from multiprocessing import resource_tracker

    saved = sys.stderr
    try:
        with open(os.devnull, "w") as devnull:
            sys.stderr = devnull
            resource_tracker.ensure_running()
    except Exception:
        pass
    finally:
        sys.stderr = saved


def _g(x: Any) -> str:
    return "—" if x is None else f"{x:g}"


def write_markdown(doc: dict[str, Any], path: Path) -> Path | None:
    """A Markdown report through kvtui.report.markdown when that module exists (else skipped)."""
    try:
        from kvtui.report import markdown as md_mod  # written by the exports work; optional here
    except ImportError:
        return None
    fn = None
    for name in ("render_markdown", "markdown_report", "render", "to_markdown", "report"):
        fn = getattr(md_mod, name, None)
        if callable(fn):
            break
    if fn is None:
        return None
    from kvtui.report.snapshot import atomic_write

    try:
        text = fn(doc)
    except Exception:
        return None
    if not isinstance(text, str):
        return None
    atomic_write(path, text)
    return path


def create_app(
    scenario: Scenario | str | Path | None = None,
    *,
    out: str | Path | None = None,
    modes: list[str] | None = None,
    resume: dict[str, Any] | list[dict[str, Any]] | None = None,
    theme: str | None = None,
    autostart: bool = False,
    fast: bool = False,
    snapshot: dict[str, Any] | str | Path | None = None,
    setup_notice: str | None = None,
    refresh_hz: float = REFRESH_HZ,
    handle_signals: bool = False,
    replay_mode: str | None = None,
    replay_step: int | None = None,
    view: str | None = None,
) -> KvtuiApp:
    """The one app factory. `snapshot` (a document or a path) opens the replay dashboard."""
    if isinstance(scenario, (str, Path)):
        from kvtui.scenario import load_scenario

        scenario = load_scenario(scenario)
    if isinstance(snapshot, (str, Path)):
        from kvtui.report.snapshot import load_snapshot

        snapshot = load_snapshot(snapshot)
    return KvtuiApp(scenario, out=out, modes=modes, resume=resume, theme=theme, autostart=autostart, fast=fast,
                    snapshot=snapshot, setup_notice=setup_notice, refresh_hz=refresh_hz, handle_signals=handle_signals,
                    replay_mode=replay_mode, replay_step=replay_step, view=view)
