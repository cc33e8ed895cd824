"""Pilot tests driving a real run against the simulator (the knee model: 4 passes, 8 and above fail)."""

from __future__ import annotations

import pytest

from kvtui.io.snapshot.file import load_snapshot
from kvtui.tui.app import create_app
from kvtui.tui.screens import DashboardScreen, SetupScreen, SloScreen
from kvtui.tui.widgets import StepTable

from tui_helpers import descendants, on_screen, screen_text, wait_for_exit, wait_until


async def quit_app(pilot, app):
    """q; mid-run it asks first (as x does): yes."""
    from kvtui.tui.dialogs import ConfirmScreen

    running = app.run_active
    await pilot.press("q")
    if running:
        await wait_until(pilot, lambda: on_screen(app, ConfirmScreen), "the quit question")
        await pilot.press("y")


pytestmark = pytest.mark.slow


async def test_live_run_fills_table_marks_best_recomputes_slo_exports_and_quits(knee_scenario, tmp_path):
    before = descendants()
    app = create_app(knee_scenario, out=tmp_path / "run.json", autostart=True)
    async with app.run_test(size=(120, 40)) as pilot:
        assert isinstance(app.screen, DashboardScreen)
        # The header carries the caveats from the first frame on.
        await wait_until(pilot, lambda: app.state.viewed is not None and app.state.viewed.info, "engine ready")
        await pilot.pause(0.6)
        head = screen_text(app).splitlines()[0]
        assert "SIMULATED" in head and "knee-tui" in head and "sim" in head and "H200" in head
        # The table fills as steps finish (the run thread only posts messages).
        await wait_until(pilot, lambda: app.screen.query_one(StepTable).row_count >= 2, "two rows in the step table")
        # Resizing mid-run (an SSH window shrinking to 80×24 and back) keeps every view working.
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.7)
        assert app.screen.compact and app.screen.query_one(StepTable).row_count >= 2
        assert "KV %" in screen_text(app) and "SIMULATED" in screen_text(app)
        await pilot.resize_terminal(120, 40)
        await pilot.pause(0.7)
        assert not app.screen.compact
        # The run ends by itself: best concurrency 4 (the knee model's), marked in the table and the status line.
        await wait_until(pilot, lambda: not app.run_active, "the run to finish")
        # The run ends on its answer; d goes back to the dashboard.
        from kvtui.tui.answer import AnswerScreen

        await wait_until(pilot, lambda: on_screen(app, AnswerScreen) and "ANSWER" in screen_text(app),
                         "the answer screen")
        await pilot.press("d")
        await pilot.pause(0.6)
        mv = app.state.viewed
        assert mv.run_best == 4 and app.state.best(mv) == 4
        text = screen_text(app)
        assert "★ c=4" in text
        table = app.screen.query_one(StepTable)
        loads = [str(table.get_cell(str(i), "load")) for i in range(table.row_count)]
        marks = [str(table.get_cell(str(i), "mark")) for i in range(table.row_count)]
        assert marks[loads.index("4")] == "★" and marks.count("★") == loads.count("4")
        assert any("FAIL" in str(table.get_cell(str(i), "verdict")) for i in range(table.row_count))
        assert "TTFT ms vs c" in text and "GPU memory GiB" in text

        # Change the SLO on screen: TPOT p95 ≤ 150 ms lets 8 (100 ms a step) pass; recomputed from the records.
        await pilot.press("e")
        await wait_until(pilot, lambda: on_screen(app, SloScreen), "the SLO editor")
        app.screen.query_one("#slo-tpot_p95_ms").value = "150"
        await pilot.click("#apply")
        await wait_until(pilot, lambda: app.state.edited and app.state.slo_version > 0
                         and bool(app.state.viewed.view_steps), "re-evaluation")
        await pilot.pause(0.6)
        assert app.state.best(app.state.viewed) == 8
        assert "★ c=8" in screen_text(app) and "edited" in screen_text(app)
        # Every step was re-evaluated from its records, not copied.
        for s in mv.steps:
            new = mv.view_steps[s["index"]]
            assert new["samples"] == s["samples"] and new["passed"] == (s["tpot_ms"]["p95"] <= 150)

        # Export writes the document as shown: a snapshot that loads, with the edited SLO applied.
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: bool(app.exports), "the export")
        exported = load_snapshot(app.exports[0])
        assert exported["reevaluated"]["slo"]["tpot_p95_ms"] == 150
        assert exported["modes"][0]["best_concurrency"] == 8
        assert exported["modes"][0]["best_concurrency_at_run_slo"] == 4
        assert exported["environment"]["simulated"] is True
        assert (tmp_path / "run.json").exists()  # the run's own snapshot, finalised
        try:  # the Markdown report comes with the export of a finished run, where kvtui has one
            from kvtui.report.markdown import render_markdown  # noqa: F401
        except ImportError:
            pass
        else:
            assert app.reports and app.reports[0].read_text().strip()
        # The run has ended: its footer no longer offers pause, stop or skip (nothing to act on).
        assert not any(app.check_action(a, ()) for a in ("toggle_pause", "stop_run", "skip_mode"))

        await quit_app(pilot, app)
        await wait_for_exit(app)
    assert app.return_code == 0
    left = {p: c for p, c in descendants().items() if p not in before}
    assert not left, f"processes left behind: {left}"


