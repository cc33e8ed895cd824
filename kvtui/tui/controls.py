"""The app's keys that move between screens and drive the run: answer/dashboard/help, start,
pause, stop and skip (asking first while a run is live), hold, nudge, replay steps, mode, theme.

A mixin of `kvtui.tui.app.KvtuiApp` (uses its run, state and dashboard)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvtui.tui.host import AppHost
from kvtui.tui.redraw import redraw


class Controls(AppHost):
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
            redraw(self.screen)
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
        if self.dashboard:
            redraw(self.dashboard)

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
            # a paced simulation holds its clock at once (kvtui.explore.pacing); a live step runs to its end
            self.notify("paused" if getattr(self, "pacing", False) else "pausing after this step")
        if self.dashboard:
            redraw(self.dashboard)

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
            if self.dashboard:
                redraw(self.dashboard)

    def action_nudge(self, delta: int) -> None:
        if self.run_active and self.run_obj is not None:
            self.run_obj.nudge(delta)
            self.notify(f"next step one level {'up' if delta > 0 else 'down'} (by hand)")
        elif self.state.replay:
            self.action_replay_step(delta)

    def action_replay_step(self, delta: int) -> None:
        if self.state.replay:
            self.state.move_cursor(delta)
            if self.dashboard:
                redraw(self.dashboard)

    def action_cycle_mode(self) -> None:
        name = self.state.cycle_view(1)
        if name:
            self.notify(f"showing mode {name}")
            if self.dashboard:
                redraw(self.dashboard)

    def action_cycle_theme(self) -> None:
        names = self._theme_names or [self.theme]
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]
        self.notify(f"theme {self.theme}", timeout=2)
        if self.dashboard:
            redraw(self.dashboard)

