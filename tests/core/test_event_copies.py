"""The run owns the only mutable document (issue 29 item 2): every listener gets copies, and the
TUI's state dispatches on the event classes.

A listener that scribbles over everything it receives changes nothing in the run's document or
its snapshot; the dashboard's state after a whole (offline) demo run holds what the snapshot holds.
"""

from __future__ import annotations

from typing import Any

from kvtui.explore import events as ev
from kvtui.explore.run import Run
from kvtui.io.scenario import load_scenario
from kvtui.io.scenario.defaults import demo_scenario_path
from kvtui.io.snapshot.file import load_snapshot
from kvtui.tui.ingest import HANDLERS
from kvtui.tui.state import RunState

TAMPERED = "tampered by a listener"


def _scribble(x: Any) -> None:
    """Write into every dict and list reachable from x."""
    if isinstance(x, dict):
        for v in list(x.values()):
            _scribble(v)
        x[TAMPERED] = True
        if "passed" in x:
            x["passed"] = TAMPERED
    elif isinstance(x, list):
        for v in x:
            _scribble(v)
        x.append(TAMPERED)


def _mentions(x: Any, what: str) -> bool:
    if isinstance(x, dict):
        return what in x or any(_mentions(v, what) for v in x.values())
    if isinstance(x, list):
        return what in x or any(_mentions(v, what) for v in x)
    return x == what


def _demo(tmp_path, listener):
    sc = load_scenario(demo_scenario_path(), ["ramp.max=8"])
    out = tmp_path / "run.json"
    doc = Run(sc, out, modes=[m.name for m in sc.modes[:2]], listener=listener, fast=True).run()
    return sc, out, doc


def test_a_listener_mutating_what_it_got_does_not_change_the_runs_document(tmp_path):
    seen: list[type] = []

    def vandal(e: ev.Event) -> None:
        seen.append(type(e))
        if not isinstance(e, ev.Records):
            _scribble(e.data)

    _, out, doc = _demo(tmp_path, vandal)
    assert {ev.RunStarted, ev.ModeStarting, ev.ModeUpdated, ev.StepFinished, ev.ModeFinished, ev.RunFinished} <= set(seen)
    assert not _mentions(doc, TAMPERED)
    snap = load_snapshot(out)
    assert not _mentions(snap, TAMPERED)
    assert all(isinstance(s["passed"], bool) or s["passed"] is None for m in snap["modes"] for s in m["steps"])


def test_no_listener_holds_the_runs_live_entries(tmp_path):
    got: list[ev.Event] = []
    run_box: list[Run] = []

    def keep(e: ev.Event) -> None:
        got.append(e)

    sc = load_scenario(demo_scenario_path(), ["ramp.max=8"])
    run = Run(sc, tmp_path / "run.json", modes=[sc.modes[0].name], listener=keep, fast=True)
    run_box.append(run)
    doc = run.run()
    live = [id(doc)] + [id(m) for m in doc["modes"]] + [id(s) for m in doc["modes"] for s in m["steps"]]
    for e in got:
        if isinstance(e, ev.Records):
            continue
        held: list[int] = []

        def ids(x: Any) -> None:
            if isinstance(x, (dict, list)):
                held.append(id(x))
                for v in (x.values() if isinstance(x, dict) else x):
                    ids(v)
        ids(e.data)
        assert not set(held) & set(live), f"{type(e).__name__} carries the run's own document"


def test_the_tui_state_after_a_demo_run_equals_the_snapshot(tmp_path):
    state = RunState()
    _, out, doc = _demo(tmp_path, state.ingest)
    snap = load_snapshot(out)
    assert state.status == "finished"
    assert list(state.modes) == [m["name"] for m in snap["modes"]]
    for m in snap["modes"]:
        mv = state.modes[m["name"]]
        assert mv.steps == m["steps"]
        assert mv.run_best == m["best_concurrency"]
        # the state keeps typed documents (kvtui.io.snapshot.schema); written back, they are the snapshot's
        assert mv.doc.to_dict()["prediction"] == m["prediction"]  # what the run predicted and refitted, as written
        assert mv.search.to_dict() == m["search"]
    # The same snapshot replayed gives the same state as the live run left.
    replay = RunState()
    replay.load_snapshot(snap)
    for name, mv in state.modes.items():
        assert replay.modes[name].steps == mv.steps and replay.modes[name].run_best == mv.run_best


def test_every_event_class_has_its_handler():
    assert set(HANDLERS) == set(ev.EVENT_TYPES)
