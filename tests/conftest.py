"""Shared by every test package: the knee scenario's factory (tests/scenario_factory.py).

Import it as `from scenario_factory import knee_toml` (tests/ is on the path: pyproject's
pythonpath), or take the `knee_file` fixture for a scenario file under tmp_path.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest
from scenario_factory import knee_toml


@pytest.fixture
def knee_file(tmp_path: Path) -> Callable[..., Path]:
    """knee_file("name.toml", **knee_toml's arguments) -> the scenario written under tmp_path."""

    def make(filename: str = "knee.toml", **kw: Any) -> Path:
        p = tmp_path / filename
        p.write_text(knee_toml(**kw))
        return p

    return make


# Every test sees an empty per-user kvtui directory (KVTUI_HOME), never the developer's own
# scenarios and themes: the setup screen's list and the themes must not depend on who runs the
# suite. Subprocesses inherit it.
os.environ["KVTUI_HOME"] = tempfile.mkdtemp(prefix="kvtui-home-")
