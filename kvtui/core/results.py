"""Typed results over the run's own document: one step (`StepResult`) and one mode (`ModeResult`).

What each field is and how it reads is the snapshot schema's (kvtui.io.snapshot.schema: `Step`,
`Mode`); these are the run's handles on the dicts it fills as it goes (the controller writes
the search's answer into its mode with `record_search`), so they keep the dict (`raw`) and read
it through a schema view each time. `from_dict` takes a step or mode dict as a snapshot holds
it and `to_dict` gives back exactly that dict (same keys, same order), so a snapshot written
before these types replays and exports byte-identically. Reads are forgiving the way a reader
of imported or older snapshots must be: a field that is missing or of the wrong type reads as
None, never raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

from kvtui.io.snapshot.schema import Mode, Step


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class StepResult:
    """One step's figures and verdict (what `evaluate.evaluate` returns)."""

    raw: dict[str, Any]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "StepResult":
        if not isinstance(d, Mapping):
            raise TypeError(f"a step is a JSON object, not {type(d).__name__}")
        return cls(d if isinstance(d, dict) else dict(d))

    def to_dict(self) -> dict[str, Any]:
        return self.raw

    @cached_property
    def typed(self) -> Step:
        """The step as the schema reads it (a view: read once, for a step that is finished)."""
        return Step.view(self.raw)

    def number(self, key: str) -> float | None:
        """A numeric field (None when missing, null, a bool or a string)."""
        return self.typed.number(key)

    @property
    def load(self) -> float | None:
        return _number(self.typed.load)

    @property
    def passed(self) -> bool | None:
        """The SLO verdict: True, False, or None (undecided: too few samples)."""
        return self.typed.passed

    @property
    def index(self) -> int | None:
        return self.typed.index

    @property
    def why(self) -> str | None:
        """search, confirm, manual or hold."""
        return self.typed.why

    @property
    def limited_by(self) -> str | None:
        return self.typed.limited_by or None

    @property
    def load_kind(self) -> str | None:
        return self.typed.load_kind or None

    @property
    def ran_to_its_end(self) -> bool:
        """Whether it measured its load: one cut short (`aborted`: a stop, a skip, the engine's
        death) lost its in-flight requests, so its figures describe an early-finished part."""
        return self.typed.ran_to_its_end

    def samples(self, metric: str) -> int:
        return self.typed.sample_count(metric)


@dataclass(frozen=True)
class ModeResult:
    """One mode's entry: settings, startup facts, steps, the search's answer."""

    raw: dict[str, Any]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModeResult":
        if not isinstance(d, Mapping):
            raise TypeError(f"a mode is a JSON object, not {type(d).__name__}")
        return cls(d if isinstance(d, dict) else dict(d))

    def to_dict(self) -> dict[str, Any]:
        return self.raw

    @property
    def typed(self) -> Mode:
        """The mode as the schema reads it, now (a view: the run still fills its dict)."""
        return Mode.view(self.raw)

    @property
    def name(self) -> str | None:
        return self.typed.name

    @property
    def steps(self) -> list[StepResult]:
        return [StepResult(s) for s in self.raw.get("steps") or [] if isinstance(s, dict)]

    @property
    def measured_steps(self) -> list[StepResult]:
        """The steps that ran to their end."""
        return [s for s in self.steps if s.ran_to_its_end]

    @property
    def best(self) -> float | None:
        """The max load at the SLO (`best_concurrency`: also a rate for open-loop runs)."""
        return _number(self.raw.get("best_concurrency"))

    @property
    def search(self) -> dict[str, Any]:
        v = self.raw.get("search")
        return v if isinstance(v, dict) else {}

    @property
    def first_fail(self) -> float | None:
        return _number(self.search.get("first_fail"))

    @property
    def server(self) -> dict[str, Any]:
        v = self.raw.get("server")
        return v if isinstance(v, dict) else {}

    @property
    def engine_info(self) -> dict[str, Any]:
        v = self.raw.get("engine_info")
        return v if isinstance(v, dict) else {}

    @property
    def series(self) -> list[dict[str, Any]]:
        return [r for r in self.raw.get("series") or [] if isinstance(r, dict)]

    @property
    def simulated(self) -> bool:
        return self.typed.is_simulated

    @property
    def error_message(self) -> str | None:
        return self.typed.error_message

    def record_search(self, *, best: float | None, first_fail: float | None, confirmed: bool, flips: int, noisy: bool,
                      reached_max: bool, wall_s: float, describe: str, done: bool, skipped: bool,
                      settled: dict[str, str] | None = None) -> None:
        """The search's answer, into the entry (the controller's last word on a mode)."""
        self.raw["best_concurrency"] = best
        self.raw["search"].update(
            best=best, first_fail=first_fail, confirmed=confirmed, flips=flips, noisy=noisy, reached_max=reached_max,
            steps=len(self.raw["steps"]), wall_s=wall_s, describe=describe, done=done,
        )
        knee = next((s for s in self.steps
                     if first_fail is not None and s.load == first_fail and s.passed is False), None)
        self.raw["knee_limited_by"] = knee.raw.get("limited_by") if knee else None
        if skipped:
            self.raw["search"]["skipped"] = True
        if settled:  # ramp.confirm_when = "doubt": the knee loads not repeated, and why
            self.raw["search"]["settled"] = settled
