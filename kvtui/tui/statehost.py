"""What the run state's mixins (RunEvents, SnapshotLoading in kvtui/tui/ingest.py) may use of
`RunState` (kvtui/tui/state.py), declared for the type checker; `object` at run time. See
kvtui/tui/host.py for the app's."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import collections
    from pathlib import Path
    from typing import Any, Mapping

    from kvtui.explore.events import StepProgress, StepStarted
    from kvtui.io.scenario.schema import Slo
    from kvtui.io.snapshot.schema import Comparison, Environment, Mode
    from kvtui.tui.modeview import ModeView

    class StateHost:
        """`RunState`'s attributes (kvtui/tui/state.py sets them) and the helpers its mixins call."""

        doc: dict[str, Any]
        scenario: Mapping[str, Any]
        environment: Environment
        modes: dict[str, ModeView]
        current: str | None
        viewing: str | None
        status: str
        step: StepStarted | None
        progress: StepProgress | None
        slo: Slo
        notices: collections.deque[tuple[str, str]]
        comparison: Comparison | None
        replay: bool
        source_name: str
        records_path: Path | None
        cursor: int | None
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
        def _finish_mode(self, mv: ModeView, md: Mode | Mapping[str, Any]) -> None: ...
        # -- defined by SnapshotLoading, called by RunEvents ----------------------------------------
        def _load_mode(self, md: Mode | Mapping[str, Any], kept: bool = False) -> ModeView: ...
else:
    StateHost = object
