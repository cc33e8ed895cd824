"""Answers never overstate (issue 49, item 6): an unbounded knee reads "≥ N" in every view, a run
stopped before any step finished says so, and every caveat of the Markdown export is in the TUI's
answer, the headless answer and --json: one list, one source.

Real parts: the simulator's offline runs (`--fast`, in process, a few seconds), the exports and the
TUI's answer screen under Textual's pilot."""

from __future__ import annotations

import json

import pytest

from kvtui import SCENARIOS_DIR
from kvtui.explore import events
from kvtui.explore.run import Run
from kvtui.io.scenario import load_scenario


@pytest.fixture(scope="module")
def floor_doc(tmp_path_factory):
    """The demo with ramp.max = 14: bf16's knee is 11 (13 fails), fp8-kv passes every load up to 14
    (its knee is a lower bound)."""
    out = tmp_path_factory.mktemp("floor") / "floor.json"
    sc = load_scenario(SCENARIOS_DIR / "sim-demo.toml", ["ramp.max=14"])
    doc = Run(sc, out, fast=True).run()
    fp8 = next(m for m in doc["modes"] if m["name"] == "fp8-kv")
    assert fp8["best_concurrency"] == 14 and fp8["search"]["first_fail"] is None  # the premise
    return doc, out


def test_an_unbounded_knee_reads_at_least_in_the_answer_headless_and_json(floor_doc):
    from kvtui.cli.headless_print import answer_json
    from kvtui.report.answer import answer_text, build_answer, headline

    doc, out = floor_doc
    ans = build_answer(doc)
    assert "≥ 14" in headline(ans) and "≥ 1.27×" in headline(ans)
    assert any(line.startswith("fp8-kv: ≥ 14 at the SLO") for line in ans["lines"])
    text = answer_text(doc, width=80)
    fp8_row = next(line for line in text.splitlines() if line.startswith("fp8-kv "))
    assert "≥ 14" in fp8_row and "≥ 1.27×" in fp8_row
    bf16_row = next(line for line in text.splitlines() if line.startswith("bf16 "))
    assert "≥" not in bf16_row  # a bounded knee stays a plain figure
    js = json.loads(json.dumps(answer_json(doc, out), default=str))
    rows = {r["mode"]: r for r in js["rows"]}
    assert rows["fp8-kv"]["best_lower_bound"] is True and rows["bf16"]["best_lower_bound"] is False
    assert rows["fp8-kv"]["best_x_bound"] == "≥"
    q = next(q for q in js["questions"] if q["key"] == "best")
    assert q["lower_bound"] is True and q["text"].startswith("≥ ")


def test_an_unbounded_knee_reads_at_least_in_the_exports_and_diff(floor_doc, tmp_path):
    import csv
    import io

    from kvtui.report.csv_export import render_csv
    from kvtui.report.diff import render_diff
    from kvtui.report.markdown import render_markdown

    doc, _ = floor_doc
    md = render_markdown(doc)
    assert "| fp8-kv | ≥ 14 |" in md.replace("  ", " ") or "≥ 14" in md
    assert "**fp8-kv**: ≥ 14 concurrent requests (≥ 1.27× the baseline)" in md
    rows = list(csv.DictReader(io.StringIO(render_csv(doc))))
    assert {r["knee_lower_bound"] for r in rows if r["mode"] == "fp8-kv"} == {"true"}
    assert {r["knee_lower_bound"] for r in rows if r["mode"] == "bf16"} == {"false"}
    d = render_diff(doc, doc, width=200)
    assert d.count("≥ 14") >= 2  # the knee of A's fp8-kv and of B's
    # a snapshot written before the field: the views derive it from the mode's own steps
    old = json.loads(json.dumps(doc))
    for r in old["comparison"]["rows"]:
        r.pop("best_lower_bound", None)
        r.pop("best_x_bound", None)
    assert "**fp8-kv**: ≥ 14 concurrent requests (≥ 1.27× the baseline)" in render_markdown(old)


