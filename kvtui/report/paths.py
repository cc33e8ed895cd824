"""Where a run's snapshot goes when no --out says: runs/<scenario>-<time>.json (the CLI and the TUI)."""

from __future__ import annotations

import time
from pathlib import Path


def default_out(scenario_name: str) -> Path:
    from kvtui.report.outclaim import unique_path

    # Two runs started in the same second must not share files (a run refuses another's).
    return unique_path(Path("runs") / f"{scenario_name}-{time.strftime('%Y%m%d-%H%M%S')}.json")
