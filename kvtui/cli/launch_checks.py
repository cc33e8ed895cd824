"""What `kvtui`, `kvtui run`, `kvtui replay` and `kvtui web` check before they start anything:
leftovers of killed runs, the theme's name, a dumb terminal. One module, so the commands that
share them do not import each other (they used to: run ↔ tui ↔ replay)."""

from __future__ import annotations

import argparse
import os
import sys

from kvtui.errors import UsageError


def _ask(question: str) -> bool:
    sys.stderr.write(question)
    sys.stderr.flush()
    try:
        return sys.stdin.readline().strip().lower() in ("y", "yes")
    except (OSError, ValueError):
        return False


def check_leftovers(args: argparse.Namespace) -> None:
    """What earlier, killed runs left running: named, and stopped with --kill-stale (or on a yes)."""
    from kvtui.runtime.procs.leftovers import check_at_start

    interactive = sys.stdin.isatty() and sys.stderr.isatty()
    check_at_start(getattr(args, "kill_stale", False), sys.stderr, _ask if interactive else None)


def dumb_terminal() -> bool:
    return os.environ.get("TERM", "") == "dumb"


def check_theme(theme: str | None) -> None:
    if not theme:
        return
    from textual.theme import BUILTIN_THEMES

    from kvtui.tui.themes import load_themes

    ours, _ = load_themes()
    if theme not in ours and theme not in BUILTIN_THEMES:
        names = ", ".join(list(ours) + sorted(BUILTIN_THEMES))
        raise UsageError(f"--theme {theme}: no such theme (themes: {names})")
