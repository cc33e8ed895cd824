"""kvtui: a live capacity explorer for vLLM across precision modes."""

from pathlib import Path

__version__ = "0.1.0"

# Shipped data lives inside the package (kvtui/paths.py reads it through importlib.resources;
# the user's own scenarios and themes are in the per-user directory it names).
DATA_DIR = Path(__file__).resolve().parent / "data"
SCENARIOS_DIR = DATA_DIR / "scenarios"
# The repository root of a checkout (tests and bench/ use it; meaningless in an installed wheel).
PROJECT_ROOT = Path(__file__).resolve().parent.parent
