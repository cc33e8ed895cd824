"""One precision mode as the dashboard knows it: the view-model's per-mode record (no widgets).

Its own module so that the state (kvtui.tui.state) and the mixins that fill it
(kvtui.tui.ingest) both import it, and neither imports the other back. The mode's documents are
the snapshot schema's typed views (kvtui.io.snapshot.schema); its steps stay the dicts the snapshot
holds, which the search's replay and the SLO's re-evaluation (kvtui.explore) read and the export
writes back (a view reads them typed: `Step.of`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from kvtui.io.snapshot.schema import EngineInfo, Mode, Search, ServerFacts
from kvtui.tui.series import Series


@dataclass
class ModeView:
    """One precision mode as the dashboard knows it."""

    name: str
    index: int = 0
    settings: Mapping[str, Any] = field(default_factory=dict)
    engine: str = ""
    simulated: bool = False
    server: ServerFacts = field(default_factory=ServerFacts)  # startup facts (empty until the server is up)
    info: EngineInfo = field(default_factory=EngineInfo)  # engine info (version, time scale, dummy weights)
    steps: list[dict[str, Any]] = field(default_factory=list)  # as measured, under the run's SLO
    view_steps: dict[int, dict[str, Any]] = field(default_factory=dict)  # step index → re-evaluated step
    run_best: float | None = None  # the search's answer (set when the mode finished)
    search: Search = field(default_factory=Search)  # the search's answer (empty until the mode finished)
    predicted_kv: float | None = None
    doc: Mode = field(default_factory=Mode)  # the mode's snapshot entry (its prediction: tui/predicted.py)
    knee_limited_by: str | None = None
    series: Series = field(default_factory=Series)
    replica_names: list[str] = field(default_factory=list)  # replicas / DP engines seen in the telemetry
    status: str = "waiting"  # waiting, starting, running, done, failed, skipped, stopped, kept
    phase: str = ""  # startup phase (from the log)
    error: str | None = None
    t_start: float | None = None
    started_mono: float | None = None  # when the engine start began (live)
    records_file: str | None = None  # resumed modes keep the earlier run's records
    parser: Any = None  # StartupLogParser while the engine starts
    _last_preempt: float | None = None

    def shown_steps(self, edited: bool) -> list[dict[str, Any]]:
        if not edited:
            return self.steps
        return [self.view_steps.get(s.get("index", i), s) for i, s in enumerate(self.steps)]
