"""Where the built-in scenarios live."""

from __future__ import annotations

from pathlib import Path

from kvtui import SCENARIOS_DIR

DEMO = "sim-demo.toml"


def demo_scenario_path() -> Path:
    return SCENARIOS_DIR / DEMO


def bundled_scenarios() -> list[Path]:
    return sorted(SCENARIOS_DIR.glob("*.toml"))
