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
from hypothesis import HealthCheck, settings

from scenario_factory import knee_toml

ROOT = Path(__file__).resolve().parent.parent

# Property tests judge answers, never speed: a CPU taken by the other queue must not fail them
# (the quiet modules run niced, beside the live-simulator tests).
settings.register_profile("kvtui", deadline=None, suppress_health_check=[HealthCheck.too_slow])
# A deterministic suite (issue 29 item 6): in CI (.ci/run runs with CI=true) every property test
# draws the same examples on every run, from no example database, and a failure prints the blob
# that reproduces it (@reproduce_failure); locally they draw at random, to find new cases. An
# example that ever failed is kept as an explicit @example (or a parametrized case) beside its test.
# HYPOTHESIS_PROFILE=ci|dev picks one by hand.
settings.register_profile("ci", parent=settings.get_profile("kvtui"), derandomize=True, database=None,
                          print_blob=True)
settings.register_profile("dev", parent=settings.get_profile("kvtui"))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE")
                      or ("ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "dev"))


@pytest.fixture
def knee_file(tmp_path: Path) -> Callable[..., Path]:
    """knee_file("name.toml", **knee_toml's arguments) -> the scenario written under tmp_path."""

    def make(filename: str = "knee.toml", **kw: Any) -> Path:
        p = tmp_path / filename
        p.write_text(knee_toml(**kw))
        return p

    return make


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny Llama (kvtui.runtime.engines.vllm.tinymodel, random weights), built once per test process for
    every real-vLLM test of tests/vllm and tests/e2e (they all run on one xdist worker)."""
    from kvtui.runtime.engines.vllm.tinymodel import build

    return build(tmp_path_factory.mktemp("tiny") / "tiny-llama")


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
    - "rest": everything else but the quiet modules (QUIET_MODULES: small groups of their own
      that fill in on either worker, niced too). The live-simulator tests measure wall-clock
      latencies on a two-core box as if alone: two of them at once starve each other's clients (a
      knee moved by one step, a sampled gauge that missed its peak), so they never share the CPU
      with each other."""
    missing = sorted(m for m in QUIET_MODULES if not (ROOT / m).is_file())
    if missing:  # a renamed module would silently move back to the live queue
        raise pytest.UsageError(f"tests/conftest.py QUIET_MODULES names no such file: {', '.join(missing)}")
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_queue(item)))


def _queue(item: pytest.Item) -> str:
    if item.get_closest_marker("vllm") is not None:
        return "vllm"
    quiet = _quiet_module(item)
    # A group of its own per quiet module: whichever worker frees up first takes the next one.
    return f"quiet:{quiet}" if quiet else "rest"


