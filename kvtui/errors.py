"""Errors that end a command with a one-line message and a known exit code."""

from __future__ import annotations


class KvtuiError(Exception):
    """Base class: `str(err)` is the one line shown to the user."""

    exit_code = 1


class UsageError(KvtuiError):
    """Bad input (scenario file, CLI argument, snapshot file): exit code 2."""

    exit_code = 2


class ScenarioError(UsageError):
    """One or more problems in a scenario file, each naming file, line and field."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(problems[0] if len(problems) == 1 else f"{problems[0]} (and {len(problems) - 1} more)")


class EngineError(KvtuiError):
    """The server could not start or died. `kind` classifies it; `log_tail` holds its last lines."""

    def __init__(self, kind: str, message: str, log_tail: str = ""):
        self.kind = kind
        self.log_tail = log_tail
        super().__init__(f"{kind}: {message}")


class RunAborted(KvtuiError):
    """The user or a signal stopped the run; what was measured is kept."""

    exit_code = 130
