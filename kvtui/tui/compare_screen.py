"""The modes side by side (`c`): the comparison table with every column, the mode name fixed."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from kvtui.io.snapshot.schema import Comparison
from kvtui.tui.keys import bindings


class CompareScreen(ModalScreen[None]):
    """The modes side by side against the baseline (the headless summary's columns, every one):
    a table whose mode column stays put when it scrolls right; the legend under it."""

    BINDINGS = bindings("compare")  # kvtui.tui.keys

    DEFAULT_CSS = """
    CompareScreen { align: center middle; }
    CompareScreen #box { width: 98%; height: auto; max-height: 95%; background: $surface; border: round $primary;
                         padding: 0 1; }
    CompareScreen #compare-table { height: auto; scrollbar-size-vertical: 1; overflow-x: auto; }
    CompareScreen #compare-head, CompareScreen #compare-legend { height: auto; }
    CompareScreen #compare-legend { color: $text-muted; }
    CompareScreen.-narrow #box { width: 100%; max-height: 100%; padding: 0; }
    """

    def __init__(self, text: str, doc: dict[str, Any] | None = None):
        super().__init__()
        self.text = text  # the plain table (a doc that cannot be tabulated shows this)
        self.doc = doc
        self._legend = ""

    def compose(self) -> ComposeResult:
        from textual.widgets import DataTable

        with Vertical(id="box") as box:
            head = self._head()
            if head != self.text.split("\n", 1)[0]:
                box.border_title = self.text.split(" (", 1)[0]
            yield Static(Text(head, style="bold"), id="compare-head")
            yield DataTable(id="compare-table", zebra_stripes=True, fixed_columns=1, cursor_type="row")
            yield Static("", id="compare-legend")

    def on_mount(self) -> None:
        from textual.widgets import DataTable

        from kvtui.report.text import comparison, comparison_headers, comparison_rows

        self.on_mount_layout()
        table = self.query_one(DataTable)
        doc = self.doc
        try:
            if doc is None:  # no document to tabulate: the plain text
                raise ValueError("no document")
            headers, rows = comparison_headers(doc), comparison_rows(doc)
            note = Comparison.view(comparison(doc)).note
        except Exception:  # a half-written mode must not take the screen down: the plain text then
            self.query_one("#compare-head", Static).update(Text(self.text, no_wrap=True))
            table.display = False
            return
        headers, rows, empty = drop_empty(headers, rows)
        short: dict[str, str] = {}
        if _fits(headers, rows, self.room()):
            for i, h in enumerate(headers):
                table.add_column(h, key=str(i))
            for r in rows:
                table.add_row(*r)
        else:
            # Narrow (80, 120 columns): one row per figure, one column per mode, so that every figure is
            # on screen whole instead of behind a horizontal scroll that cuts the column at the edge. A
            # mode name is one line: shortened around "…" where the columns need it, spelled out below.
            th, tr = transposed(headers, rows)
            short = short_names(th[1:], tr, self.room())
            for i, h in enumerate(th):
                table.add_column(Text(short.get(h, h), no_wrap=True), key=str(i))
            for r in tr:
                table.add_row(*r)
            table.add_class("-transposed")
        self._legend = legend(headers, rows, empty, short, note)
        self.query_one("#compare-legend", Static).update(self._legend)
        self.call_after_refresh(self._fit_height)
        table.focus()

    def on_resize(self) -> None:
        self.call_after_refresh(self._fit_height)

    def _fit_height(self) -> None:
        """The table takes what the pop-up leaves it (the legend stays in view); past that it scrolls."""
        from textual.widgets import DataTable

        table = self.query_one(DataTable)
        # The head and the legend as laid out (they wrap where the terminal is narrow); 2: the border.
        taken = 2 + sum(self.query_one(f"#compare-{part}", Static).outer_size.height for part in ("head", "legend"))
        box = self.app.size.height if self.app.size.width < NARROW else int(self.app.size.height * 0.95)
        table.styles.max_height = max(4, box - taken)

    def _head(self) -> str:
        """The title line; where it would wrap, "Modes vs baseline X" goes to the border, its caveats stay."""
        head = self.text.split("\n", 1)[0]
        if len(head) <= self.room() + 1 or " (" not in head:
            return head
        caveats = head.split(" (", 1)[1]
        return caveats[:-1] if caveats.endswith(")") else caveats

    def on_mount_layout(self) -> None:
        self.set_class(self.app.size.width < NARROW, "-narrow")

    def room(self) -> int:
        """The table's width in cells: the box less its border and padding, less a vertical scrollbar."""
        w = self.app.size.width
        return (w - 2 - 1) if w < NARROW else int(w * 0.98) - 4 - 1

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