async def test_quit_mid_run_stops_server_and_load_generator(knee_scenario, tmp_path):
    before = descendants()
    app = create_app(knee_scenario, out=tmp_path / "quit.json", autostart=True)
    async with app.run_test(size=(100, 30)) as pilot:
        # Quit while a step is in flight: the server and the load generator are up.
        await wait_until(pilot, lambda: app.state.step is not None and app.state.progress is not None and app.state.progress.phase == "window",
                         "a step in its measurement window")
        mine = {p: c for p, c in descendants().items() if p not in before}
        assert any("sim serve" in c for c in mine.values()), mine  # the simulated server
        assert any("multiprocessing" in c for c in mine.values()), mine  # the load generator
        # The controls reach the run (they act between steps; here only that they arrive and show).
        run = app.run_obj
        await pilot.press("h")
        await pilot.pause(0.6)
        assert run._hold and "HOLD" in screen_text(app)
        await pilot.press("plus", "minus", "minus")
        assert run._nudge == -1
        await pilot.press("space")
        await pilot.pause(0.6)
        assert run.paused and "PAUSED" in screen_text(app)
        await pilot.press("space")
        assert not run.paused
        # Skip-mode asks first (n or escape keeps the mode, y skips it).
        from kvtui.tui.dialogs import ConfirmScreen

        await pilot.press("n")
        await wait_until(pilot, lambda: on_screen(app, ConfirmScreen), "the confirmation")
        await pilot.press("n")
        await pilot.pause()
        assert not run._skip.is_set()
        # q mid-run asks too (as x and n do): n keeps the run going, y stops it and quits.
        await pilot.press("q")
        await wait_until(pilot, lambda: on_screen(app, ConfirmScreen), "the quit question")
        await pilot.press("n")
        await pilot.pause()
        assert app.run_active and not run.stopping
        await quit_app(pilot, app)
        await wait_for_exit(app)
    left = {p: c for p, c in descendants().items() if p not in before}
    assert not left, f"processes left behind: {left}"
    doc = load_snapshot(tmp_path / "quit.json")  # finalised, not just journaled
    assert doc["run"]["stop_reason"] == "quit" and doc["run"]["finished"] is False, doc["run"]
    assert doc["run"]["outcome"] == "stopped" and app.return_value == 3  # a partial run never exits 0
    # and its answer says so wherever it is read: the headline, the first caveat, the report
    from kvtui.report.answer import answer_text
    from kvtui.report.export import render

    said = answer_text(doc)
    assert "— partial run (" in said.splitlines()[0] and "PARTIAL RUN: stopped before its modes finished" in said
    assert "PARTIAL RUN: stopped before its modes finished" in render(doc, "md")


async def test_setup_screen_validates_then_starts(knee_path, tmp_path):
    from kvtui.io.scenario import load_scenario

    before = descendants()
    app = create_app(load_scenario(knee_path), out=tmp_path / "setup.json")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, SetupScreen)
        scr = app.screen
        assert scr.query_one("#ramp-max").value == "8" and scr.query_one("#slo-tpot_p95_ms").value == "60"
        # A ramp max below its start is refused with the loader's own message, naming the field.
        scr.query_one("#ramp-max").value = "0.5"
        await pilot.pause()
        assert any("ramp.max" in p for p in scr.problems)
        assert scr.query_one("#start").disabled and scr.query_one("#ramp-max").has_class("-invalid")
        # Prompt + output beyond the context is refused too.
        scr.query_one("#ramp-max").value = "4"
        scr.query_one("#wl-prompt").value = "4000"
        await pilot.pause()
        assert any("max_model_len" in p for p in scr.problems)
        scr.query_one("#wl-prompt").value = "64"
        await pilot.pause()
        assert scr.problems == []
        await pilot.click("#start")
        await wait_until(pilot, lambda: on_screen(app, DashboardScreen), "the dashboard")
        assert app.run_obj.scenario.ramp.max == 4
        await wait_until(pilot, lambda: app.state.viewed is not None and app.state.viewed.status == "running",
                         "the engine")
        await quit_app(pilot, app)
        await wait_for_exit(app)
    left = {p: c for p, c in descendants().items() if p not in before}
    assert not left, f"processes left behind: {left}"


