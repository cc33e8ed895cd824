"""What the app's mixins may use of the app, declared once for the type checker (the run state's
mixins have theirs in kvtui/tui/statehost.py: kvtui.tui.state is imported here).

`KvtuiApp` is `Controls + Shutdown + DocumentActions + App`; `RunState` is `RunEvents +
SnapshotLoading`. Each mixin's methods use attributes and methods the host defines (the app's
`state`, `run_obj`, `notify`; the state's `modes`, `_bump`). Here they are declared:
- under the checker, `AppHost` is a Textual `App[int]` with the app's own attributes and the
  methods one mixin calls on another (`StateHost` does the same for the run state), so
  that `self.run_obj.stop(...)` in a mixin is checked against what `KvtuiApp` really holds, and
  `KvtuiApp`'s own assignments are checked against these declarations;
- at run time both are `object`: the mixins' method resolution order is what it always was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import threading
    from pathlib import Path
    from typing import Any

    from textual.app import App
    from textual.worker import Worker

    from kvtui.explore.run import Run
    from kvtui.io.scenario.schema import Scenario
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

else:
    AppHost = object
