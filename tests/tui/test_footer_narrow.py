"""Issue 31 item 7: the footer keeps the view's essential keys at 80 columns (q, ^p, a, m), during
a run and after it, and an ended run offers no pause, stop or skip at any width."""

from __future__ import annotations

import pytest

from kvtui.tui.app import create_app
from kvtui.tui.footer import Item, choose
from kvtui.tui.screens import DashboardScreen

from tui_helpers import screen_text, wait_until


async def _footer(app, pilot, live: bool, ended: bool) -> str:
    if live:
        st = app.state
        st.replay = False
        st.status = "running"
        app.run_done.clear()  # a run in progress: the footer offers its controls
        names = list(st.modes)
        st.current = st.viewing = names[-1]
        app.dashboard = DashboardScreen(st)
        await app.push_screen(app.dashboard)
        await pilot.pause()
        if ended:
            app.run_done.set()
            st.status = "done"
            app.refresh_bindings()
        await pilot.pause(0.3)
    return screen_text(app).splitlines()[-1]


@pytest.mark.parametrize("width,height", [(80, 24), (120, 40)])
@pytest.mark.parametrize("when", ["during", "after"])
async def test_live_footer_keeps_the_essential_keys(frozen_doc, width, height, when):
    app = create_app(snapshot=frozen_doc, view="dashboard")
    async with app.run_test(size=(width, height)) as pilot:
        await pilot.pause()
        footer = await _footer(app, pilot, True, when == "after")
        assert len(footer) <= width
        for key in ("a answer", "m mode", "^p palette", "q quit", "c compare"):
            assert key in footer, footer
        for key in ("space pause", "x stop", "n skip"):
            assert (key in footer) == (when == "during"), footer
        assert all(app.check_action(a, ()) for a in ("show_answer", "cycle_mode"))  # they act, whatever the width
        if width >= 120:
            assert "t theme" in footer and "e SLO" in footer and "^s export" in footer


@pytest.mark.parametrize("width,height", [(80, 24), (120, 40)])
async def test_replay_and_answer_footers(frozen_doc, width, height):
    app = create_app(snapshot=frozen_doc)

    def footer_line() -> str:
        return screen_text(app).splitlines()[-1]

    async with app.run_test(size=(width, height)) as pilot:
        # The footer is drawn after the screen's first refresh: wait for it (a loaded machine took
        # longer than the half second once slept here), then check every key.
        await wait_until(pilot, lambda: "q quit" in footer_line(), "the answer screen's footer")
        footer = footer_line()
        for key in ("d dashboard", "c compare", "q quit", "^p palette", "? help"):
            assert key in footer, footer
        await pilot.press("d")
        keys = ("a answer", "m mode", "^p palette", "q quit", "←→ step")
        await wait_until(pilot, lambda: all(k in footer_line() for k in keys), f"the dashboard's footer {keys}")
        footer = footer_line()
        assert "pause" not in footer


def test_choose_drops_the_least_important_first_and_shortens_labels():
    def it(key, label, action):
        return Item(key, key, label, action, True, "")

    items = [it("space", "pause", "app.toggle_pause"), it("n", "skip mode", "app.skip_mode"),
             it("a", "answer", "app.show_answer"), it("t", "theme", "cycle_theme"), it("q", "quit", "quit")]
    kept, short = choose(items, 200)
    assert kept == items and not short
    kept, short = choose(items, 35)  # short labels: 12 + 7 + 9 + 8 + 7 cells, less the theme
    assert short and [i.key for i in kept] == ["space", "n", "a", "q"]  # the theme went first, order kept
    kept, _ = choose(items, 8)
    assert [i.key for i in kept] == ["q"]
