"""SVG snapshots of the dashboard on frozen data (Textual pinned in pyproject: 8.2.8).

Update after an intended change: pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest

from kvtui.tui.app import create_app


@pytest.mark.parametrize("theme", ["kvtui-dark", "kvtui-light"])
@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
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
