"""The run's typed events: every kind declared once, consumed by the TUI state and the printer,
and a misspelt kind refused instead of dropped."""

from __future__ import annotations

import io
from dataclasses import FrozenInstanceError
from types import SimpleNamespace

import pytest

from kvtui.cli.run import HeadlessPrinter
from kvtui.explore import events as ev
from kvtui.explore.run import Run
from kvtui.io.scenario import load_scenario
from kvtui.io.scenario.defaults import demo_scenario_path
from kvtui.tui.state import RunState

# Declared kinds the dashboard's state has no handler for, on purpose: it reads the mode's quality
# from its entry when the mode finishes.
STATE_IGNORES = {"quality"}


def test_every_kind_is_declared_once_and_the_tui_state_handles_it():
    kinds = [t.kind for t in ev.EVENT_TYPES]
    assert len(kinds) == len(set(kinds)) == len(ev.EVENT_KINDS)
    missing = [k for k in kinds if not callable(getattr(RunState, f"_on_{k}", None)) and k not in STATE_IGNORES]
    assert missing == []


def test_a_misspelt_kind_is_refused_not_dropped():
    with pytest.raises(ev.UnknownEvent, match="step_finshed"):
        RunState().ingest(SimpleNamespace(kind="step_finshed", mode="a", data={}))


def test_events_are_frozen_and_keep_the_payload_listeners_read():
    e = ev.StepStarted("fp8", load=8, index=2, why="confirm", closed=True)
    assert (e.kind, e.mode, e.data) == ("step_started", "fp8", {"load": 8, "index": 2, "why": "confirm", "closed": True})
    with pytest.raises(FrozenInstanceError):
        e.load = 9  # type: ignore[misc]
    assert ev.ModeStarting("a", 0, 2, {"name": "a"}).data == {"index": 0, "of": 2, "mode": {"name": "a"}}
    assert ev.EngineReady("a", {"kv_cache_tokens": 5}, {"engine": "sim"}).data["facts"] == {"kv_cache_tokens": 5}


def test_a_fast_run_emits_only_declared_events_and_the_printer_and_state_take_them(tmp_path):
    sc = load_scenario(demo_scenario_path(), ["ramp.max=8"])
    got: list[ev.Event] = []
    out = io.StringIO()
    printer = HeadlessPrinter(sc, out)
    state = RunState()

    def listener(e: ev.Event) -> None:
        got.append(e)
        printer(e)
        state.ingest(e)

    doc = Run(sc, tmp_path / "run.json", modes=[sc.modes[0].name], listener=listener, fast=True).run()
    assert all(type(e) in ev.EVENT_TYPES for e in got)
    kinds = [e.kind for e in got]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    steps = [e for e in got if isinstance(e, ev.StepFinished)]
    assert [e.step for e in steps] == doc["modes"][0]["steps"]
    assert out.getvalue().count("\n[") >= len(steps)  # one printed line per step at least
    assert [s["load"] for s in state.modes[sc.modes[0].name].steps] == [s["load"] for s in doc["modes"][0]["steps"]]
