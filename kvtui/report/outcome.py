"""How a finished run ended, in the one sense the exit code needs: did any mode start at all?"""

from __future__ import annotations

from typing import Any, Mapping

from kvtui.snapshot.schema import Mode, Run, RunInfo


def mode_started(m: Mode | Mapping[str, Any]) -> bool:
    """A mode started when its engine came up (an endpoint), or it has steps (measured, or kept)."""
    mode = Mode.of(m)
    return bool(mode.endpoint or mode.all_steps) or not mode.has_error


def no_mode_started(doc: Mapping[str, Any]) -> bool:
    """True when every mode of the run failed before its first step, none because the user
    stopped it: a failed run (exit 1 headless and in the TUI), not a finished one."""
    modes = Run.view(doc).all_modes
    if not modes:
        return False
    return all(not mode_started(m) and (m.error.kind if m.error else None) != "cancelled" for m in modes)


NO_MODE_STARTED = "no mode started (each mode's error is in the log)"


def stopped_line(doc: Mapping[str, Any] | None) -> str | None:
    """"the run was stopped before its modes finished (…)", or None for a finished run."""
    run = (Run.view(doc).run if doc is not None else None) or RunInfo()
    if run.outcome != "stopped":
        return None
    parts = []
    if run.modes_cut:
        parts.append(f"cut short: {', '.join(run.modes_cut)}")
    if run.modes_not_run:
        parts.append(f"not run: {', '.join(run.modes_not_run)}")
    why = f"; {run.stop_reason}" if run.stop_reason else ""
    return (f"the run was stopped before its modes finished ({'; '.join(parts) or 'the search did not end'}{why}); "
            "continue it with --resume SNAPSHOT")
