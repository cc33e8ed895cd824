"""The published snapshots (docs/results/*.json.xz) and the frozen ones the tests keep (tests/*/data)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = sorted((ROOT / "docs" / "results").glob("*.json.xz"))
FROZEN = [ROOT / "tests" / "tui" / "data" / "l4-demo.json.xz"]
SNAPSHOTS = PUBLISHED + FROZEN


def snapshot_path(xz: Path) -> Path:
    """Where kvtui reads it from: X.json (the reader finds X.json.xz beside it)."""
    return xz.with_name(xz.name[: -len(".xz")])


def fresh_demo_run(where: Path) -> Path:
    """A run of the built-in demo scenario, made now by the real CLI (the offline simulator: seconds)."""
    import os
    import subprocess
    import sys

    out = where / "demo.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", "kvtui", "run", str(ROOT / "kvtui" / "data" / "scenarios" / "sim-demo.toml"),
                    "--headless", "--fast", "--out", str(out)], check=True, env=env, cwd=where,
                   stdout=subprocess.DEVNULL, timeout=600)
    return out
