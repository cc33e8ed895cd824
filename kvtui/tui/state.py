"""The data the dashboard shows, apart from any widget: what a run reported, bounded.

`RunState` ingests the run's `Event`s (on the UI thread, from messages) or a whole
snapshot document (replay), and keeps per mode: the startup facts, the steps as measured,
the steps re-evaluated under an edited SLO, and the telemetry as a bounded columnar
series that views downsample to their width. Widgets read it; nothing here draws.

Every mutation bumps a version counter, so a view redraws only what changed. The run's
documents are read through the snapshot schema's typed views (kvtui.io.snapshot.schema); the
scenario is the dict of its own schema (kvtui.io.scenario).
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any, Mapping

from kvtui.core.evaluate import LIMIT_WORDS
from kvtui.core.search import best_load  # noqa: F401 - the knee rule lives with the search
from kvtui.explore.events import StepProgress, StepStarted
from kvtui.explore.reevaluate import reevaluate_modes  # noqa: F401 - the app's SLO worker
from kvtui.io.scenario.schema import Slo
from kvtui.io.scenario.slo_table import slo_of, slo_table  # noqa: F401
from kvtui.io.snapshot.schema import Comparison, EngineInfo, Environment, Mode, ServerFacts, Step
from kvtui.tui.ingest import RunEvents, SnapshotLoading  # noqa: F401
from kvtui.tui.loglines import classify_log_line
from kvtui.tui.modeview import ModeView  # noqa: F401 - also this module's name for it
from kvtui.tui.series import Series, downsample  # noqa: F401

LOG_MAX = 3000  # server log lines kept
NOTICES_MAX = 200


class RunState(RunEvents, SnapshotLoading):
    """Everything the dashboard shows, fed by events (live) or a snapshot (replay)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Empty, as new: a new run starts over in the same object (the widgets keep a reference)."""
        self.doc: dict[str, Any] = {}
        self.scenario: Mapping[str, Any] = {}
        self.environment: Environment = Environment()
        self.modes: dict[str, ModeView] = {}
        self.current: str | None = None  # mode the run is on
        self.viewing: str | None = None  # mode the user picked (None: follow the run)
        self.status = "idle"  # idle, starting, running, paused, stopping, finished, stopped, failed, replay
        self.step: StepStarted | None = None  # the step in progress (the run's event)
        self.progress: StepProgress | None = None  # its phase and counts so far
        self.slo: Slo = Slo()  # the run's (scenario's) SLO
        self.view_slo: Slo | None = None  # an SLO edited on screen; None = the run's
        self.log: collections.deque[tuple[str | None, str, str]] = collections.deque(maxlen=LOG_MAX)
        self.log_total = 0  # lines ever appended (views track what they have shown)
        self.notices: collections.deque[tuple[str, str]] = collections.deque(maxlen=NOTICES_MAX)
        self.comparison: Comparison | None = None
        self.replay = False
        self.source_name = ""  # snapshot file name (replay)
        self.records_path: Path | None = None
        self.cursor: int | None = None  # replay: index of the last step shown in the viewed mode
        self.stop_reason: str | None = None
        self.version = 0  # any change
        self.steps_version = 0
        self.header_version = 0
        self.slo_version = 0

    # -- helpers ----------------------------------------------------------------------------
    def _bump(self, steps: bool = False, header: bool = False) -> None:
        self.version += 1
        if steps:
            self.steps_version += 1
        if header:
            self.header_version += 1

    @property
    def closed(self) -> bool:
        return ((self.scenario.get("ramp") or {}).get("load") or "concurrency") == "concurrency"

    @property
    def load_word(self) -> str:
        if self.closed:
            return "c"
        return "×" if (self.scenario.get("ramp") or {}).get("load") == "trace" else "req/s"

    @property
    def edited(self) -> bool:
        return self.view_slo is not None

    @property
    def shown_slo(self) -> Slo:
        return self.view_slo or self.slo

    @property
    def mode_names(self) -> list[str]:
        return list(self.modes)

    @property
    def viewed(self) -> ModeView | None:
        name = self.viewing if self.viewing in self.modes else self.current
        if name is None and self.modes:
            name = next(iter(self.modes))
        return self.modes.get(name) if name else None

    def _mode(self, name: str | None) -> ModeView | None:
        if name is None:
            return None
        mv = self.modes.get(name)
        if mv is None:
            mv = self.modes[name] = ModeView(name=name, index=len(self.modes))
        return mv

    def note(self, level: str, text: str) -> None:
        self.notices.append((level, text))
        self._append_log(None, f"kvtui: {level}: {text}", level if level in ("warning", "error") else "kvtui")

    def _append_log(self, mode: str | None, line: str, kind: str | None = None) -> None:
        self.log.append((mode, line, classify_log_line(line) if kind is None else kind))
        self.log_total += 1

    def cycle_view(self, delta: int = 1) -> str | None:
        names = self.mode_names
        if not names:
            return None
        cur = self.viewed.name if self.viewed else names[0]
        i = (names.index(cur) + delta) % len(names)
        self.viewing = names[i]
        self.cursor = None if not self.replay else len(self.modes[names[i]].steps) - 1
        self._bump(steps=True, header=True)
        return self.viewing

    # -- the things views ask --------------------------------------------------------------
    def steps_of(self, mv: ModeView, upto_cursor: bool = True) -> list[dict[str, Any]]:
        steps = mv.shown_steps(self.edited)
        if upto_cursor and self.replay and self.cursor is not None and mv is self.viewed:
            steps = steps[: self.cursor + 1]
        return steps

    def best(self, mv: ModeView | None, upto_cursor: bool = True) -> float | None:
        """The best load so far: the search's answer once the mode is done under the run's SLO."""
        if mv is None:
            return None
        partial = (upto_cursor and self.replay and self.cursor is not None and mv is self.viewed
                   and self.cursor < len(mv.steps) - 1)
        if not self.edited and not partial and mv.search.has("best"):
            return mv.run_best
        return best_load(self.steps_of(mv, upto_cursor))

    def best_is_floor(self, mv: ModeView | None) -> bool:
        """The mode's best is a lower bound ("≥ N"): its search ended with no failing load above it."""
        if mv is None or self.edited or not mv.search.has("best") or mv.search.best is None:
            return False
        return mv.search.first_fail is None and mv.search.done is not False

    def t_max(self) -> float | None:
        """Replay: the end of the selected step (series are cut there); live: None."""
        mv = self.viewed
        if not self.replay or mv is None or self.cursor is None or not mv.steps:
            return None
        if self.cursor >= len(mv.steps) - 1:
            return None
        return Step.of(mv.steps[self.cursor]).t_rel_end

    def labels(self) -> dict[str, Any]:
        """The caveats that travel with every figure."""
        env = self.environment
        mv = self.viewed
        info = mv.info if mv else EngineInfo()
        server = mv.server if mv else ServerFacts()
        version = info.version
        if not version:
            vs = sorted({str(v) for m in self.modes.values() if (v := m.info.version)})
            version = ", ".join(vs) if vs else None
        warnings = list(server.warnings or [])
        return {
            "scenario": self.scenario.get("name") or "—",
            "mode": mv.name if mv else "—",
            "mode_pos": f"{mv.index + 1}/{len(self.modes)}" if mv else "",
            "engine": (env.engine or (mv.engine if mv else "")
                       or (self.scenario.get("server") or {}).get("engine") or "—"),
            "gpu": ", ".join(env.gpu_names or []) or "—",
            "version": version or "—",
            "simulated": bool(env.simulated or (mv.simulated if mv else False)),
            "dummy_weights": bool(info.dummy_weights),
            "time_scale": info.time_scale or 1.0,
            "warnings": warnings,
        }

    def move_cursor(self, delta: int | None = None, to: int | None = None) -> int | None:
        mv = self.viewed
        if mv is None or not mv.steps:
            return None
        n = len(mv.steps)
        cur = n - 1 if self.cursor is None else self.cursor
        new = to if to is not None else cur + (delta or 0)
        new = max(0, min(n - 1, new if new >= 0 else n + new))
        if new != self.cursor:
            self.cursor = new
            self._bump(steps=True, header=True)
        return self.cursor

    # -- SLO re-evaluation ---------------------------------------------------------------------
    def records_file_for(self, mv: ModeView) -> Path | None:
        if mv.records_file:
            return Path(mv.records_file)
        return self.records_path

    def set_view_slo(self, slo: Slo | None, results: dict[str, dict[int, dict[str, Any]]] | None = None) -> None:
        """Show the steps under `slo` (None: back to the run's SLO), with re-evaluated steps."""
        self.view_slo = slo
        for mv in self.modes.values():
            mv.view_steps = dict((results or {}).get(mv.name, {})) if slo is not None else {}
        self.slo_version += 1
        self._bump(steps=True, header=True)

    def merge_view_steps(self, results: dict[str, dict[int, dict[str, Any]]]) -> None:
        for name, by_index in results.items():
            mv = self.modes.get(name)
            if mv is not None:
                mv.view_steps.update(by_index)
        self._bump(steps=True, header=True)

    def export_doc(self, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The document as shown: the run's (or the snapshot's), with an edited SLO applied."""
        import copy

        doc: dict[str, Any] = copy.deepcopy(dict(base) if base is not None else self.doc)
        doc.pop("_path", None)
        for m in doc.get("modes") or []:  # the export's own copy: its mode dicts are written to
            mode = Mode.view(m)
            mv = self.modes.get(mode.name) if mode.name is not None else None
            if mv is None:
                continue
            if not mode.series and len(mv.series):
                m["series"] = [
                    {"t": t, **{k: col[i] for k, col in mv.series.cols.items()
                                if col[i] is not None and k != "preempt"}}
                    for i, t in enumerate(mv.series.t)
                ]
            if self.edited:
                m["steps"] = [copy.deepcopy(s) for s in mv.shown_steps(True)]
                m["best_concurrency_at_run_slo"] = mode.stored("best_concurrency")  # written through, as read
                m["best_concurrency"] = best_load(m["steps"])
        if self.view_slo is not None:  # edited
            from kvtui.report.compare import compare_modes

            doc["reevaluated"] = {
                "slo": slo_table(self.view_slo),
                "run_slo": slo_table(self.slo),
                "note": "pass/fail and best concurrency recomputed from the per-request records under this SLO; "
                        "the search ran under run_slo",
            }
            doc["comparison"] = compare_modes(doc)  # under the document's own scenario
        elif "comparison" not in doc:
            from kvtui.report.compare import compare_modes

            doc["comparison"] = compare_modes(doc)  # under the document's own scenario
        return doc


def limit_word(step: Step | Mapping[str, Any]) -> str:
    lim = Step.of(step).limited_by or ""
    return LIMIT_WORDS.get(lim, lim) or "—"
