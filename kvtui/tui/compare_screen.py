"""The modes side by side (`c`): the comparison table with every column, the mode name fixed."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class CompareScreen(ModalScreen[None]):
    """The modes side by side against the baseline (the headless summary's columns, every one):
    a table whose mode column stays put when it scrolls right; the legend under it."""

    BINDINGS = [Binding("escape,c,q", "dismiss_none", "close")]

    DEFAULT_CSS = """
    CompareScreen { align: center middle; }
    CompareScreen #box { width: 98%; height: auto; max-height: 95%; background: $surface; border: round $primary;
                         padding: 0 1; }
    CompareScreen #compare-table { height: auto; max-height: 14; }
    CompareScreen #compare-head, CompareScreen #compare-legend { height: auto; }
    CompareScreen #compare-legend { color: $text-muted; }
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

        table = self.query_one(DataTable)
        try:
            headers, rows = comparison_headers(self.doc), comparison_rows(self.doc)
            note = comparison(self.doc).get("note")
        except Exception:  # a half-written mode must not take the screen down: the plain text then
            self.query_one("#compare-head", Static).update(Text(self.text, no_wrap=True))
            table.display = False
            return
        for i, h in enumerate(headers):
            table.add_column(h, key=str(i))
        for r in rows:
            table.add_row(*r)
        legend = ("× ratio to the baseline · Δ change against it · @SLO at the highest load meeting the SLO · "
                  "\"@n\": the faster load the rate comes from · J/tok GPU energy per output token (NVML) · "
                  "? lists every abbreviation")
        self.query_one("#compare-legend", Static).update((f"note: {note}\n" if note else "") + legend)
        table.focus()

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
