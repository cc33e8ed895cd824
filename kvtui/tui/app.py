"""The Textual app: one factory (`create_app`) for the CLI, the web demo, the SVG export and the tests.

Threads: the `Run` (kvtui.explore.run) runs in a thread worker; its load generator is a
separate process. Its listener — called from the run thread, the telemetry thread and the
server-log reader — only posts a `RunEvent` message (non-blocking, thread-safe). On the UI
thread the message updates the `RunState`; one timer (≤ 2 Hz) then brings the visible
widgets up to date inside `batch_update()`. Nothing that measures waits on the UI.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.app import App
from textual.message import Message
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from kvtui.errors import KvtuiError
from kvtui.explore import events
from kvtui.io.scenario.schema import Scenario
from kvtui.io.snapshot.schema import Mode, Search, Step
from kvtui.runtime.procs import tracker
from kvtui.terminal import visible_tree
from kvtui.tui.controls import Controls
from kvtui.tui.documents import DocumentActions, SloResult  # noqa: F401 - imported from here
from kvtui.tui.keys import bindings
from kvtui.tui.options import AppOptions  # noqa: F401
from kvtui.tui.redraw import redraw
from kvtui.tui.shutdown import QUIT_GRACE_S, Shutdown
from kvtui.tui.state import RunState
from kvtui.tui.textnet import guard_textual
from kvtui.tui.themes import DEFAULT_THEME, ChartPalette, builtin_palette, load_themes, palette_for

if TYPE_CHECKING:
    from kvtui.explore.run import Run


class RunEvent(Message):
    """One `kvtui.explore.run.Event`, carried to the UI thread."""

    def __init__(self, event: events.Event) -> None:
        super().__init__()
        self.event = event  # a copy of its own (kvtui.explore.events.detached): the UI thread may keep it



class KvtuiApp(Controls, Shutdown, DocumentActions, App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "kvtui"
    ENABLE_COMMAND_PALETTE = True

    BINDINGS = bindings("app")  # kvtui.tui.keys: the one key table (the help reads it too)

    def __init__(self, options: "AppOptions | None" = None):
        super().__init__()
        o = self.options = options or AppOptions()
        self.view = o.opens_on  # a replay opens on its answer, unless a step or the dashboard was asked for
        self.replay_mode = o.replay_mode
        self.replay_step = o.replay_step
        self.scenario = o.scenario
        self.out = Path(o.out) if o.out else None
        self.modes = o.modes
        self.resume = o.resume
        self.autostart = o.autostart
        self.fast = o.fast
        # Text from a file shown on a terminal: every control and bidi character made visible
        # (kvtui.terminal, the one place); the net under every strip Textual draws as well.
        guard_textual()
        self.snapshot = visible_tree(o.snapshot_doc) if o.snapshot_doc is not None else None
        self.setup_notice = o.setup_notice
        self.refresh_hz = min(2.0, max(0.2, o.refresh_hz))
        self.handle_signals = o.handle_signals
        self.state = RunState()
        self.run_obj: Run | None = None
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
        want = o.theme or DEFAULT_THEME
        if want not in self.available_themes:
            self.theme_problems.append(f"theme {want!r} not found; using {DEFAULT_THEME}")
            want = DEFAULT_THEME if DEFAULT_THEME in self.available_themes else "textual-dark"
        self.theme = want
        self.dashboard: Any = None
        # A TUI run of the sim engine that is not --fast runs in process, paced (kvtui.explore.pacing):
        # modelled seconds per wall second, and the clock the pacing waits on (tests: a VirtualClock).
        from kvtui.explore.pacing import PACE_SPEED

        self.pace_speed = PACE_SPEED
        self.pace_real: Any = None
        self.pacer: Any = None  # the running paced run's PacedClock (j: jump to the answer)

    def notify(self, message: str, *, title: str = "", severity: Any = "information", timeout: float | None = None,
               markup: bool = True) -> None:
        """A toast, never read as markup: its text carries servers' errors, paths and commands
        ("pip install 'kvtui[vllm]'" lost its "[vllm]" as a style tag). Screens and widgets reach
        this through Textual's DOMNode.notify, so every toast of the app goes through here."""
        if timeout is None:
            super().notify(message, title=title, severity=severity, markup=False)
        else:
            super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

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

    def tick(self) -> None:
        """The one redraw timer: only the visible screen's views, only what changed."""
        self.ticks += 1
        if self.dashboard is not None and self.dashboard.is_attached:
            redraw(self.dashboard)
        if self.screen is not self.dashboard and hasattr(self.screen, "sync"):
            redraw(self.screen)

    LIVE_ONLY = ("toggle_pause", "stop_run", "skip_mode", "hold", "nudge")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Footer and keys per context: no run controls in a replay, no step keys live."""
        if action in self.LIVE_ONLY:
            return not self.state.replay and self.run_active  # an ended run has nothing to pause, stop or skip
        if action == "replay_step":
            return self.state.replay
        if action == "start":
            return not self.state.replay
        if action == "watch_live":  # only where the answer on screen was simulated offline (--fast)
            return self.can_watch_live
        if action == "jump":  # only while a paced run still waits for the wall
            return self.pacing
        return True

    @property
    def pacing(self) -> bool:
        return self.pacer is not None and self.run_active and self.pacer.speed > 0

    @property
    def can_watch_live(self) -> bool:
        sc = self.scenario
        offline = self.fast or self.pacer is not None  # an answer simulated in process (--fast, or paced)
        return (offline and not self.run_active and not self.state.replay and sc is not None
                and sc.server.engine == "sim")

    def action_watch_live(self) -> None:
        """The answer came from the offline simulation (--fast, seconds): run the same scenario again in
        process, paced to the wall (kvtui.explore.pacing), on the dashboard. The same code computes the
        same figures; only their release waits (j jumps to the answer)."""
        if not self.can_watch_live:
            self.notify("watch it live: only after a simulated answer computed offline (--fast)",
                        severity="information")
            return
        assert self.scenario is not None
        was, self.fast = self.fast, False
        if not self.start_run(self.scenario, modes=self.modes):
            self.fast = was
            return
        if self.pacer is None:  # a test model (--knee) the offline simulation does not have: the HTTP simulator
            self.notify("the live simulator: each step in real time (its ETA on the status line)",
                        title="watch it live", timeout=8)
            return
        self.notify(f"the same simulation, paced ×{self.pace_speed:g} (modelled seconds per second; its ETA on "
                    "the status line); j: jump to the answer, a: the answer so far", title="watch it live", timeout=8)

    def action_jump(self) -> None:
        """Stop waiting for the wall: the rest of the paced run computes at once and its answer shows."""
        if not self.pacing:
            return
        self.pacer.jump()
        if self.run_obj is not None and self.run_obj.paused:
            self.run_obj.unpause()
        self.notify("jumping to the answer: the rest computes at once (the same figures)", timeout=4)
        self.refresh_bindings()

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
        from kvtui.explore.run import Run
        from kvtui.io.snapshot.file import paths_for
        from kvtui.report.paths import default_out
        from kvtui.tui.screens import DashboardScreen

        if self.run_active:
            self.notify("a run is going: stop it first (x)", severity="warning")
            return False
        out_path = Path(out) if out else (self.out if self.out and self.run_obj is None else default_out(scenario.name))
        # The sim engine in the TUI without --fast: the simulator in process, paced to the wall (issue 46),
        # never the HTTP live simulator; its figures are --fast's own.
        from kvtui.explore.pacing import paced_clock

        pace = paced_clock(scenario, modes, self.fast, self.pace_speed, real=self.pace_real)
        try:
            run = Run(scenario, out_path, modes=modes, listener=self._listener, resume=self.resume, fast=self.fast,
                      pace=pace)
        except KvtuiError as e:
            self.notify(str(e), severity="error", timeout=10)
            return False
        from kvtui.preflight import gate, modes_to_start

        pf = gate(scenario, modes_to_start(run.modes, self.resume), fast=self.fast or pace is not None)
        if not pf.ok:  # nothing started, nothing written: say why, one line each, with the fix
            for c in pf.failed:
                self.notify(c.line(), severity="error", timeout=30)
            return False
        self.scenario = scenario
        self.modes = modes
        st = self.state
        st.reset()  # widgets keep their reference; the content starts over
        st.scenario = scenario.to_dict()
        st.slo = scenario.slo
        st.status = "starting"
        st.records_path = paths_for(out_path)[2]
        for m in run.modes:
            st._mode(m.name)
        for w in scenario.warnings:
            st.note("warning", w)
        if not run.fast:  # the load generator's worker processes need it; an in-process run starts none
            tracker.start_quietly()
        self.run_obj = run
        self.pacer = pace
        self.run_error = None
        self.run_done.clear()
        if self.dashboard is None or self.dashboard.replay:
            self.dashboard = DashboardScreen(st)
        if self.screen is not self.dashboard:
            if isinstance(self.screen, Screen) and self.screen.__class__.__name__ == "SetupScreen":
                self.switch_screen(self.dashboard)
            elif self.dashboard in self.screen_stack:  # under the answer (watch it live): back to it
                while self.screen is not self.dashboard:
                    self.pop_screen()
            else:
                self.push_screen(self.dashboard)
        self.worker_run = self._run_thread(run)
        return True

    def _listener(self, ev: events.Event) -> None:
        # Any thread. post_message is non-blocking: the run never waits on the screen.
        self.post_message(RunEvent(ev))

    @work(thread=True, exclusive=True, group="run", exit_on_error=False, name="kvtui-run")
    def _run_thread(self, run: Run) -> dict[str, Any]:
        try:
            return run.run()
        finally:
            self.run_done.set()

    @on(RunEvent)
    def _on_run_event(self, message: RunEvent) -> None:
        ev = message.event
        self.state.ingest(ev)
        if isinstance(ev, events.ModeFinished):
            m = Mode.view(ev.mode_doc)
            search = m.search or Search()
            best = m.best_concurrency
            if best is not None:
                text = f"{ev.mode}: best {self.state.load_word}={best:g}"
            elif m.complete is False or search.done is False:
                # A stop mid-mode: lower loads may never have been tried; no verdict to claim.
                text = f"{ev.mode}: stopped before its search finished: no verdict"
            else:
                text = f"{ev.mode}: {search.describe or 'no result'}"
            self.notify(text, title="mode finished", timeout=6)
        elif isinstance(ev, events.RunError):
            self.notify(str(ev.data), severity="error", timeout=10)
        elif isinstance(ev, events.RunFinished) and _no_mode_started(ev.data):  # a failed run: exit 1, as headless
            from kvtui.report.outcome import NO_MODE_STARTED

            self.run_error, self.rc = NO_MODE_STARTED, 1
            self.notify(f"the run failed: {NO_MODE_STARTED}", severity="error", timeout=15)
        elif isinstance(ev, events.RunWarning):
            text = f"{ev.mode + ': ' if ev.mode else ''}{ev.data}"
            if text not in self._warned:  # once each: a flapping /metrics must not bury the screen
                self._warned.add(text)
                self.notify(text, severity="warning", timeout=8)
        elif isinstance(ev, events.RunFinished) and not self.quitting:
            # The run ends on its answer (over the dashboard: d goes back to it).
            self.call_after_refresh(self.show_answer)
        elif isinstance(ev, events.StepFinished) and self.state.edited:
            self._reevaluate_new_step(self.state.view_slo, ev.mode, Step.view(ev.step).index)

    def on_setup_screen_start_requested(self, message: Any) -> None:
        was = self.fast
        if message.fast is not None:
            self.fast = bool(message.fast) and message.scenario.server.engine == "sim"
        if not self.start_run(message.scenario, modes=message.modes):
            self.fast = was

    def on_answer_screen_show_dashboard(self, message: Any) -> None:
        self.show_dashboard(open_log=message.open_log)

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
            res: SloResult | None = w.result  # (None only before a worker ends: never in SUCCESS)
            if res is None:
                return
            slo, results, problems = res
            before = {n: self.state.best(m, upto_cursor=False) for n, m in self.state.modes.items()}
            self.state.set_view_slo(slo, results)
            after = {n: self.state.best(m, upto_cursor=False) for n, m in self.state.modes.items()}
            changes = ", ".join(f"{n} {_g(before[n])}→{_g(after[n])}" for n in after) or "no steps yet"
            for p in problems:
                self.notify(p, severity="warning", timeout=10)
            self.notify(f"verdicts recomputed under {slo.describe()}: best {changes}", title="SLO applied", timeout=8)
            if self.dashboard:
                redraw(self.dashboard)
        elif w.group == "slo-step" and event.state == WorkerState.SUCCESS:
            step_res: SloResult | None = w.result
            if step_res is None:
                return
            slo, results, _ = step_res
            if self.state.view_slo is slo:
                self.state.merge_view_steps(results)

def _no_mode_started(doc: Any) -> bool:
    from kvtui.report.outcome import no_mode_started

    return isinstance(doc, dict) and no_mode_started(doc)


def _g(x: Any) -> str:
    return "—" if x is None else f"{x:g}"


def make_app(options: AppOptions) -> KvtuiApp:
    """The app, from its options (the only way it is built)."""
    return KvtuiApp(options.resolved())


def create_app(scenario: Any = None, **kw: Any) -> KvtuiApp:
    """`make_app(AppOptions(scenario, **kw))`: the same options object the CLI fills (tests, SVG export)."""
    return make_app(AppOptions(scenario=scenario, **kw))
