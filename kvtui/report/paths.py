"""Where a run's snapshot goes when no --out says: runs/<scenario>-<time>.json (the CLI and the TUI)."""

from __future__ import annotations

import time
from pathlib import Path

from kvtui import clock


def file_stem(name: str) -> str:
    """A scenario name as one file name inside runs/: no '/', no '..', no leading '.' or '-', no control characters.

    (A scenario `name = "../../../../tmp/x"` or an absolute path wrote snapshots outside runs/.)
    """
    import re

    stem = re.sub(r"[^A-Za-z0-9_.+-]+", "_", name).strip("._-")[:100]
    return stem or "scenario"


def default_out(scenario_name: str) -> Path:
    from kvtui.io.snapshot.outclaim import unique_path

    # Two runs started in the same second must not share files (a run refuses another's).
    stamp = time.strftime('%Y%m%d-%H%M%S', time.localtime(clock.time()))
    return unique_path(Path("runs") / f"{file_stem(scenario_name)}-{stamp}.json")
