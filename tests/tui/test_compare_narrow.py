"""Issue 31 item 7: the compare pop-up at 80×24 and 120×40. A mode name is one line (whole, or
shortened around "…" and spelled out in the legend), every sign the legend explains has its row,
the table scrolls only where it must and shows no scrollbar where nothing scrolls."""

from __future__ import annotations

import json

import pytest
from textual.widgets import DataTable

from kvtui import PROJECT_ROOT
from kvtui.io.snapshot.file import load_snapshot
from kvtui.tui.app import create_app
from kvtui.tui.compare_screen import CompareScreen, ellipsis, short_names

from tui_helpers import on_screen, screen_text, wait_until

LONG = {"fp8-w+kv": "fp8-weights+fp8-kv-awq-long-name", "awq-int4+fp8-kv": "awq-int4-weights+fp8-kv-long-name"}


def _doc(name: str, rename: dict[str, str] | None = None) -> dict:
    doc = load_snapshot(PROJECT_ROOT / "docs" / "results" / name)
    doc.pop("_path", None)
    if rename:  # every place a mode is named (its entry, the comparison, the baseline), as JSON strings
        text = json.dumps(doc)
        for old, new in rename.items():
            text = text.replace(json.dumps(old), json.dumps(new))
        doc = json.loads(text)
    return doc


def _long_doc() -> dict:
    return _doc("h200-v2.json", LONG)




@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
@pytest.mark.parametrize("which", ["h200-v2.json", "h200-kvb.json", "h200-smollm2.json", "long"])
async def test_compare_fits_with_whole_names_and_every_legend_row(size, which):
    doc = _long_doc() if which == "long" else _doc(which)
    names = [m["name"] for m in doc["modes"]]
    app = create_app(snapshot=doc)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.5)
        await pilot.press("c")
        await wait_until(pilot, lambda: on_screen(app, CompareScreen), "the comparison")
        await pilot.pause(0.3)
        table = app.screen.query_one(DataTable)
        assert table.has_class("-transposed")  # neither size takes the 19-column table
        heads = [c.label.plain for c in table.columns.values()][1:]
        labels = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        text = screen_text(app)
        legend = " ".join(line.strip(" │▁▂▃▄▅▆▇█") for line in text.splitlines())
        for name, head in zip(names, heads):
            assert "\n" not in head
            if head != name:  # shortened: both ends kept, spelled out in the legend
                assert "…" in head and name.startswith(head.split("…")[0]) and name.endswith(head.split("…")[1])
                assert f"{head} = {name}" in legend, legend
            assert head in text  # on one line of the screen
        assert len(set(heads)) == len(heads)
        # Each sign the legend explains has its row (J/tok: every shipped H200 snapshot measured energy).
        for sign, row in (("× ratio", "×"), ("Δ change", "Δ"), ("J/tok GPU energy", "J/tok out"),
                          ("@SLO at the", "max conc @SLO")):
            assert sign in legend and row in labels, (sign, labels)
        # A figure no mode has is named once, not drawn as a row of dashes.
        assert ("q-adj $/Mtok out" in labels) != ("not measured: q-adj $/Mtok out" in legend)
        # On screen: the J/tok row at once; the last row after scrolling, where it scrolls at all.
        assert any(line.strip(" │▁▂▃▄▅▆▇█").startswith("J/tok out") for line in text.splitlines()), text
        assert table.show_vertical_scrollbar == (table.max_scroll_y > 0)
        assert not table.show_horizontal_scrollbar and table.max_scroll_x == 0
        await pilot.press(*["down"] * table.row_count)  # the cursor to the last row, as a reader would
        await pilot.pause(0.3)
        assert any(line.strip(" │▁▂▃▄▅▆▇█").startswith(labels[-1]) for line in screen_text(app).splitlines())
        assert all(len(line) <= size[0] for line in screen_text(app).splitlines())


def test_short_names_are_fair_and_distinct():
    rows = [["max conc", "160", "160", "160"]]
    names = ["bf16", "fp8-weights+fp8-kv-awq-long-name", "fp8-weights+fp8-kv-awq-long-name-2"]
    short = short_names(names, rows, 40)
    assert "bf16" not in short and len(set(short.values())) == 2
    assert all(len(s) < len(n) and "…" in s for n, s in short.items())
    assert short_names(names, rows, 200) == {}  # room for all: nothing shortened
    assert ellipsis("awq-int4+fp8-kv", 9) == "awq-…8-kv" and ellipsis("bf16", 9) == "bf16"


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_compare_long_names_svg(snap_compare, size):
    async def compare(pilot):
        await pilot.press("c")
        await pilot.pause()

    assert snap_compare(create_app(snapshot=_long_doc()), terminal_size=size, run_before=compare)
