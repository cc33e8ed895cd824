"""What the TUI's mixins may use of the class they are mixed into, declared once for the type checker.

`KvtuiApp` is `Controls + Shutdown + DocumentActions + App`; `RunState` is `RunEvents +
SnapshotLoading`. Each mixin's methods use attributes and methods the host defines (the app's
`state`, `run_obj`, `notify`; the state's `modes`, `_bump`). Here they are declared:
- under the checker, `AppHost` is a Textual `App[int]` with the app's own attributes and the
  methods one mixin calls on another, and `StateHost` the run state's attributes and helpers, so
  that `self.run_obj.stop(...)` in a mixin is checked against what `KvtuiApp` really holds, and
  `KvtuiApp`'s own assignments are checked against these declarations;
- at run time both are `object`: the mixins' method resolution order is what it always was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import collections
    import threading
    from pathlib import Path
    from typing import Any

    from textual.app import App
    from textual.worker import Worker

    from kvtui.explore.run import Run
    from kvtui.scenario.schema import Scenario, Slo
    from kvtui.tui.modeview import ModeView
    from kvtui.tui.state import RunState

    class AppHost(App[int]):
        """`KvtuiApp`'s attributes (kvtui/tui/app.py sets them) and the mixins' cross-calls."""

        state: RunState
        run_obj: Run | None
        run_done: threading.Event
        run_error: str | None
        quitting: bool
        rc: int
        dashboard: Any  # kvtui.tui.screens.DashboardScreen, or None before the first run or replay
        scenario: Scenario | None
        modes: list[str] | None
        snapshot: dict[str, Any] | None
        exports: list[Path]
        reports: list[Path]
        _theme_names: list[str]
        worker_run: Worker[Any] | None

        @property
        def run_active(self) -> bool: ...
        def start_run(self, scenario: Scenario, modes: list[str] | None = None,
                      out: str | Path | None = None) -> bool: ...
        # -- defined by one mixin, called from another -------------------------------------------
        def stop_run(self, reason: str = "stopped by the user") -> None: ...
        def show_answer(self) -> None: ...
        async def action_quit(self) -> None: ...
        def action_help(self) -> None: ...
        def action_start(self) -> None: ...
        def action_toggle_pause(self) -> None: ...
        def action_stop_run(self) -> None: ...
        def action_skip_mode(self) -> None: ...
        def action_hold(self) -> None: ...
        def action_nudge(self, delta: int) -> None: ...
        def action_cycle_mode(self) -> None: ...
        def action_cycle_theme(self) -> None: ...

    class StateHost:
        """`RunState`'s attributes (kvtui/tui/state.py sets them) and the helpers its mixins call."""

        doc: dict[str, Any]
        scenario: dict[str, Any]
        environment: dict[str, Any]
        modes: dict[str, ModeView]
        current: str | None
        viewing: str | None
        status: str
        step: dict[str, Any] | None
        progress: dict[str, Any]
        records_seen: int
        slo: Slo
        notices: collections.deque[tuple[str, str]]
        comparison: dict[str, Any] | None
        replay: bool
        source_name: str
        records_path: Path | None
        cursor: int | None
        finished_at: float | None
        stop_reason: str | None
        version: int

        def _bump(self, steps: bool = False, header: bool = False) -> None: ...
        @property
        def closed(self) -> bool: ...
        @property
        def viewed(self) -> ModeView | None: ...
        def _mode(self, name: str | None) -> ModeView | None: ...
        def _append_log(self, mode: str | None, line: str, kind: str | None = None) -> None: ...
        # -- defined by RunEvents, called by SnapshotLoading ----------------------------------------
        def _add_row(self, mv: ModeView, row: dict[str, Any]) -> None: ...
        def _finish_mode(self, mv: ModeView, md: dict[str, Any]) -> None: ...
        # -- defined by SnapshotLoading, called by RunEvents ----------------------------------------
        def _load_mode(self, m: dict[str, Any], kept: bool = False) -> ModeView: ...
else:
    AppHost = object
    StateHost = object
