"""kvtui: a live capacity explorer for vLLM across precision modes."""

from pathlib import Path

__version__ = "0.1.0"

# themes/ and scenarios/ live at the repository root (README installs with `pip install -e`).
PROJECT_ROOT = Path(__file__).resolve().parent.parent
THEMES_DIR = PROJECT_ROOT / "themes"
SCENARIOS_DIR = PROJECT_ROOT / "scenarios"
DATA_DIR = Path(__file__).resolve().parent / "data"
