"""A trace replay (`[ramp] load = "trace"`) in the TUI: the answer says each mode's speed-up of the
user's traffic and the GPUs it needs at 1×; the dashboard's step table names the load a factor (×)."""

from __future__ import annotations

import pytest

from kvtui.cli.entry import main as cli_main
from kvtui.io.snapshot.file import load_snapshot
from kvtui.tui.app import create_app
from kvtui.tui.screens import DashboardScreen

from tui_helpers import on_screen, screen_text, wait_until


@pytest.fixture(scope="module")
def trace_doc(tmp_path_factory):
    out = tmp_path_factory.mktemp("trace") / "run.json"
    code = cli_main(["run", "sim-trace-replay", "--headless", "--fast", "--mode", "fp8-kv", "--set", "ramp.window_s=4",
                     "--set", "ramp.confirm=false", "--out", str(out)])
    assert code == 0
    return load_snapshot(out)


async def test_the_answer_and_the_dashboard_say_the_speed_up(trace_doc):
    best = trace_doc["comparison"]["rows"][0]["best"]
    app = create_app(snapshot=trace_doc)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_until(pilot, lambda: "ANSWER" in screen_text(app), "the answer")
        text = screen_text(app)
        assert f"serves your traffic at {best:.3g}× its recorded rate in fp8-kv" in text, text
        assert "GPUs your traffic needs at 1×" in text
        await pilot.press("d")
        await wait_until(pilot, lambda: on_screen(app, DashboardScreen), "the dashboard")
        await wait_until(pilot, lambda: f"best ★ ×={best:g}" in screen_text(app), "the best factor in the header")
        rows = screen_text(app).splitlines()
        head = next(x for x in rows if "SLO" in x and "limit" in x and "TTFT p95" in x)  # the step table's
        assert head.split()[0] == "×"
