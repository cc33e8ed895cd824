"""The one options object the TUI app is built from (posting's `make_posting` is the model).

The CLI (`kvtui`, `kvtui tui`, `kvtui run` without --headless, `kvtui replay`), the web entry
(which runs those commands in textual-serve), the SVG export and the tests all fill an
`AppOptions` and hand it to `kvtui.tui.app.make_app`; the app reads nothing else. Plain data,
no Textual: the commands fill it without starting the UI.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

REFRESH_HZ = 2.0  # the one redraw timer; ≤ 2 Hz by design (a chart rebuild costs milliseconds of CPU)


@dataclass
class AppOptions:
    scenario: Any = None  # a Scenario, or a path to one
    out: str | Path | None = None  # the snapshot a run writes
    modes: list[str] | None = None
    resume: dict[str, Any] | list[dict[str, Any]] | None = None
    theme: str | None = None
    autostart: bool = False  # start the run at once (else the setup screen)
    fast: bool = False  # simulate each step offline (sim engine)
    snapshot: dict[str, Any] | str | Path | None = None  # replay this document (or path)
    setup_notice: str | None = None
    refresh_hz: float = REFRESH_HZ
    handle_signals: bool = False  # SIGTERM/SIGHUP stop the run (the CLI; not the tests)
    replay_mode: str | None = None
    replay_step: int | None = None
    view: str | None = None  # a replay opens on "answer" (default) or "dashboard"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def opens_on(self) -> str:
        return self.view or ("dashboard" if self.replay_step else "answer")

    @property
    def snapshot_doc(self) -> dict[str, Any] | None:
        """The document to replay: a path is loaded through the snapshot loader (`resolved` has
        done it already for the options `make_app` builds the app from)."""
        snap = self.snapshot
        if isinstance(snap, (str, Path)):
            from kvtui.io.snapshot.file import load_snapshot

            return load_snapshot(snap)
        return snap

    def resolved(self) -> "AppOptions":
        """Paths loaded: the scenario through the scenario loader, the snapshot through the snapshot loader."""
        sc = self.scenario
        if isinstance(sc, (str, Path)):
            from kvtui.io.scenario import load_scenario

            sc = load_scenario(sc)
        vals = {f.name: getattr(self, f.name) for f in fields(self)}
        vals.update(scenario=sc, snapshot=self.snapshot_doc)
        return AppOptions(**vals)
