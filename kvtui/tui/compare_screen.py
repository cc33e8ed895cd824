"""The modes side by side (`c`): the comparison table with every column, the mode name fixed."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from kvtui.tui.keys import bindings


class CompareScreen(ModalScreen[None]):
    """The modes side by side against the baseline (the headless summary's columns, every one):
    a table whose mode column stays put when it scrolls right; the legend under it."""

    BINDINGS = bindings("compare")  # kvtui.tui.keys

    DEFAULT_CSS = """
    CompareScreen { align: center middle; }
    CompareScreen #box { width: 98%; height: auto; max-height: 95%; background: $surface; border: round $primary;
                         padding: 0 1; }
    CompareScreen #compare-table { height: auto; max-height: 14; }
    CompareScreen #compare-head, CompareScreen #compare-legend { height: auto; }
    CompareScreen #compare-legend { color: $text-muted; }
    CompareScreen.-narrow #box { width: 100%; max-height: 100%; padding: 0; }
    """

    def __init__(self, text: str, doc: dict[str, Any] | None = None):
        super().__init__()
        self.text = text  # the plain table (a doc that cannot be tabulated shows this)
        self.doc = doc

    def compose(self) -> ComposeResult:
        from textual.widgets import DataTable

        with Vertical(id="box"):
            head, *_ = self.text.split("\n", 1)
            yield Static(Text(head, style="bold"), id="compare-head")
            yield DataTable(id="compare-table", zebra_stripes=True, fixed_columns=1, cursor_type="row")
            yield Static("", id="compare-legend")

    def on_mount(self) -> None:
        from textual.widgets import DataTable

        from kvtui.report.text import comparison, comparison_headers, comparison_rows

        self.on_mount_layout()
        table = self.query_one(DataTable)
        try:
            headers, rows = comparison_headers(self.doc), comparison_rows(self.doc)
            note = comparison(self.doc).get("note")
        except Exception:  # a half-written mode must not take the screen down: the plain text then
            self.query_one("#compare-head", Static).update(Text(self.text, no_wrap=True))
            table.display = False
            return
        if _fits(headers, rows, self.room()) or not _fits(*transposed(headers, rows), self.room()):
            for i, h in enumerate(headers):
                table.add_column(h, key=str(i))
            for r in rows:
                table.add_row(*r)
        else:
            # Narrow (80 columns): one row per figure, one column per mode, so that every figure is on
            # screen whole instead of behind a horizontal scroll that cuts the column at the edge.
            th, tr = transposed(headers, rows)
            labels = [Text(h) for h in th]  # the mode names already broken after "+" (transposed)
            table.header_height = max(lbl.plain.count("\n") + 1 for lbl in labels)
            for i, h in enumerate(labels):
                table.add_column(h, key=str(i))
            for r in tr:
                table.add_row(*r)
            table.add_class("-transposed")
        legend = ("× ratio to the baseline · Δ change against it · @SLO at the highest load meeting the SLO · "
                  "\"@n\": the faster load the rate comes from · J/tok GPU energy per output token (NVML) · "
                  "? lists every abbreviation")
        self.query_one("#compare-legend", Static).update((f"note: {note}\n" if note else "") + legend)
        table.focus()

    def on_mount_layout(self) -> None:
        self.set_class(self.app.size.width < NARROW, "-narrow")

    def room(self) -> int:
        """The table's width in cells: the box less its border and padding, less a vertical scrollbar."""
        w = self.app.size.width
        return (w - 2 - 2) if w < NARROW else int(w * 0.98) - 4 - 2

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


CELL_PADDING = 2  # DataTable's cell padding, both sides
NARROW = 100  # below this the box takes the whole width


def wrap_name(name: str) -> Text:
    """A mode name as a column header, broken after each "+" ("fp8-w+kv" → "fp8-w+", "kv"): never mid-word."""
    return Text(name.replace("+", "+\n").rstrip("\n"))


def _cells(c: Any) -> int:
    return max(len(line) for line in str(c).split("\n")) if not isinstance(c, Text) else max(
        Text(line).cell_len for line in c.plain.split("\n"))


def _width(headers: list[str], rows: list[list[str]]) -> int:
    cols = zip(headers, *rows) if rows else ((h,) for h in headers)
    return sum(max(_cells(c) for c in col) + CELL_PADDING for col in cols)


def _fits(headers: list[str], rows: list[list[str]], room: int) -> bool:
    return _width(headers, rows) <= room


def transposed(headers: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """Modes as columns (the first header names the figures), figures as rows."""
    names = [wrap_name(str(r[0])).plain for r in rows]  # the width a wrapped header takes
    return [str(headers[0]) if headers else "", *names], [[str(h), *(str(r[i]) for r in rows)]
                                                           for i, h in enumerate(headers) if i]