# Modules that start no server and time nothing (frozen snapshots, offline simulator maths, pure
# functions). Each is a small group of its own, niced like the vLLM tests, so that it goes to
# whichever worker frees up first: which of the two long queues is the critical path depends on
# the machine (with AVX-512 the vLLM CPU build starts in half the time, and the live queue is the
# longer; without, the vLLM queue is), and a niced quiet test never competes with a live one for
# the CPU. A module belongs here only if it starts no `kvtui sim serve`, no kvtui run and no HTTP
# server, and asserts nothing that a slow CPU could change (the second set: the modelled demo). xdist hands out groups largest first
# (by test count): the live queue first, the vLLM queue as soon as the other worker has a slot.
QUIET_MODULES = frozenset({
    "tests/tui/test_snapshots.py", "tests/tui/test_replay.py", "tests/tui/test_png_export.py",
    "tests/tui/test_tui_structure.py", "tests/tui/test_view_model.py", "tests/core/test_evaluate.py",
    "tests/core/test_search.py", "tests/core/test_plan.py", "tests/predict/test_search_seeded.py",
    "tests/predict/test_search_recovery.py", "tests/predict/test_knee_interval.py", "tests/core/test_compile_cache.py",
    "tests/sim/test_sim_calibration.py", "tests/sim/test_sim_int4_fit.py", "tests/sim/test_sim_fast.py",
    "tests/sim/test_sim_properties.py", "tests/sim/test_sim_h200_run.py", "tests/report/test_records_cols.py",
    "tests/snapshot/test_published_exports.py",
    "tests/core/test_window_stats.py", "tests/core/test_sequential.py", "tests/core/test_continuous.py",
}) | frozenset({
    # Modules that run the shipped demo headless: in process, paced (kvtui.explore.pacing), so a slow or
    # busy CPU changes how long they take, never what they assert (test_demo_deterministic proves it
    # under a busy loop). Niced, they take no CPU from a live test beside them.
    "tests/e2e/test_sim_demo.py", "tests/e2e/test_demo_deterministic.py",
}) | frozenset({
    # Modules whose runs are offline (`--fast`: modelled time) or refused before they start, and whose
    # servers (documented `kvtui web` / `sim serve` lines, TUIs in tmux) are only checked to serve and
    # stop: they assert exit codes, messages and files, never a latency, under bounded waits of 120 s
    # or more (hang guards). They were 160 s of the live queue, the suite's critical path.
    "tests/report/test_documented_commands.py", "tests/reliability/test_hostile_input.py",
    "tests/reliability/test_outputs.py", "tests/reliability/test_bad_input.py", "tests/reliability/test_json_bounds.py",
}) | frozenset({
    # Modules that start nothing and whose runs are all offline (`--fast` / Run(fast=True): modelled time, the
    # same answer on any CPU), or `kvtui init`/`whatif`, or pure functions: 2.9 minutes of the live queue on a
    # busy two-core machine (preemption_stop 45 s, settled 45 s), which is the suite's critical path.
    "tests/core/test_event_copies.py", "tests/core/test_events.py", "tests/core/test_preemption_stop.py",
    "tests/core/test_settled.py", "tests/core/test_window_choice.py", "tests/pkg/test_init.py",
    "tests/pkg/test_init_gpu_story.py", "tests/pkg/test_scenario_says_what.py",
    "tests/predict/test_knee_interval_exports.py", "tests/predict/test_knee_interval_population.py",
    "tests/reliability/test_bounded_input.py", "tests/reliability/test_resume_guard.py",
    "tests/tui/test_tensor_parallel.py",
})


def _quiet_module(item: pytest.Item) -> str | None:
    try:
        rel = Path(str(item.path)).resolve().relative_to(ROOT).as_posix()
    except ValueError:  # a test file outside this checkout
        return None
    return rel if rel in QUIET_MODULES else None


def _niced(item: pytest.Item) -> bool:
    return item.get_closest_marker("vllm") is not None or _quiet_module(item) is not None


# The niceness a real-vLLM test runs at (and so the servers and kvtui runs it starts: children
# inherit it) when another xdist worker runs beside it. On two cores a vLLM CPU server at the same
# priority starved the client of a live-simulator test next to it, whose steps were then flagged
# client-limited, rightly (tests/report/test_compare.py, once). At 19 the scheduler gives the
# simulator tests the CPU whenever they want it and vLLM the rest; no vLLM test asserts a speed.
VLLM_NICE = 19


# KVTUI_TEST_TIMELINE=path: one JSON line per test (worker, queue, start, end: setup and teardown
# included) appended to path, to see which queue is the suite's critical path on a machine.
_TIMELINE = os.environ.get("KVTUI_TEST_TIMELINE")


def _timeline(item: pytest.Item, t0: float) -> None:
    import json
    import time

    with open(str(_TIMELINE), "a", encoding="utf-8") as f:
        f.write(json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER"), "queue": _queue(item),
                            "test": item.nodeid, "start": round(t0, 2), "end": round(time.time(), 2)}) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """A hook, not a fixture: the module-scoped fixtures that start the servers run inside it."""
    import time

    t0 = time.time()
    try:
        yield from _niced_protocol(item)
    finally:
        if _TIMELINE:
            _timeline(item, t0)


def _niced_protocol(item: pytest.Item):
    if not _niced(item) or not os.environ.get("PYTEST_XDIST_WORKER"):
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

