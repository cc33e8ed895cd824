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


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`-n 2 --dist loadgroup`, what .ci/run uses) the suite is two queues, one per
    worker, each run one test after another:
    - "vllm": every test that starts a real vLLM (a vLLM CPU server takes every core it sees, so two
      at once would only slow both), at a low CPU priority (pytest_runtest_protocol below);
    - "rest": everything else. The live-simulator tests measure wall-clock latencies on a two-core
      box as if alone: two of them at once starve each other's clients (a knee moved by one step,
      a sampled gauge that missed its peak), so they never share the CPU with each other."""
    for item in items:
        group = "vllm" if item.get_closest_marker("vllm") is not None else "rest"
        item.add_marker(pytest.mark.xdist_group(group))


# The niceness a real-vLLM test runs at (and so the servers and kvtui runs it starts: children
# inherit it) when another xdist worker runs beside it. On two cores a vLLM CPU server at the same
# priority starved the client of a live-simulator test next to it, whose steps were then flagged
# client-limited, rightly (tests/report/test_compare.py, once). At 19 the scheduler gives the
# simulator tests the CPU whenever they want it and vLLM the rest; no vLLM test asserts a speed.
VLLM_NICE = 19


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """A hook, not a fixture: the module-scoped fixtures that start the servers run inside it."""
    if item.get_closest_marker("vllm") is None or not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, max(before, VLLM_NICE))
    try:
        yield
    finally:
        try:  # raising it back needs CAP_SYS_NICE (root); otherwise the worker stays nice
            os.setpriority(os.PRIO_PROCESS, 0, before)
        except PermissionError:
            pass
