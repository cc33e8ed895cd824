"""How a finished run ended, in the one sense the exit code needs: did any mode start at all?"""

from __future__ import annotations

from typing import Any, Mapping

from kvtui.io.snapshot.schema import Mode, Run, RunInfo


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


def stopped_parts(doc: Mapping[str, Any] | None) -> str | None:
    """"cut short: bf16; not run: fp8-kv" for a run stopped before its modes finished (its snapshot's
    run.outcome), None for a finished one. Every view that says a run was partial says this."""
    run = (Run.view(doc).run if doc is not None else None) or RunInfo()
    if run.outcome != "stopped":
        return None
    parts = []
    if run.modes_cut:
        parts.append(f"cut short: {_names(run.modes_cut)}")
    if run.modes_not_run:
        parts.append(f"not run: {_names(run.modes_not_run)}")
    return "; ".join(parts) or "the search did not end"


NAMES_SHOWN = 8  # a stop line names this many modes, then counts the rest (10,000 modes: a 68 KB line)


def _names(names: Any) -> str:
    names = names if isinstance(names, list) else list(names)
    shown = ", ".join(str(n)[:60] for n in names[:NAMES_SHOWN])
    more = len(names) - NAMES_SHOWN
    return shown + (f" and {more:,} more" if more > 0 else "")


def stopped_caveat(doc: Mapping[str, Any] | None) -> str | None:
    """The answer's and the report's first caveat for a partial run."""
    what = stopped_parts(doc)
    if what is None:
        return None
    return f"PARTIAL RUN: stopped before its modes finished ({what}); not the whole comparison"


def stopped_line(doc: Mapping[str, Any] | None, resume: str | None = None) -> str | None:
    """"the run was stopped before its modes finished (…)", or None for a finished run; `resume`:
    the command that continues it (else the flag is named)."""
    what = stopped_parts(doc)
    if what is None:
        return None
    run = (Run.view(doc).run if doc is not None else None) or RunInfo()
    why = f"; {run.stop_reason}" if run.stop_reason else ""
    return (f"the run was stopped before its modes finished ({what}{why}); "
            + (f"continue it: {resume}" if resume else "continue it with --resume SNAPSHOT"))


def resume_command(argv: list[str], out: Any) -> str:
    """The user's own command line, continuing the snapshot `out` in place: every --resume and --out of
    theirs replaced by `--resume OUT --out OUT` (their --set and --mode kept, which a resume must
    repeat: kvtui.explore.resume_guard refuses another measurement)."""
    import shlex

    words: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("--resume", "--out"):
            skip = True
            continue
        if a.startswith(("--resume=", "--out=")):
            continue
        words.append(a)
    from kvtui.secrets import redact_args

    # Never a secret on the hint (`--set server.api_key=K`, `--hf-tok K`, a URL's ?api_key=): hidden,
    # to be given again by whoever runs it.
    return shlex.join(["kvtui", *redact_args(words), "--resume", str(out), "--out", str(out)])
