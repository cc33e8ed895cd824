"""The run's events: one frozen dataclass per kind, what a listener receives.

A listener (the TUI state, the headless printer, a test) gets one of these, from the run
thread or the telemetry thread. Each has the `kind`, `mode` and `data` a listener of the
first version read (`data` is the payload as it was: a dict, a line, a list of records), and
typed fields besides. A misspelt event is a NameError where it is made, not a silent drop.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar

if TYPE_CHECKING:  # a type only: listeners import this module without the load generator
    from kvtui.core.record import Record


@dataclass(frozen=True)
class Event:
    """Base of every run event."""

    kind: ClassVar[str] = ""
    mode: str | None = None

    @property
    def data(self) -> Any:
        return None


Listener = Callable[[Event], None]


@dataclass(frozen=True)
class ModeEvent(Event):
    """An event of one mode: its name is always there (a run's start and end, and a warning or an
    error, may concern no mode)."""

    mode: str = ""


@dataclass(frozen=True)
class RunStarted(Event):
    kind: ClassVar[str] = "run_started"
    doc: dict[str, Any] = field(default_factory=dict)

    @property
    def data(self) -> dict[str, Any]:
        return self.doc


@dataclass(frozen=True)
class ModeStarting(ModeEvent):
    kind: ClassVar[str] = "mode_starting"
    index: int = 0
    of: int = 0
    mode_doc: dict[str, Any] = field(default_factory=dict)

    @property
    def data(self) -> dict[str, Any]:
        return {"index": self.index, "of": self.of, "mode": self.mode_doc}


@dataclass(frozen=True)
class Log(ModeEvent):
    """One server log line, secrets redacted."""

    kind: ClassVar[str] = "log"
    line: str = ""

    @property
    def data(self) -> str:
        return self.line


@dataclass(frozen=True)
class EngineReady(ModeEvent):
    kind: ClassVar[str] = "engine_ready"
    facts: dict[str, Any] = field(default_factory=dict)  # StartupFacts.to_dict()
    info: dict[str, Any] = field(default_factory=dict)  # EngineInfo as a dict

    @property
    def data(self) -> dict[str, Any]:
        return {"facts": self.facts, "info": self.info}


@dataclass(frozen=True)
class Telemetry(ModeEvent):
    """One series row (≤ 1 Hz): load, phase, KV use, queue, GPU memory."""

    kind: ClassVar[str] = "telemetry"
    row: dict[str, Any] = field(default_factory=dict)

    @property
    def data(self) -> dict[str, Any]:
        return self.row


@dataclass(frozen=True)
class QualityStarted(ModeEvent):
    """The mode's quality phase begins (before its load; none of it counts in a step)."""

    kind: ClassVar[str] = "quality_started"
    tasks: tuple[str, ...] = ()  # the suite's task names, where known

    @property
    def data(self) -> dict[str, Any]:
        return {"tasks": list(self.tasks)}


@dataclass(frozen=True)
class QualityMeasured(ModeEvent):
    """The quality suite's results for the mode, before its load (its snapshot entry's "quality")."""

    kind: ClassVar[str] = "quality"
    quality: dict[str, Any] = field(default_factory=dict)

    @property
    def data(self) -> dict[str, Any]:
        return self.quality


@dataclass(frozen=True)
class StepStarted(ModeEvent):
    kind: ClassVar[str] = "step_started"
    load: float = 0.0
    index: int = 0
    why: str = "search"  # search, confirm, manual, hold
    closed: bool = True

    @property
    def data(self) -> dict[str, Any]:
        return {"load": self.load, "index": self.index, "why": self.why, "closed": self.closed}


@dataclass(frozen=True)
class StepProgress(ModeEvent):
    """The step in flight: its phase and counts. Live: the load generator's summed worker statuses
    (kvtui.runtime.load.protocol.StatusTotals); a paced simulation: the pacer's (kvtui.explore.pacing)."""

    kind: ClassVar[str] = "step_progress"
    load: float = 0.0
    phase: str = "warmup"  # "warmup" | "window" | "tail"
    elapsed_s: float = 0.0  # since the step began (a paced simulation: modelled seconds)
    window_started: int = 0  # requests sent in the window so far
    completed: int = 0  # requests finished in the step so far
    inflight: int | None = None  # live: requests in flight now
    sent: int | None = None  # live: requests sent in the step
    paced: float | None = None  # a paced simulation: modelled seconds per wall second (0: jumped to the answer)
    modelled_s: float | None = None  # a paced simulation: the step's whole modelled length

    @property
    def data(self) -> dict[str, Any]:
        fields = (f.name for f in dataclasses.fields(self) if f.name != "mode")
        return {k: v for k in fields if (v := getattr(self, k)) is not None}


