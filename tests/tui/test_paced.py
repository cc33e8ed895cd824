"""The demo watched live is the --fast simulation paced to the wall (issue 46): the same code, the
same figures. Everything here runs on a PacedClock whose `real` clock is virtual: nothing waits on
the wall, and the waits the pacing asked for are read off that clock."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from kvtui import SCENARIOS_DIR
from kvtui.clock import PacedClock, VirtualClock
from kvtui.explore import events as ev
from kvtui.explore.run import Run
from kvtui.io.scenario import load_scenario

DEMO = SCENARIOS_DIR / "sim-demo.toml"


def _figures(doc: dict[str, Any]) -> list[tuple]:
    """What the issue compares: each mode's steps (load, verdict, TTFT/TPOT p95, output tok/s) and its best."""
    out = []
    for m in doc["modes"]:
        steps = [(s["load"], s["passed"], (s.get("ttft_ms") or {}).get("p95"), (s.get("tpot_ms") or {}).get("p95"),
                  s.get("output_tok_s"), s.get("duration_s")) for s in m["steps"]]
        out.append((m["name"], m.get("best_concurrency"), steps))
    return out


def _fast_doc(tmp_path: Path, modes: list[str] | None = None) -> dict[str, Any]:
    return Run(load_scenario(DEMO), tmp_path / "fast.json", modes=modes, fast=True, publish=False).run()


