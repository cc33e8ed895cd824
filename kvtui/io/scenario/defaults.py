"""Where the built-in scenarios live (package data, see kvtui/paths.py)."""

from __future__ import annotations

from pathlib import Path

from kvtui import paths


def demo_scenario_path() -> Path:
    return paths.demo_scenario()


def bundled_scenarios() -> list[Path]:
    """The shipped scenarios and the user's own (a user file hides a shipped one of its name)."""
    return paths.all_files("scenarios")
