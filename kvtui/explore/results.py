"""Typed results: one step (`StepResult`) and one mode (`ModeResult`) of a snapshot.

The snapshot schema (kvtui.snapshot.file.SCHEMA) stays the stored form: `from_dict` takes
a step or mode dict as a snapshot holds it and `to_dict` gives back exactly that dict (same
keys, same order), so a snapshot written before these types replays and exports
byte-identically. Reads are typed and forgiving the way a reader of imported or older
snapshots must be: a field that is missing or of the wrong type reads as None, never raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


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

    def number(self, key: str) -> float | None:
        """A numeric field (None when missing, null, a bool or a string)."""
        return _number(self.raw.get(key))

    @property
    def load(self) -> float | None:
        return self.number("load")

    @property
    def passed(self) -> bool | None:
        """The SLO verdict: True, False, or None (undecided: too few samples)."""
        v = self.raw.get("passed")
        return v if isinstance(v, bool) else None

    @property
    def index(self) -> int | None:
        v = self.raw.get("index")
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    @property
    def why(self) -> str | None:
        """search, confirm, manual or hold."""
        v = self.raw.get("why")
        return v if isinstance(v, str) else None

    @property
    def limited_by(self) -> str | None:
        v = self.raw.get("limited_by")
        return v if isinstance(v, str) and v else None

    @property
    def load_kind(self) -> str | None:
        v = self.raw.get("load_kind")
        return v if isinstance(v, str) and v else None

    @property
    def ran_to_its_end(self) -> bool:
        """Whether it measured its load: one cut short (`aborted`: a stop, a skip, the engine's
        death) lost its in-flight requests, so its figures describe an early-finished part."""
        return not self.raw.get("aborted")

    def samples(self, metric: str) -> int:
        v = (self.raw.get("samples") or {}).get(metric)
        return v if isinstance(v, int) else 0


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
    def name(self) -> str | None:
        v = self.raw.get("name")
        return v if isinstance(v, str) else None

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
        return bool(self.raw.get("simulated") or self.engine_info.get("simulated"))

    @property
    def error_message(self) -> str | None:
        return (self.raw.get("error") or {}).get("message")

    def record_search(self, *, best: float | None, first_fail: float | None, confirmed: bool, flips: int, noisy: bool,
                      reached_max: bool, wall_s: float, describe: str, done: bool, skipped: bool) -> None:
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
