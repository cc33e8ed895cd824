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
        await pilot.press("end")  # the commands follow the caveats (every one of them: issue 49), below the fold
        await pilot.pause(0.3)
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


@pytest.mark.parametrize("key", ["end", "pagedown"])
async def test_the_commands_below_the_fold_are_reached_by_keyboard(key):
    # The published H200 run has five modes: at 80×24 its caveats and commands lie below the fold.
    # The table had the focus and took the keys for its row cursor; only a mouse wheel reached them.
    from kvtui import PROJECT_ROOT

    app = create_app(snapshot=PROJECT_ROOT / "docs" / "results" / "h200-v2.json")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(1.0)
        before = screen_text(app)
        assert "kvtui export" not in before  # below the fold
        for _ in range(3):
            await pilot.press(key)
        await pilot.pause(0.5)
        after = screen_text(app)
    assert "kvtui export" in after and "kvtui diff" in after, after


async def test_a_toast_shows_its_text_as_written(frozen_path):
    # The pre-flight's fix "pip install 'kvtui[vllm]'" showed as "pip install 'kvtui'": the toast read
    # "[vllm]" as a style tag. Toasts carry servers' errors, paths and commands: never markup.
    app = create_app(snapshot=frozen_path)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await pilot.pause(0.5)
        app.screen.notify("fix: pip install 'kvtui[vllm]' (or [/tmp/x])", timeout=30)
        await pilot.pause(0.5)
        text = screen_text(app)
    assert "pip install 'kvtui[vllm]'" in text and "[/tmp/x]" in text, text


def test_every_help_key_is_apart_from_its_text():
    # "escape / c / q" filled its 14 columns and ran into "close"; "run / wait / tgt / pre" too
    from kvtui.tui.dialogs import ABBREVIATIONS, help_text
    from kvtui.tui.keys import HELP_CONTEXTS, help_rows

    lines = help_text("answer").plain.splitlines()
    keys = [k for ctx in HELP_CONTEXTS for k, _ in help_rows(ctx)] + [a for a, _ in ABBREVIATIONS]
    for key in keys:
        # its own line, or a space between it and its text
        assert any(line == f"  {key}" or line.startswith(f"  {key} ") for line in lines), key


async def test_at_60_columns_each_winner_stays_whole_under_its_question():
    # "most concurrent requests at the SLO ★ fp8-w, fp8-w+kv" then "224" alone on the next line
    from kvtui import PROJECT_ROOT

    app = create_app(snapshot=PROJECT_ROOT / "docs" / "results" / "h200-v2.json")
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause(1.0)
        # the body's scrollbar (its thumb's block glyphs) at the right edge is not part of the text
        lines = [line.rstrip(" ▁▂▃▄▅▆▇█").strip() for line in screen_text(app).splitlines()]
    assert "most concurrent requests at the SLO" in lines
    assert "★ fp8-w, fp8-w+kv  224" in lines and "★ fp8-w+kv  6,108 tok/s" in lines, lines