async def test_an_unbounded_knee_reads_at_least_on_the_answer_screen_and_in_its_svg(floor_doc):
    from kvtui.tui.app import create_app

    doc, out = floor_doc
    app = create_app(None, snapshot=str(out))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        screen = app.screen
        head = str(screen.query_one("#answer-head").render())
        assert "≥ 14" in head
        svg = app.export_screenshot()
        await pilot.press("d")  # the dashboard's status line: "best ★ c≥14" on fp8-kv
        await pilot.press("m")
        await pilot.pause(0.3)
        dash = app.export_screenshot()
    assert "≥&#160;14" in svg or "≥ 14" in svg or "≥\u00a014" in svg
    assert "c≥14" in dash


def test_a_run_stopped_before_any_step_finished_says_so(tmp_path):
    from kvtui.cli.headless_print import answer_json
    from kvtui.report.answer import answer_text, build_answer, headline
    from kvtui.report.markdown import render_markdown

    sc = load_scenario(SCENARIOS_DIR / "sim-demo.toml")
    box: dict = {}

    def listener(ev):  # the user's stop, as the first step starts
        if isinstance(ev, events.StepStarted):
            box["run"].stop()

    run = box["run"] = Run(sc, tmp_path / "s.json", fast=True, listener=listener)
    doc = run.run()
    assert not any(s for m in doc["modes"] for s in m.get("steps") or [] if not s.get("aborted"))  # the premise
    ans = build_answer(doc)
    for said in (headline(ans), answer_text(doc, width=80), answer_json(doc)["headline"], render_markdown(doc)):
        assert "no mode met the SLO" not in said
    assert "stopped before any step finished" in headline(ans)


def test_every_markdown_caveat_is_in_every_answer(floor_doc):
    from kvtui.cli.headless_print import answer_json
    from kvtui.report.answer import answer_text, build_answer
    from kvtui.report.text import caveats

    doc, out = floor_doc
    md = caveats(doc)  # what render_markdown writes under "### Caveats"
    assert any("L4: simulated from datasheet figures" in c for c in md)  # an extrapolation of the simulator
    assert build_answer(doc)["caveats"] == md
    assert answer_json(doc, out)["caveats"] == md
    flat = " ".join(answer_text(doc, width=10_000).split())
    for c in md:
        assert " ".join(c.split()) in flat, c


def test_the_simulators_extrapolations_are_caveats():
    import dataclasses

    from kvtui.simulator.engine.scheduler import extrapolations
    from kvtui.simulator.model.catalog import load_gpu, load_model
    from kvtui.simulator.model.roofline import as_calibration

    cal = as_calibration(None)
    said = " | ".join(extrapolations(load_model("deepseek-v2-lite"), load_gpu("H100"), cal))
    assert "H100: simulated from datasheet figures" in said
    assert "MoE routing" in said and "MLA" in said and "not calibrated" in said
    assert extrapolations(load_model("llama-3.1-8b"), load_gpu("H200"), cal) == []
    other = dataclasses.replace(cal, gpu="H100")
    assert "calibration fitted on another GPU (H100" in " ".join(
        extrapolations(load_model("llama-3.1-8b"), load_gpu("H200"), other))


def test_this_host_limited_the_live_run_is_a_caveat(floor_doc):
    # A host too slow for the live simulator is a fault the simulator cannot make on demand: the
    # step's record of it (live.host_limited, written by the retired modelled twin) is put into a copy.
    from kvtui.report.answer import build_answer

    doc = json.loads(json.dumps(floor_doc[0]))
    doc["modes"][0]["steps"][0]["live"] = {"host_limited": "the live client was short of CPU: this host limited "
                                                            "the live run (the client's limit)"}
    assert any("this host limited the live run" in c for c in build_answer(doc)["caveats"])