FAKE_VLLM = """
import sys, time
print("INFO 11-29 12:00:00 [api_server.py:1] vLLM API server version 0.26.0", flush=True)
print("INFO 11-29 12:00:01 [gpu_model_runner.py:1] Starting to load model fake/model...", flush=True)
time.sleep(600)  # never healthy: a start that takes minutes
"""


@pytest.mark.parametrize("key", ["q", "ctrl+c"])
async def test_quit_while_the_engine_starts_stops_it(tmp_path, monkeypatch, key):
    """vLLM takes minutes to start and does not listen meanwhile: quit (q, or Ctrl-C, which a
    terminal in raw mode delivers as a key, not SIGINT) stops it after a short grace."""
    from kvtui.io.scenario import load_scenario

    fake = tmp_path / "fake_vllm.py"
    fake.write_text(FAKE_VLLM)
    import sys

    monkeypatch.setenv("KVTUI_VLLM_LAUNCHER", f"{sys.executable} {fake}")
    p = tmp_path / "vllm.toml"
    p.write_text('name = "slow-start"\n[server]\nengine = "vllm"\nmodel = "fake/model"\nstartup_timeout_s = 600\n')
    before = descendants()
    app = create_app(load_scenario(p), out=tmp_path / "slow.json", autostart=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: any(fake.name in c for c in descendants().values()), "the fake vLLM")
        await wait_until(pilot, lambda: "loading weights" in screen_text(app), "the startup phase on screen")
        assert "starting the engine" in screen_text(app)
        await (quit_app(pilot, app) if key == "q" else pilot.press(key))
        await wait_for_exit(app)
    left = {p: c for p, c in descendants().items() if p not in before}
    assert not left, f"processes left behind: {left}"
    doc = load_snapshot(tmp_path / "slow.json")
    assert doc["run"]["stop_reason"] == "quit"


async def test_the_tok_s_chart_equals_the_table_for_the_same_step(knee_path, tmp_path):
    """The simulator fast-forwarded ×4: the server's counters tick per wall second, the table's
    figures are modelled. The chart shows modelled tok/s over modelled seconds, as the table does
    (before, it showed the wall rate: ×4 here, ×8 in the demo)."""
    from kvtui.io.scenario import load_scenario
    from kvtui.tui.charts import TokChart, time_scale

    p = tmp_path / "ff.toml"
    p.write_text(knee_path.read_text().replace('engine = "sim"', 'engine = "sim"\ntime_scale = 0.25')
                 .replace("window_s = 1", "window_s = 12"))
    app = create_app(load_scenario(p), out=tmp_path / "ff.json", autostart=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: app.state.viewed is not None and len(app.state.viewed.steps) >= 1, "a step")
        mv = app.state.viewed
        s = mv.steps[0]
        assert time_scale(mv) == 0.25
        chart = app.screen.query_one(TokChart)
        xs, ys = chart.view(mv, "gen_tok_s", 10_000, how="mean")
        t0 = mv.series.t[0]
        # The chart's points in the step's measurement window (x: modelled seconds since the mode began),
        # in the modelled rate the chart draws (TokChart.draw multiplies by the time scale).
        lo, hi = (s["t_rel_end"] - t0) / 0.25 - s["window_s"], (s["t_rel_end"] - t0) / 0.25
        shown = [y * time_scale(mv) for x, y in zip(xs, ys) if lo <= x <= hi]
        assert shown
        mean = sum(shown) / len(shown)
        assert 0.6 < mean / s["output_tok_s"] < 1.5, (mean, s["output_tok_s"])  # the same figure, not ×4
        assert all(x >= 0 for x in xs)  # time since the mode started: never negative
        await quit_app(pilot, app)
