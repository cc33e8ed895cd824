"""At 80×24 and 120×40 the answer screen never wraps a command in the middle: each command is one
line, a long snapshot path keeps its start and its file name around an ellipsis."""

from __future__ import annotations

import shutil

import pytest

from kvtui.tui.answer import middle_ellipsis
from kvtui.tui.app import create_app

from tui_helpers import screen_text


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_commands_stay_whole_with_a_long_snapshot_path(frozen_path, tmp_path, size):
    deep = tmp_path / ("a-very-long-directory-name-" * 3) / "of-the-run"
    deep.mkdir(parents=True)
    snap = deep / "sim-demo-2026-12-02-1700-fp8-kv-against-bf16-with-a-long-name.json"
    shutil.copy(frozen_path, snap)
    app = create_app(snapshot=snap)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(1.0)
        lines = screen_text(app).splitlines()
    cmds = [line.strip() for line in lines if line.strip().startswith(("kvtui export", "kvtui diff"))]
    assert cmds, lines
    for c in cmds:
        assert c.endswith(("--format md", "--format svg", "OTHER.json")), c  # not cut before its end
        assert snap.name[-12:] in c  # the file name's end kept
    assert any(line.strip().startswith("snapshot ") and line.strip().endswith(".json") for line in lines)


def test_middle_ellipsis_keeps_both_ends():
    p = "/a/very/long/path/to/the/snapshot-file-name.json"
    assert middle_ellipsis(p, 100) == p
    short = middle_ellipsis(p, 30)
    assert len(short) == 30 and short.startswith("/a/") and short.endswith("name.json") and "…" in short
