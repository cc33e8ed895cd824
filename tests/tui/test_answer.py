"""Issue 20: the answer screen (a replay opens on it, a run ends on it), help, confirmations,
honest axes, and the exports of the answer."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kvtui import PROJECT_ROOT
from kvtui.io.snapshot.file import load_snapshot
from kvtui.report.answer import build_answer, headline
from kvtui.report.energy import mode_j_per_token, step_j_per_token
from kvtui.tui.answer import AnswerScreen
from kvtui.tui.app import create_app
from kvtui.tui.dialogs import HelpScreen
from kvtui.tui.screens import DashboardScreen
from kvtui.tui.ticks import nice_ticks

from tui_helpers import on_screen, screen_text, wait_until

H200 = PROJECT_ROOT / "docs" / "results" / "h200-v2.json"


@pytest.fixture(scope="module")
def h200_doc():
    return load_snapshot(H200)


def test_the_answer_names_each_winner_and_why(h200_doc):
    ans = build_answer(h200_doc)
    q = {x["key"]: x for x in ans["questions"]}
    rows = {r["mode"]: r for r in ans["rows"]}
    # Winners are the extremes of the comparison's own figures, ties kept together.
    top = max(r["best"] for r in rows.values() if r["best"] is not None)
    assert set(q["best"]["winners"]) == {n for n, r in rows.items() if r["best"] == top}
    cheapest = min(r["usd_per_mtok_out"] for r in rows.values() if r["usd_per_mtok_out"] is not None)
    assert q["usd_per_mtok_out"]["winners"] == [n for n, r in rows.items() if r["usd_per_mtok_out"] == cheapest]
    # Energy per token comes from NVML power over the knee's window, beside $/Mtok.
    assert all(r["j_per_token_out"] and 0.01 < r["j_per_token_out"] < 10 for r in rows.values())
    assert q["j_per_token_out"]["winners"]
    bf16 = next(m for m in h200_doc["modes"] if m["name"] == "bf16")
    knee = next(s for s in bf16["steps"] if s["load"] == rows["bf16"]["best"] and s["passed"])
    assert step_j_per_token(bf16, knee) == pytest.approx(mode_j_per_token(bf16, knee["load"]), rel=0.5)
    # Why in words: a mode whose extra KV bought nothing says decode bound it.
    assert any("bought little" in line and "decode" in line for line in ans["lines"])
    assert "noisy" in " ".join(ans["caveats"])
    assert headline(ans).startswith(" & ".join(q["best"]["winners"]))


def test_the_simulator_draws_no_energy(frozen_doc):
    ans = build_answer(frozen_doc)
    assert all(r["j_per_token_out"] is None for r in ans["rows"])
    assert "j_per_token_out" not in {x["key"] for x in ans["questions"]}
    # A mode stopped mid-search claims no verdict, but says what passed so far.
    assert any("did not finish" in line and "so far" in line for line in ans["lines"])


async def test_replay_opens_on_the_answer_and_every_key_of_its_footer_works(frozen_doc):
    app = create_app(snapshot=frozen_doc)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: "ANSWER" in screen_text(app), "the answer")
        text = screen_text(app)
        footer = text.splitlines()[-1]
        for word in ("dashboard", "compare", "SLO", "export", "help", "quit", "theme"):
            assert word in footer, footer
        assert "SIMULATED" in text and "most concurrent requests at the SLO" in text
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: on_screen(app, HelpScreen), "help")
        assert "answer  (here)" in screen_text(app)
        await pilot.press("escape")
        await pilot.press("c")
        await wait_until(pilot, lambda: "Modes vs baseline" in screen_text(app), "the comparison")
        await pilot.press("escape")
        await wait_until(pilot, lambda: on_screen(app, AnswerScreen), "back on the answer")
        await pilot.press("d")
        await wait_until(pilot, lambda: on_screen(app, DashboardScreen), "the dashboard")
        footer = screen_text(app).splitlines()[-1]
        assert "pause" not in footer and "step" in footer and "answer" in footer
        await pilot.press("a")
        await wait_until(pilot, lambda: on_screen(app, AnswerScreen), "the answer again")


async def test_the_answer_chart_overlays_every_mode_with_its_marker(h200_doc):
    app = create_app(snapshot=h200_doc)
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: "ANSWER" in screen_text(app), "the answer")
        await pilot.pause(0.5)
        text = screen_text(app)
        assert "every mode" in text and "★" in text
        from kvtui.tui.answer import MARKERS

        for i, m in enumerate(h200_doc["modes"]):
            assert f"{MARKERS[i]} {m['name']}" in text  # the legend: marker and name, no colour needed
        # TTFT p95 runs to seconds above the 2 s SLO: the axis is clipped so the SLO line stays visible.
        assert "clipped at 6000" in text


def test_ticks_are_round():
    assert nice_ticks(0, 22275, 4)[1] == ["0", "10k", "20k"]
    assert nice_ticks(10, 12, 3)[1] == ["10", "11", "12"]
    assert nice_ticks(0, 176.5, 4, "s")[1] == ["0s", "50s", "100s", "150s"]


def test_export_svg_of_the_answer_a_mode_and_markdown_needs_force(tmp_path, frozen_path):
    def kvtui(*args):
        return subprocess.run([sys.executable, "-m", "kvtui", *map(str, args)], capture_output=True, text=True, timeout=300)

    out = tmp_path / "a.svg"
    r = kvtui("export", frozen_path, "--format", "svg", "--out", out, "--width", "100", "--height", "30")
    assert r.returncode == 0, r.stderr
    assert "ANSWER" in out.read_text()
    r = kvtui("export", frozen_path, "--format", "svg", "--out", tmp_path / "m.svg", "--mode", "fp8-kv")
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "m.svg").read_text()
    assert "ANSWER" not in text and "fp8-kv" in text
    r = kvtui("export", frozen_path, "--format", "svg", "--out", tmp_path / "x.svg", "--mode", "nope")
    assert r.returncode == 2 and "--mode nope" in r.stderr
    md = tmp_path / "r.md"
    md.write_text("mine")
    r = kvtui("export", frozen_path, "--format", "md", "--out", md)
    assert r.returncode == 2 and "--force" in r.stderr and md.read_text() == "mine"
    r = kvtui("export", frozen_path, "--format", "md", "--out", md, "--force")
    assert r.returncode == 0 and md.read_text() != "mine"


def test_progress_says_step_n_of_about_m_with_an_eta(h200_doc):
    from kvtui.tui.progress import progress
    from kvtui.tui.state import RunState

    st = RunState()
    st.load_snapshot(h200_doc)
    st.replay = False  # as if live: the run on its second mode, third step in flight
    names = list(st.modes)
    mv = st.modes[names[1]]
    mv.steps = mv.steps[:2]
    for n in names[2:]:
        st.modes[n].status = "waiting"
    from kvtui.explore.events import StepProgress, StepStarted

    st.step = StepStarted(mv.name, load=192, index=2)
    st.progress = StepProgress(mv.name, load=192, elapsed_s=5)
    p = progress(st)
    assert p["n"] == 3 and p["about"] >= 3 and p["modes_left"] == len(names) - 2
    assert p["eta_run_s"] > p["eta_mode_s"] > 0


async def test_enter_applies_the_slo_form_and_apply_is_on_screen_at_80x24(frozen_doc):
    from kvtui.tui.screens import SloScreen

    app = create_app(snapshot=frozen_doc, view="dashboard")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("e")
        await wait_until(pilot, lambda: on_screen(app, SloScreen), "the SLO editor")
        await pilot.pause()
        apply = app.screen.query_one("#apply")
        assert apply.region.bottom <= 24 and apply.region.height > 0  # in reach without scrolling
        inp = app.screen.query_one("#slo-tpot_p95_ms")
        inp.value = "1"
        inp.focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.state.edited, "the SLO applied by Enter")
        assert "TPOT p95 ≤ 1 ms" in app.state.shown_slo.describe()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_compare_shows_every_mode_and_figure_whole_at_80_and_120_columns(h200_doc, size):
    """Too wide for the screen as modes × figures, the comparison turns to figures × modes: no column
    cut at the edge, every mode named, the KV tokens and $/Mtok on screen without scrolling."""
    from kvtui.report.text import comparison_rows

    app = create_app(snapshot=h200_doc)
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: "ANSWER" in screen_text(app), "the answer")
        await pilot.press("c")
        await wait_until(pilot, lambda: "Modes vs baseline" in screen_text(app), "the comparison")
        await pilot.pause()
        text = screen_text(app)
        for row in comparison_rows(h200_doc):
            assert row[0].split("+")[0] in text  # each mode (its name broken after a "+")
        for label in ("KV tokens", "$/Mtok out", "next step limit"):
            assert label in text
        assert "1,949,744" in text and "0.159" in text  # the last mode's KV tokens, the cheapest $/Mtok