class Counting(VirtualClock):
    """A virtual wall that counts its waits and can act on the n-th (a pause released, a jump)."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeps = 0
        self.on_sleep: Any = None

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.sleeps += 1
        if self.on_sleep is not None:
            self.on_sleep(self)


def test_pacing_waits_the_modelled_time_over_speed_and_releases_rows_as_it_goes(tmp_path):
    real = Counting()
    pace = PacedClock(20.0, real=real)
    seen: list[tuple[float, ev.Event]] = []
    run = Run(load_scenario(DEMO), tmp_path / "paced.json", modes=["bf16"], pace=pace, publish=False,
              listener=lambda e: seen.append((real.monotonic(), e)))
    doc = run.run()
    fast = _fast_doc(tmp_path, ["bf16"])
    assert _figures(doc) == _figures(fast)
    modelled = sum(s["duration_s"] for s in doc["modes"][0]["steps"])
    # the virtual time advanced by the steps' modelled durations, the wall by those over the speed
    assert abs(pace.monotonic() - modelled) < 0.05 * len(doc["modes"][0]["steps"])
    assert abs((real.monotonic() - 1000.0) - modelled / 20.0) < 0.01 * len(doc["modes"][0]["steps"])
    # no single wait longer than a quarter second of wall: a stop, a pause or a jump acts within it
    assert real.sleeps >= modelled / 20.0 / 0.25
    # each step's rows come one by one, in time order, on a wall clock that moves between them
    per_step: dict[int, list[tuple[float, float]]] = {}
    step = -1
    for wall, e in seen:
        if isinstance(e, ev.StepStarted):
            step = e.index
        elif isinstance(e, ev.Telemetry):
            per_step.setdefault(step, []).append((wall, e.row["t"]))
    assert sorted(per_step) == list(range(len(doc["modes"][0]["steps"])))
    for rows in per_step.values():
        assert len(rows) > 1
        assert [t for _, t in rows] == sorted(t for _, t in rows)
        assert rows[-1][0] > rows[0][0]  # released over time, not at once
    progress = [e for _, e in seen if isinstance(e, ev.StepProgress)]
    assert progress and all(p.paced == 20.0 for p in progress)
    # the step's result lands at the end of its modelled time: after its last row
    finished = [wall for wall, e in seen if isinstance(e, ev.StepFinished)]
    assert finished[0] >= per_step[0][-1][0]


def test_jump_mid_run_stops_the_waiting_and_keeps_the_figures(tmp_path):
    real = Counting()
    pace = PacedClock(20.0, real=real)
    jumped: dict[str, float] = {}

    def listener(e: ev.Event) -> None:
        if isinstance(e, ev.StepFinished) and not jumped:
            pace.jump()  # the TUI's j, as the first step lands
            jumped["wall"] = real.monotonic()

    doc = Run(load_scenario(DEMO), tmp_path / "paced.json", pace=pace, publish=False, listener=listener).run()
    assert _figures(doc) == _figures(_fast_doc(tmp_path))
    assert real.monotonic() == jumped["wall"]  # no wait on the wall after the jump
    first = doc["modes"][0]["steps"][0]["duration_s"]
    assert jumped["wall"] - 1000.0 < first / 20.0 + 1.0


def test_a_pause_holds_the_paced_clock(tmp_path):
    real = Counting()
    pace = PacedClock(20.0, real=real)
    box: dict[str, Any] = {}

    def listener(e: ev.Event) -> None:
        if isinstance(e, ev.Telemetry) and "at" not in box and len(box.setdefault("rows", [])) == 5:
            box["run"].pause()
            box["at"], box["wall"] = pace.monotonic(), real.monotonic()
        elif isinstance(e, ev.Telemetry):
            box.setdefault("rows", []).append(e)

    def unpause_later(clock: Counting) -> None:
        if "at" in box and not box.get("released") and clock.monotonic() - box["wall"] >= 30.0:
            box["modelled_while_paused"] = pace.monotonic() - box["at"]
            box["released"] = True
            box["run"].unpause()

    real.on_sleep = unpause_later
    run = box["run"] = Run(load_scenario(DEMO), tmp_path / "paced.json", modes=["bf16"], pace=pace, publish=False,
                           listener=listener)
    doc = run.run()
    assert box["released"] and box["modelled_while_paused"] == 0.0  # 30 s of wall, no modelled time
    assert _figures(doc) == _figures(_fast_doc(tmp_path, ["bf16"]))


def test_stop_mid_paced_step_leaves_that_step_without_a_verdict(tmp_path):
    real = VirtualClock()
    pace = PacedClock(20.0, real=real)
    box: dict[str, Any] = {"rows": 0}

    def listener(e: ev.Event) -> None:
        if isinstance(e, ev.StepStarted):
            box["step"], box["rows"] = e.index, 0
        elif isinstance(e, ev.Telemetry) and box.get("step") == 1:
            box["rows"] += 1
            if box["rows"] == 10:
                box["run"].stop("the test stops mid-step")

    run = box["run"] = Run(load_scenario(DEMO), tmp_path / "paced.json", pace=pace, publish=False, listener=listener)
    doc = run.run()
    fast = _fast_doc(tmp_path)
    steps = doc["modes"][0]["steps"]
    assert len(steps) == 2
    assert _figures(doc)[0][2][0] == _figures(fast)[0][2][0]  # the step before the stop: as --fast has it
    cut = steps[1]
    assert cut["passed"] is None and cut.get("cut") is True and cut.get("aborted") == "the test stops mid-step"
    assert cut["requests"] < fast["modes"][0]["steps"][1]["requests"]  # only what had ended by the stop
    assert doc["modes"][0].get("complete") is False
    assert len(doc["modes"]) == 1 or not doc["modes"][1].get("steps")
    assert not [t for t in threading.enumerate() if t.name.startswith("kvtui") and t.is_alive()]


def test_skip_mid_paced_step_cuts_it_and_the_next_mode_runs(tmp_path):
    pace = PacedClock(20.0, real=VirtualClock())
    box: dict[str, Any] = {"rows": 0}

    def listener(e: ev.Event) -> None:
        if isinstance(e, ev.Telemetry) and e.mode == "bf16":
            box["rows"] += 1
            if box["rows"] == 10:
                box["run"].skip_mode()

    run = box["run"] = Run(load_scenario(DEMO), tmp_path / "paced.json", pace=pace, publish=False, listener=listener)
    doc = run.run()
    bf16, fp8 = doc["modes"]
    assert len(bf16["steps"]) == 1 and bf16["steps"][0]["passed"] is None and bf16["steps"][0].get("cut")
    # the next mode as --fast has it (as the run's second mode: its request counters are the second's)
    assert _figures({"modes": [fp8]}) == _figures({"modes": [_fast_doc(tmp_path)["modes"][1]]})


async def test_the_paced_demo_in_the_tui_gives_the_fast_answer(tmp_path):
    """`kvtui --live` (the demo watched from the start): the TUI's run is the paced simulation, on the
    dashboard, and its snapshot has --fast's steps and knees for the same seed."""
    from kvtui.tui.answer import AnswerScreen
    from kvtui.tui.app import make_app
    from kvtui.tui.options import AppOptions

    from tui_helpers import descendants, wait_until

    app = make_app(AppOptions(scenario=load_scenario(DEMO), autostart=True, fast=False, out=tmp_path / "demo.json"))
    app.pace_real = VirtualClock()
    before = set(descendants())
    children: set[int] = set()
    async with app.run_test(size=(100, 32)) as pilot:
        def answered() -> bool:
            children.update(set(descendants()) - before)  # looked at all along the run
            return isinstance(app.screen, AnswerScreen)

        await wait_until(pilot, answered, "the answer", limit_s=60)
        assert not children  # no server, no load generator, no tracker: nothing a kill could leave behind
        run = app.run_obj
        assert run is not None and run.pace is app.pacer and run.engine is None  # in process: no HTTP server
        assert app.check_action("jump", ()) is False  # the run ended: nothing to jump over
        tui_steps = {n: [(s["load"], s["passed"]) for s in m.steps] for n, m in app.state.modes.items()}
        await pilot.press("q")
    import json

    doc = json.loads((tmp_path / "demo.json").read_text())
    fast = _fast_doc(tmp_path)
    assert _figures(doc) == _figures(fast)
    assert tui_steps == {m["name"]: [(s["load"], s["passed"]) for s in m["steps"]] for m in fast["modes"]}


