"""scripts/import_cycles.py reads every import, those inside functions too, and fails on one that
runs back up the layers or closes a cycle; the tree itself passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "import_cycles.py"


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "kvtui"
    for rel, text in {"__init__.py": "", **files}.items():
        p = pkg / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return pkg


def _check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)], capture_output=True, text=True, timeout=60)


def test_the_tree_has_no_import_against_the_layers():
    r = _check(ROOT / "kvtui")
    assert r.returncode == 0, r.stdout


def test_an_import_inside_a_function_that_runs_up_is_caught(tmp_path):
    root = _tree(tmp_path, {
        "tui/__init__.py": "", "tui/app.py": "from kvtui.report import text\n",
        "report/__init__.py": "", "report/text.py": "", "report/export.py": "def svg():\n    from kvtui.tui.app import x\n",
    })
    r = _check(root)
    assert r.returncode == 1
    assert "kvtui/report/export.py:2: report imports kvtui.tui.app (tui): back up the layers" in r.stdout
    assert "import cycle between layers: report <-> tui" in r.stdout


def test_siblings_may_import_one_way_but_not_both(tmp_path):
    one_way = _tree(tmp_path / "a", {"engines/__init__.py": "from kvtui.load import records\n",
                                     "load/__init__.py": "", "load/records.py": ""})
    assert _check(one_way).returncode == 0
    both = _tree(tmp_path / "b", {"engines/__init__.py": "from kvtui.load import records\n",
                                  "load/__init__.py": "", "load/records.py": "import kvtui.engines\n"})
    r = _check(both)
    assert r.returncode == 1 and "import cycle between layers: engines <-> load" in r.stdout
