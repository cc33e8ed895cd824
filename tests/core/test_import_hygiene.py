"""Nothing outside kvtui/tui imports Textual: the measurement, the reports and the command line
(until it starts the dashboard) load without it. Checked in a fresh interpreter, through sys.modules,
so an import hidden inside a module's top level or its package shows too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UI_PACKAGES = ("textual", "textual_plotext", "textual_serve", "plotext")

PROBE = """
import importlib, json, pkgutil, sys
target = sys.argv[1]
mod = importlib.import_module(target)
if hasattr(mod, "__path__"):  # a package: every module in it
    for info in pkgutil.walk_packages(mod.__path__, target + "."):
        importlib.import_module(info.name)
if target == "kvtui.cli.entry":
    mod.build_parser()  # every command's add_parser
ui = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[2])))
print(json.dumps(ui))
"""


def _ui_modules_after_importing(target: str) -> list[str]:
    r = subprocess.run([sys.executable, "-c", PROBE, target, json.dumps(UI_PACKAGES)], capture_output=True, text=True,
                       cwd=ROOT, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("target", ["kvtui.explore", "kvtui.report", "kvtui.cli.entry", "kvtui.runtime.engines", "kvtui.runtime.load",
                                    "kvtui.runtime.telemetry", "kvtui.io.scenario"])
def test_no_textual_outside_the_tui(target):
    assert _ui_modules_after_importing(target) == []


def test_the_probe_sees_textual_when_it_is_imported():
    # The check itself can fail: the TUI package does pull Textual in.
    assert "textual" in _ui_modules_after_importing("kvtui.tui.app")
