"""The small ones of issue 49 (items 8 and 9): step lines that fit 80 columns, the comparison's
column priority, whole tables to a pipe, the SLO dialog's first focus, whole-number chart ticks and
an SVG export's footer."""

from __future__ import annotations

import json
import subprocess
import sys

from kvtui import SCENARIOS_DIR


def _step(**kw):
    base = {"load": 13, "load_kind": "concurrency", "requests": 40, "output_tok_s": 86.9,
            "ttft_ms": {"p95": 5898.1}, "tpot_ms": {"p95": 128.5}, "errors": 0, "kv_cache_usage_max": 1.0,
            "preemptions": 19, "passed": False, "limited_by": "kv_wall", "why": "confirm",
            "checks": [{"target": "ttft_p95_ms", "value": 5898.1, "limit": 3000, "ok": False}]}
    base.update(kw)
    return base


def test_a_step_line_fits_80_columns_on_one_line():
    from kvtui.cli.headless_print import step_line

    targets = [("ttft", "p95", 3000.0), ("tpot", "p95", 150.0)]
    full = step_line("awq-int4+fp8-kv", _step(), targets)
    assert len(full) > 80  # the premise: the whole line is wider
    short = step_line("awq-int4+fp8-kv", _step(), targets, width=80)
    assert len(short) <= 80 and "\n" not in short
    assert short.startswith("[awq-int4+fp8-kv] c=13") and "FAIL TTFT95" in short and "TTFT95 5,898ms" in short
    assert "[confirm]" in short
    assert "(KV wall)" in step_line("bf16", _step(), targets, width=80)  # a short name keeps the limit
    assert step_line("bf16", _step(), targets, width=200) == step_line("bf16", _step(), targets)  # room: whole


def test_the_comparison_drops_next_step_limit_before_cost():
    from kvtui.report.fit_table import fit
    from kvtui.report.text import COMPARISON_HEADERS

    row = ["fp8-kv", "16", "1.46×", "110", "1.27×", "21.6", "15.01", "70,880", "2.00×", "0", "decode",
           "2.023", "-21.6%", "—", "—", "4.1", "-3%", "—", "—"]
    heads, _, dropped = fit(list(COMPARISON_HEADERS), [row], 80)
    assert "$/Mtok out" in heads and "next step limit" in dropped


def test_a_piped_ending_has_every_column_and_whole_dividers(tmp_path):
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("COLUMNS", "LINES")}
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", str(SCENARIOS_DIR / "sim-demo.toml"), "--fast",
                        "--headless", "--out", str(tmp_path / "p.json")], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    i = lines.index(next(x for x in lines if x.startswith("──")))
    table = [lines[i - 1]] + [x for x in lines[i + 1:i + 3]]
    assert "not shown:" not in r.stdout and "next step limit" in lines[i - 1]
    assert len(lines[i]) >= max(len(x) for x in table)  # the divider as long as its columns


async def test_the_slo_dialog_opens_on_its_first_field(tmp_path):
    from textual.widgets import Input

    from kvtui.explore.run import Run
    from kvtui.io.scenario import load_scenario
    from kvtui.io.scenario.schema import Slo
    from kvtui.tui.app import create_app
    from kvtui.tui.slo_form import SloScreen

    doc = Run(load_scenario(SCENARIOS_DIR / "sim-demo.toml", ["ramp.max=12"]), tmp_path / "s.json", fast=True).run()
    app = create_app(None, snapshot=doc)
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_screen(SloScreen(Slo(), Slo()))
        await pilot.pause(0.2)
        assert isinstance(app.focused, Input), app.focused
        await pilot.press("escape")


def test_whole_number_ticks():
    from kvtui.tui.ticks import nice_ticks

    xt, xl = nice_ticks(11, 11.1, 5, integer=True)
    assert all(float(x).is_integer() for x in xt) and len(set(xl)) == len(xl)
    assert nice_ticks(0, 1.0, 4, unit="s")[1][-1] == "1s"


async def test_an_svg_export_footer_never_says_no_path(tmp_path):
    from kvtui.cli.export import render_svg
    from kvtui.explore.run import Run
    from kvtui.io.scenario import load_scenario
    from kvtui.report.export import render

    sc = load_scenario(SCENARIOS_DIR / "sim-demo.toml", ["ramp.max=12"])
    doc = Run(sc, tmp_path / "s.json", fast=True).run()
    svg = render(json.loads(json.dumps(doc)), "svg", width=100, height=40, svg=render_svg)
    assert "no path" not in svg.replace("&#160;", " ")