async def test_w_then_j_on_the_demos_answer_jumps_to_the_same_answer(tmp_path, monkeypatch):
    """`kvtui`: the demo's answer (--fast); w watches it paced on the dashboard (j in the footer),
    j jumps: the answer shows again with the same figures."""
    from kvtui.tui.answer import AnswerScreen
    from kvtui.tui.app import make_app
    from kvtui.tui.options import AppOptions
    from kvtui.tui.screens import DashboardScreen

    from tui_helpers import screen_text, wait_until

    monkeypatch.chdir(tmp_path)  # w's run writes to runs/ (kvtui.report.paths.default_out)
    app = make_app(AppOptions(scenario=load_scenario(DEMO), autostart=True, fast=True, out=tmp_path / "demo.json"))
    hold = threading.Event()

    class Gate(VirtualClock):
        """A wall that waits for the test: the paced run stays mid-step until j."""

        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            hold.wait(0.05)

    app.pace_real = Gate()
    async with app.run_test(size=(120, 32)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, AnswerScreen), "the --fast answer", limit_s=60)
        first = app.run_obj.published()
        assert app.check_action("jump", ()) is False  # no paced run: no j
        await pilot.press("w")
        await wait_until(pilot, lambda: app.state.progress is not None and app.state.progress.paced == 20.0, "a paced step", limit_s=30)
        assert isinstance(app.screen, DashboardScreen) and app.pacing and app.run_obj.engine is None
        assert app.check_action("jump", ()) is True
        # the status line says the speed, the footer offers the jump
        await wait_until(pilot, lambda: "paced ×20" in screen_text(app) and "jump" in screen_text(app),
                         "paced ×20 and j on screen", limit_s=10)
        await pilot.press("j")
        hold.set()
        await wait_until(pilot, lambda: isinstance(app.screen, AnswerScreen) and not app.run_active,
                         "the answer after j", limit_s=60)
        assert app.pacer.speed == 0.0
        second = app.run_obj.published()
        await pilot.press("q")
    assert _figures(dict(second)) == _figures(dict(first))
