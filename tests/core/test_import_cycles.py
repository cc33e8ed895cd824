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
    one_way = _tree(tmp_path / "a", {"runtime/engines/__init__.py": "from kvtui.runtime.load import records\n",
                                     "runtime/load/__init__.py": "", "runtime/load/records.py": ""})
    assert _check(one_way).returncode == 0
    both = _tree(tmp_path / "b", {"runtime/engines/__init__.py": "from kvtui.runtime.load import records\n",
                                  "runtime/load/__init__.py": "", "runtime/load/records.py": "import kvtui.runtime.engines\n"})
    r = _check(both)
    assert r.returncode == 1 and "import cycle between layers: runtime.engines <-> runtime.load" in r.stdout


def test_a_cycle_inside_one_layer_through_function_imports_is_caught(tmp_path):
    # the shape of commands.run -> commands.tui (launch_tui) -> commands.run (check_leftovers), both deferred
    root = _tree(tmp_path, {
        "cli/__init__.py": "",
        "cli/run.py": "def run():\n    from kvtui.cli.tui import launch_tui\n",
        "cli/tui.py": "def launch_tui():\n    from kvtui.cli.run import check\n",
    })
    r = _check(root)
    assert r.returncode == 1
    assert "import cycle between modules: kvtui.cli.run <-> kvtui.cli.tui" in r.stdout


def test_a_type_checking_cycle_counts_and_so_does_one_inside_the_tui(tmp_path):
    typed = _tree(tmp_path / "a", {
        "runtime/load/__init__.py": "", "runtime/load/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kvtui.runtime.load import b\n",
        "runtime/load/b.py": "from kvtui.runtime.load import a\n",
    })
    r = _check(typed)
    assert r.returncode == 1 and "import cycle between modules: kvtui.runtime.load.a <-> kvtui.runtime.load.b" in r.stdout
    tui = _tree(tmp_path / "b", {"tui/__init__.py": "", "tui/a.py": "from kvtui.tui import b\n",
                                 "tui/b.py": "def f():\n    from kvtui.tui import a\n"})
    r = _check(tui)
    assert r.returncode == 1 and "import cycle between modules: kvtui.tui.a <-> kvtui.tui.b" in r.stdout
