"""Issue 10: per-GPU memory on the dashboard under tensor parallel (a simulated TP=2 run;
no two-GPU machine was lent)."""

from kvtui import SCENARIOS_DIR
from kvtui.explore.run import Run
from kvtui.io.scenario import load_scenario
from kvtui.tui.svg import render_dashboard_svg


def test_dashboard_draws_one_memory_line_per_gpu(tmp_path):
    sc = load_scenario(SCENARIOS_DIR / "h200x2-llama70b-tp2.toml",
                       ['server.engine="sim"', 'server.model="llama-3.1-70b"', "ramp.max=32"])
    doc = Run(sc, tmp_path / "tp2.json", fast=True).run()
    assert all(len(r["gpus"]) == 2 for m in doc["modes"] for r in m["series"])
    svg = render_dashboard_svg(doc, width=160, height=48, view="dashboard")
    assert "GPU0" in svg and "GPU1" in svg
