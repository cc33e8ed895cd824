"""How a step is measured, behind one protocol, so the search loop (kvtui.explore.run) exists once.

Two implementations:
- `LiveStepExecutor` (kvtui.explore.live_step): an engine serves over HTTP; the load
  generator drives it, the telemetry thread watches it, the server drains between steps.
- `OfflineStepExecutor` (kvtui.explore.offline_step): `kvtui run --fast`, each step simulated
  offline in virtual time by the scheduler model (kvtui.simulator.engine).

The executor measures; the controller evaluates (`evaluate_step`), records and decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kvtui.core.evaluate import StepContext
from kvtui.core.record import Record
from kvtui.explore.events import Event
from kvtui.io.scenario.schema import Mode, Scenario
from kvtui.runtime.engines.base import StartupFacts


@dataclass
class Measured:
    """One step as measured, before its evaluation."""

    records: list[Record]
    ctx: StepContext
    extra: dict[str, Any] = field(default_factory=dict)  # merged into the evaluated step, in this order
    aborted: bool = False  # ended early (a stop, a skip, an error burst)
    check_samples: bool = True  # note a window with fewer requests than the SLO's percentiles want
    # What goes to the records file, where it differs from `records` (a continued step's modelled twin:
    # each request once, when it ends); None: `records`.
    written: list[Record] | None = None
    # Why the mode cannot go on (a modelled step past its bound: kvtui.simulator.engine.budget): the
    # step is kept without a verdict, the mode ends with this error.
    mode_error: str | None = None


class Controls(Protocol):
    """What an executor may ask of the run it works for."""

    scenario: Scenario
    closed: bool
    salt: int
    t0: float
    records_written: int

    @property
    def stopping(self) -> bool: ...

    @property
    def skipping(self) -> bool: ...

    @property
    def stop_reason(self) -> str | None: ...

    @property
    def records_path(self) -> Path: ...

    def stop(self, reason: str = ...) -> None: ...

    def emit(self, event: Event) -> None: ...

    def redactor(self, text: str) -> str: ...

    def mode_started(self, md: dict[str, Any]) -> None: ...

    def mode_finished(self, md: dict[str, Any]) -> None: ...

    def step_finished(self, mode: str, step: dict[str, Any]) -> None: ...

    def write_records(self, records: list[Record]) -> int: ...


class StepExecutor(Protocol):
    wall_s_digits: int  # the search's wall_s rounding (offline runs are sub-second)

    def start_mode(self, mode: Mode, md: dict[str, Any], partial: dict[str, Any] | None) -> StartupFacts | None:
        """Bring the mode's server (or model) up; fill md's server/engine_info; journal the mode's
        start; emit engine_ready. None: it did not start, md["error"] says why, and the mode's
        entry is already closed (what a failed start keeps is the executor's to decide)."""
        ...

    def begin_search(self, mode: Mode, md: dict[str, Any]) -> None:
        """What comes between a ready server and the first step (token space, quality, workers)."""
        ...

    def measure(self, mode: Mode, md: dict[str, Any], load: float, index: int, why: str, need: int) -> Measured:
        """Run one step at `load` and return its records and context."""
        ...

    def dead(self) -> str | None:
        """Why the server died during the mode, or None."""
        ...

    def after_step(self, md: dict[str, Any], load: float, measured: Measured) -> None:
        """Bookkeeping once the step is recorded (the offline series)."""
        ...

    def end_mode(self, md: dict[str, Any], prior_series: list[dict[str, Any]]) -> None:
        """Stop what start_mode started; md["series"] gets the mode's telemetry."""
        ...

    def interrupt(self) -> None:
        """A stop arrived (from any thread, maybe a signal handler): cut a start in progress short."""
        ...

    def teardown(self) -> None:
        """Stop whatever still runs (idempotent): the run's last word, also after a failure."""
        ...

    def complete(self, md: dict[str, Any]) -> bool:
        """Whether the mode's entry is complete (a cut-short live mode can be continued)."""
        ...
