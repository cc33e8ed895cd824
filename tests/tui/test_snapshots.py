"""SVG snapshots of the dashboard on frozen data (Textual pinned in pyproject: 8.2.8).

Update after an intended change: pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest

from kvtui.tui.app import create_app


# Every theme at 80x24 (a large terminal is test_compare_200x50's): a picture is 0.2 MB at 160x48, and
# the tracked tree is kept small (issue 49). The no-color pictures are 80x24 for the same reason.
@pytest.mark.parametrize("size,theme", [((80, 24), "kvtui-dark"), ((80, 24), "kvtui-light")],
                         ids=["80x24-kvtui-dark", "80x24-kvtui-light"])
def test_dashboard(snap_compare, frozen_doc, size, theme):
    assert snap_compare(create_app(snapshot=frozen_doc, theme=theme, view="dashboard"), terminal_size=size)


def test_dashboard_replay_mid_run_with_log(snap_compare, frozen_doc):
    """The second step of the first mode, the server log open (120×40, high contrast)."""
    app = create_app(snapshot=frozen_doc, theme="kvtui-high-contrast", replay_step=2)

    async def open_log(pilot):
        await pilot.press("l")
        await pilot.pause(0.5)  # the log pane writes once it has its size, then scrolls to the end
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=open_log)


# -- issue 20: the answer (a replay opens on it), the comparison, the dashboard at three sizes, NO_COLOR --
def _h200_doc():
    from kvtui import PROJECT_ROOT
    from kvtui.io.snapshot.file import load_snapshot

    doc = load_snapshot(PROJECT_ROOT / "docs" / "results" / "h200-v2.json")
    doc.pop("_path", None)  # no machine-specific path in the picture
    return doc


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_answer(snap_compare, size):
    assert snap_compare(create_app(snapshot=_h200_doc()), terminal_size=size)


LONG_PATH = ("/srv/kvtui/runs/a-very-long-directory-name-for-the-h200-runs-of-the-team/"
             "h200-llama8b-2k256-2026-11-30-whole-gpu-five-modes-against-bf16.json")


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_answer_long_snapshot_path_scrolled_to_its_commands(snap_compare, size):
    """Issue 31: each command whole on its line, the long path shortened in the middle; reached by
    keyboard (End) where it lies below the fold."""
    doc = _h200_doc()
    doc["_path"] = LONG_PATH  # shown, never opened: a fixed path keeps the picture the same everywhere

    async def to_the_end(pilot):
        await pilot.press("end")
        await pilot.pause()

    assert snap_compare(create_app(snapshot=doc), terminal_size=size, run_before=to_the_end)


def test_answer_no_color(snap_compare, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    assert snap_compare(create_app(snapshot=_h200_doc()), terminal_size=(80, 24))


def test_compare_80x24(snap_compare):
    async def compare(pilot):
        await pilot.press("c")
        await pilot.pause()

    assert snap_compare(create_app(snapshot=_h200_doc()), terminal_size=(80, 24), run_before=compare)


def test_compare_200x50(snap_compare):
    async def compare(pilot):
        await pilot.press("c")
        await pilot.pause()

    assert snap_compare(create_app(snapshot=_h200_doc()), terminal_size=(200, 50), run_before=compare)


def test_compare_no_color_120x40(snap_compare, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")

    async def compare(pilot):
        await pilot.press("c")
        await pilot.pause()

    assert snap_compare(create_app(snapshot=_h200_doc()), terminal_size=(120, 40), run_before=compare)


@pytest.mark.parametrize("size", [(120, 40)], ids=["120x40"])
def test_replay_dashboard_joined_modes(snap_compare, size):
    """A replay joined from several GPUs: time axes in seconds since each mode started, never negative."""
    assert snap_compare(create_app(snapshot=_h200_doc(), view="dashboard", replay_mode="fp8-w+kv"), terminal_size=size)


def test_replay_dashboard_no_color(snap_compare, frozen_doc, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    assert snap_compare(create_app(snapshot=frozen_doc, view="dashboard"), terminal_size=(80, 24))


def _live(doc, size):
    """The live dashboard on frozen data: a run on its second mode, a step in its window."""
    from kvtui.tui.screens import DashboardScreen

    app = create_app(snapshot=doc, view="dashboard")

    async def go_live(pilot):
        st = app.state
        st.replay = False
        st.status = "running"
        app.run_done.clear()  # a run in progress: the footer offers its controls (an ended run's does not)
        st.cursor = None
        names = list(st.modes)
        st.current = st.viewing = names[-1]
        from kvtui.explore.events import StepProgress, StepStarted

        st.step = StepStarted(names[-1], load=48, index=len(st.modes[names[-1]].steps), why="search")
        st.progress = StepProgress(names[-1], load=48, phase="window", elapsed_s=12, window_started=31, completed=20)
        app.dashboard = DashboardScreen(st)
        await app.push_screen(app.dashboard)
        await pilot.pause()

    return app, go_live


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_live_dashboard(snap_compare, frozen_doc, size):
    app, go_live = _live(frozen_doc, size)
    assert snap_compare(app, terminal_size=size, run_before=go_live)


def test_live_dashboard_no_color(snap_compare, frozen_doc, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app, go_live = _live(frozen_doc, (80, 24))
    assert snap_compare(app, terminal_size=(80, 24), run_before=go_live)