CELL_PADDING = 2  # DataTable's cell padding, both sides
NARROW = 100  # below this the box takes the whole width


EMPTY = ("—", "", "-")


def drop_empty(headers: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]], list[str]]:
    """Without the figures no mode has (every cell "—"): they are named in the legend instead."""
    keep = [i for i in range(len(headers)) if i == 0 or any(str(r[i]) not in EMPTY for r in rows)]
    empty = [h for i, h in enumerate(headers) if i not in keep and h not in ("×", "Δ")]
    return [headers[i] for i in keep], [[r[i] for i in keep] for r in rows], empty


def ellipsis(name: str, room: int) -> str:
    """`name` in `room` cells, its start and end around "…" (never broken over lines)."""
    if len(name) <= room:
        return name
    room = max(room, 5)
    tail = (room - 1) // 2
    return name[: room - 1 - tail] + "…" + name[-tail:]


def short_names(names: list[str], rows: list[list[str]], room: int) -> dict[str, str]:
    """Mode name → the header it takes where the transposed table needs it narrower (none if all fit).

    Each mode's column is as wide as its figures; what room is left goes to the names that want more,
    fairly; a name that still does not fit is shortened around "…", and two names never shorten alike."""
    label = max([len(str(r[0])) for r in rows] + [len("mode")]) + CELL_PADDING
    data = [max([len(str(r[i + 1])) for r in rows] + [1]) for i in range(len(names))]
    width = list(data)
    slack = room - label - sum(d + CELL_PADDING for d in data)
    want = {i for i, n in enumerate(names) if len(n) > width[i]}
    while slack > 0 and want:
        share = max(1, slack // len(want))
        for i in sorted(want):
            give = min(share, len(names[i]) - width[i], slack)
            width[i] += give
            slack -= give
        want = {i for i in want if len(names[i]) > width[i]}
    out = {n: ellipsis(n, w) for n, w in zip(names, width) if len(n) > w}
    while len(set(out.values())) < len(out):  # alike: widen them until they differ (then it scrolls)
        seen: dict[str, int] = {}
        for n, s in out.items():
            seen[s] = seen.get(s, 0) + 1
        for n in [n for n, s in out.items() if seen[s] > 1]:
            out[n] = ellipsis(n, len(out[n]) + 1)
        out = {n: s for n, s in out.items() if s != n}
    return out


def legend(headers: list[str], rows: list[list[str]], empty: list[str], short: dict[str, str],
           note: str | None) -> str:
    """What the shown table's signs mean: each sign it shows, nothing it does not."""
    import re

    cells = [str(c) for r in rows for c in r[1:]]
    parts = []
    if "×" in headers:
        parts.append("× ratio to the baseline")
    if "Δ" in headers:
        parts.append("Δ change against it")
    if any("@SLO" in h for h in headers):
        parts.append("@SLO at the highest load meeting the SLO")
    if any(re.search(r"@\d", c) for c in cells):
        parts.append("\"@n\": the faster load the rate comes from")
    if "J/tok out" in headers:
        parts.append("J/tok GPU energy per output token (NVML)")
    parts += [f"{s} = {n}" for n, s in short.items()]
    if empty:
        parts.append("not measured: " + ", ".join(empty))
    parts.append("? lists every abbreviation")
    return (f"note: {note}\n" if note else "") + " · ".join(parts)


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
    return [str(headers[0]) if headers else "", *(str(r[0]) for r in rows)], [
        [str(h), *(str(r[i]) for r in rows)] for i, h in enumerate(headers) if i]