@dataclass(frozen=True)
class Records(ModeEvent):
    """Per-request records as they stream in (every ~0.2 s)."""

    kind: ClassVar[str] = "records"
    records: list[Record] = field(default_factory=list)

    @property
    def data(self) -> list[Record]:
        return self.records


@dataclass(frozen=True)
class StepFinished(ModeEvent):
    kind: ClassVar[str] = "step_finished"
    step: dict[str, Any] = field(default_factory=dict)  # the step as the snapshot keeps it

    @property
    def data(self) -> dict[str, Any]:
        return self.step


@dataclass(frozen=True)
class ModeFinished(ModeEvent):
    kind: ClassVar[str] = "mode_finished"
    mode_doc: dict[str, Any] = field(default_factory=dict)

    @property
    def data(self) -> dict[str, Any]:
        return self.mode_doc


@dataclass(frozen=True)
class ModeUpdated(ModeEvent):
    """The mode's entry as it stands after its prediction, and after each judged step (its refits,
    the search's state): listeners read their copy, never the run's live entry."""

    kind: ClassVar[str] = "mode_updated"
    mode_doc: dict[str, Any] = field(default_factory=dict)

    @property
    def data(self) -> dict[str, Any]:
        return self.mode_doc


@dataclass(frozen=True)
class RunFinished(Event):
    kind: ClassVar[str] = "run_finished"
    doc: dict[str, Any] = field(default_factory=dict)

    @property
    def data(self) -> dict[str, Any]:
        return self.doc


@dataclass(frozen=True)
class RunWarning(Event):
    kind: ClassVar[str] = "warning"
    text: str = ""

    @property
    def data(self) -> str:
        return self.text


@dataclass(frozen=True)
class RunNote(Event):
    """Information about the run that is no fault: a mode's SIMULATED prediction before its first
    step, a mode kept from a resumed snapshot. Printed and logged as what it is, never as "warning:"."""

    kind: ClassVar[str] = "note"
    text: str = ""

    @property
    def data(self) -> str:
        return self.text


@dataclass(frozen=True)
class RunError(Event):
    kind: ClassVar[str] = "error"
    text: str = ""

    @property
    def data(self) -> str:
        return self.text


EVENT_TYPES: tuple[type[Event], ...] = (RunStarted, ModeStarting, Log, EngineReady, Telemetry, StepStarted,
                                        StepProgress, QualityStarted, QualityMeasured,
                                        Records, StepFinished, ModeUpdated, ModeFinished, RunFinished, RunWarning,
                                        RunNote, RunError)
EVENT_KINDS: frozenset[str] = frozenset(t.kind for t in EVENT_TYPES)


def detached(event: Event) -> Event:
    """The event with payloads of its own: every dict and list field deep-copied (a Records
    batch's list copied, its records as they are: nothing writes to a record once emitted).

    The run keeps the only mutable document (issue 29 item 2): a listener on another thread (the
    TUI, the web) gets a copy made on the emitting thread, and what it does with it never reaches
    the run's snapshot, nor does the run's next write reach what the listener holds."""
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(event):
        val = getattr(event, f.name)
        if isinstance(val, (dict, list)):
            changes[f.name] = list(val) if isinstance(event, Records) else deep_copy(val)
    return dataclasses.replace(event, **changes) if changes else event


# The events after which the run publishes a copy of its whole document (`Run.published`): the
# points where the document changes in a way a view shows (a mode's start, its engine's facts, its
# quality, a step, its prediction and search, its end or error, the run's start and end). Log
# lines, telemetry rows, progress and record batches change nothing a view reads from it.
PUBLISHED_AFTER: tuple[type[Event], ...] = (RunStarted, ModeStarting, EngineReady, QualityMeasured, StepFinished,
                                            ModeUpdated, ModeFinished, RunFinished, RunError)


def deep_copy(val: Any) -> Any:
    """A deep copy of a part of the run's document, taken on the run thread."""
    # A refit thread may add to the mode's prediction during the copy (kvtui.explore.refit): a
    # dict that changed size mid-copy is copied again.
    for _ in range(50):
        try:
            return copy.deepcopy(val)
        except RuntimeError:
            continue
    return copy.deepcopy(val)


class UnknownEvent(ValueError):
    """A listener got an event of a kind no one declared."""


def check_kind(kind: str) -> None:
    if kind not in EVENT_KINDS:
        raise UnknownEvent(f"unknown run event {kind!r} (known: {', '.join(sorted(EVENT_KINDS))})")
