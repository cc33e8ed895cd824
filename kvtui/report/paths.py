"""Where a run's snapshot goes when no --out says: runs/<scenario>-<time>.json (the CLI and the TUI)."""

from __future__ import annotations

import time
from pathlib import Path


def default_out(scenario_name: str) -> Path:
    return Path("runs") / f"{scenario_name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
