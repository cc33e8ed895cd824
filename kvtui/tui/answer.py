"""The answer screen: who won each question, each mode against the baseline, why, and every
mode's latency against the load on one chart. A finished run ends here; a replay opens here.

The figures come from `kvtui.report.answer.build_answer` (the same data the exports use), on
the document as shown (an edited SLO applied). 80×24 keeps the headline, the winners, the
mode table and the footer; the chart and the reasons come with more rows. Its rows are read as the
schema's typed `ComparisonRow`s, the steps on the chart as `Step`s (kvtui.io.snapshot.schema).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static

from kvtui.io.snapshot.schema import ComparisonRow, Step
from kvtui.report.answer import build_answer, headline
from kvtui.report.text import figure_cell, fmt_load, quality_cell
from kvtui.tui.charts import Chart, _finite, hexrgb
from kvtui.tui.footer import KeyFooter
from kvtui.tui.keys import bindings
from kvtui.tui.state import ModeView, RunState
from kvtui.tui.themes import ChartPalette
from kvtui.tui.ticks import nice_ticks
from kvtui.tui.widgets import InfoHeader

if TYPE_CHECKING:
    from textual_plotext.plot import Plot

CHART_MIN_HEIGHT = 34  # below this the answer (text and table) gets every row
MARKERS = ("●", "■", "▲", "◆", "✚", "✖", "○", "□")  # one per mode: series stay apart without colour
CLIP_X_SLO = 3.0  # the latency axis stops at 3× the SLO target (said in the legend), so the line is visible

# (key, header, cell) of the answer's mode table; the mode name stays fixed when it scrolls.
ANSWER_COLUMNS = [
    ("mode", "mode"),
    ("best", "max {lw}@SLO"),
    ("best_x", "×"),
    ("tok", "tok/s@SLO"),
    ("tok_x", "×"),
    ("usd", "$/Mtok"),
    ("usd_d", "Δ"),
    ("qadj", "q-adj $/Mtok"),
    ("j", "J/tok"),
    ("kv", "KV tokens"),
    ("limit", "next step"),
    ("quality", "quality"),
]


# Where the table is wider than the screen (80 columns), these go first, whole: every one of them is in
# the comparison (c), and the reasons under the table say what limited each mode in words.
DROP_ORDER = ["qadj", "kv", "usd_d", "tok_x", "j", "limit", "quality"]


def fit_columns(cols: list[tuple[str, str]], rows: list[dict[str, str]], room: int) -> list[tuple[str, str]]:
    """The columns that fit `room` cells, whole (never one cut at the edge)."""
    def need(k: str, h: str) -> int:
        return max([Text(h).cell_len] + [Text(r[k]).cell_len for r in rows]) + 2  # DataTable's cell padding

    cols = list(cols)
    for k in DROP_ORDER:
        if sum(need(*c) for c in cols) <= room:
            break
        cols = [c for c in cols if c[0] != k]
    return cols


def answer_cells(r: ComparisonRow | Mapping[str, Any], base: str | None) -> dict[str, str]:
    from kvtui.core.evaluate import LIMIT_WORDS

    row = ComparisonRow.of(r)
    lim = row.knee_limited_by
    c = lambda key: figure_cell(key, row)  # noqa: E731 - each figure written by its one rule (report/text.py)
    tok = c("output_tok_s")
    if row.peak_load is not None and row.best is not None and row.peak_load != row.best:
        tok += f"@{fmt_load(row.peak_load)}"
    return {
        "mode": str(row.mode) + (" (base)" if row.mode == base else ""),
        "best": c("best"),
        "best_x": c("best_x"),
        "tok": tok,
        "tok_x": c("tok_s_x"),
        "usd": c("usd_per_mtok_out"),
        "usd_d": c("cost_out_change"),
        "j": c("j_per_token_out"),
        "qadj": c("usd_per_mtok_out_qadj"),
        "kv": c("kv_tokens"),
        "limit": LIMIT_WORDS.get(lim or "", lim or "—"),
        "quality": quality_cell(row.quality),
    }


class LoadLatencyChart(Chart):
    """Every mode's p95 of one SLO metric against the load, its knee (★) and the SLO line."""

    DEFAULT_CSS = """
    LoadLatencyChart { height: 1fr; min-height: 8; }
    """

    def __init__(self, state: RunState, palette: Any, metric: str, pct: str, limit: float | None, **kw: Any):
        super().__init__(state, palette, **kw)
        self.metric, self.pct, self.limit = metric, pct, limit
        self.border_title = f"{metric.upper()} {pct} ms vs {state.load_word} — every mode"

    def data_key(self) -> Any:
        st = self.state
        return (st.steps_version, st.slo_version, len(st.modes), self.limit)

    def draw(self, plt: Plot, mv: ModeView | None, w: int, h: int, pal: ChartPalette) -> str:
        st = self.state
        ymax = 0.0
        loads: list[float] = []
        knees: list[tuple[float, float, tuple[int, int, int], str]] = []
        for i, m in enumerate(st.modes.values()):
            latest: dict[float, Step] = {}
            for s in map(Step.of, st.steps_of(m, upto_cursor=False)):
                if s.load is not None:
                    latest[float(s.load)] = s
            xy = [(x, y) for x in sorted(latest) if (y := self.figure(latest[x])) is not None]
            if not xy:
                continue
            color, marker = pal.line(i), MARKERS[i % len(MARKERS)]
            plt.plot([p[0] for p in xy], [p[1] for p in xy], color=color, marker=marker)
            loads += [p[0] for p in xy]
            ymax = max(ymax, max(p[1] for p in xy))
            best = st.best(m, upto_cursor=False)
            if best is not None and best in latest:
                y = self.figure(latest[best])
                if y is not None:
                    knees.append((best, y, color, m.name))
        if not loads:
            self.empty(plt, "no step finished yet")
            return ""
        top = ymax
        clipped = False
        if self.limit:
            top = max(top, self.limit * 1.1)
            if ymax > self.limit * CLIP_X_SLO:
                top, clipped = self.limit * CLIP_X_SLO, True
            plt.horizontal_line(self.limit, color=pal.slo)
        lo, hi = min(loads), max(loads)
        if lo == hi:
            lo, hi = lo - 1, hi + 1
        plt.xlim(lo, hi)
        plt.ylim(0, top * 1.05 if top > 0 else 1)
        xt, xl = nice_ticks(lo, hi, max(2, min(6, w // 14)), integer=all(float(x).is_integer() for x in loads))
        plt.xticks(xt, xl)
        yt, yl = nice_ticks(0, top, max(2, min(5, h // 3)))
        plt.yticks(yt, yl)
        for x, y, color, _name in knees:
            plt.scatter([x], [min(y, top)], color=pal.best, marker="★")
        title = (f"{self.metric.upper()} {self.pct} ms vs {st.load_word} — every mode"
                 + (f" · clipped at {top:g}" if clipped else ""))
        if title != self.border_title:
            self.border_title = title
            self.call_after_refresh(self.refresh)
        return ""  # one legend for both charts, under them (AnswerScreen.legend)

    def figure(self, s: Step) -> float | None:
        """The step's percentile of the chart's metric (its TTFT p95…), where it is a finite number."""
        d = s.latency(self.metric)
        return _finite(d.by_key(self.pct)) if d is not None else None


class AnswerScreen(Screen):
    """The run's answer. `d` (or enter) opens the dashboard behind it."""

    BINDINGS = bindings("answer")  # kvtui.tui.keys: the one key table (the help reads it too)

    DEFAULT_CSS = """
    AnswerScreen { layout: vertical; }
    AnswerScreen #answer-body { height: 1fr; padding: 0 1; }
    AnswerScreen #answer-head { height: auto; }
    AnswerScreen #answer-table { height: auto; max-height: 12; margin: 0 0 1 0; }
    AnswerScreen #answer-why { height: auto; color: $text; }
    AnswerScreen #answer-charts { height: 16; display: none; }
    AnswerScreen.-charts #answer-charts { display: block; }
    AnswerScreen #answer-legend { height: auto; display: none; }
    AnswerScreen.-charts #answer-legend { display: block; }
    AnswerScreen #answer-paths { height: auto; color: $text-muted; margin-top: 1; }
    """

    def __init__(self, state: RunState):
        super().__init__()
        self.state = state
        self._key: Any = None
        self.answer: dict[str, Any] = {}

    @property
    def kapp(self) -> Any:
        """The KvtuiApp (typed loosely: the screens never import the app module back)."""
        return self.app

    def compose(self) -> ComposeResult:
        st = self.state
        pal = lambda: self.kapp.palette  # noqa: E731
        yield InfoHeader(st, id="header")
        with VerticalScroll(id="answer-body"):
            yield Static("", id="answer-head")
            yield DataTable(id="answer-table", cursor_type="row", zebra_stripes=True, fixed_columns=1)
            with Horizontal(id="answer-charts"):
                for metric, pct, limit in self._chart_targets():
                    yield LoadLatencyChart(st, pal, metric, pct, limit, id=f"answer-chart-{metric}")
            yield Static("", id="answer-legend")
            yield Static("", id="answer-why")
            yield Static("", id="answer-paths")
        yield KeyFooter(compact=True)

    def _chart_targets(self) -> list[tuple[str, str, float | None]]:
        """The SLO's TTFT and TPOT targets (the ones a load moves), at most two charts."""
        targets: list[tuple[str, str, float | None]] = [
            (m, p, lim) for m, p, lim in self.state.shown_slo.targets() if m in ("ttft", "tpot", "itl", "e2e")]
        return targets[:2] or [("ttft", "p95", None)]

    def on_mount(self) -> None:
        # The body has the focus, not the table: ↑↓, page up/down, home and end scroll the answer
        # down to its caveats and commands, which at 80×24 lie below the fold (a table with the
        # focus took those keys for its row cursor, and the commands could only be reached by mouse).
        self.query_one("#answer-table", DataTable).can_focus = False
        self.query_one("#answer-body", VerticalScroll).focus()
        self._layout()
        self.sync()

    def on_resize(self) -> None:
        self._layout()
        self.sync()  # the table's columns are chosen for the width

    def _layout(self) -> None:
        self.set_class(self.size.height >= CHART_MIN_HEIGHT and self.size.width >= 90, "-charts")

    def doc(self) -> dict[str, Any]:
        base = self.kapp._current_doc() or self.state.doc
        return self.state.export_doc(base) if base else {}

    def sync(self) -> None:
        st = self.state
        key = (st.version, st.slo_version, self.app.theme, self.size.width)
        if key == self._key or not self.children:
            return
        self._draw()
        self._key = key  # once drawn: a tick that met the screen half-mounted (app.redraw) draws it again

    def _draw(self) -> None:
        st = self.state
        self.query_one(InfoHeader).sync()
        doc = self.doc()
        if not doc:
            return
        self.answer = ans = build_answer(doc)
        th = self.app.current_theme
        head = Text()
        head.append("ANSWER ", style=f"bold reverse {th.primary}")
        head.append(" " + headline(ans), style="bold")
        head.append(f"\nSLO {st.shown_slo.describe()}" + ("  (edited: recomputed)" if st.edited else ""), style="dim")
        if not ans["finished"] and not st.replay:
            head.append("  · the run is not finished: figures so far", style=th.warning or "")
        room = max(30, (self.size.width or 80) - 4)  # the body's padding and its scrollbar
        for q in ans["questions"]:
            who = ", ".join(q["winners"]) if q["winners"] else "—"
            head.append("\n")
            if 36 + 2 + len(who) + 2 + len(q["text"]) > room:  # narrow: the winner under its question, whole
                head.append(q["question"], style="dim")
                head.append("\n  ")
            else:
                head.append(f"{q['question']:<36}", style="dim")
            head.append("= " if q["tie"] else "★ ", style=f"bold {th.success}")
            head.append(who, style="bold")
            head.append(f"  {q['text']}")
        if ans["note"]:  # build_answer's keys are always there
            head.append(f"\nnote: {ans['note']}", style=th.warning or "")
        self.query_one("#answer-head", Static).update(head)
        self._fill_table(ans)
        why = Text()
        why.append("why", style="bold")
        room = max(30, (self.size.width or 80) - 4)  # the body's padding and its scrollbar

        def bullet(text: str, style: str = "") -> None:
            # wrapped here, under its own text (a bullet's second line under the bullet read as a new one)
            import textwrap

            lines = textwrap.wrap(text, room, initial_indent="• ", subsequent_indent="  ",
                                  break_long_words=False, break_on_hyphens=False) or ["•"]
            why.append("\n" + "\n".join(lines), style=style)

        for line in ans["lines"]:
            bullet(line)
        for p in ans["predicted"]:
            bullet(f"{p['mode']}: KV-bound prediction ≈{p['predicted']:,.0f}, measured knee {fmt_load(p['measured'])}",
                   "dim")
        if ans["caveats"]:
            why.append("\ncaveats", style="bold")
            for c in ans["caveats"]:
                bullet(c, th.warning or "")
        self.query_one("#answer-why", Static).update(why)
        self.query_one("#answer-paths", Static).update(self._paths_text())
        self.query_one("#answer-legend", Static).update(self.legend())
        for ch in self.query(LoadLatencyChart):
            ch.update_if_changed()

    def legend(self) -> Text:
        """The charts' one legend: each mode's marker and colour (markers keep them apart without colour)."""
        pal = self.kapp.palette
        t = Text()
        for i, m in enumerate(self.state.modes.values()):
            t.append(f"{MARKERS[i % len(MARKERS)]} ", style=hexrgb(pal.line(i)))
            t.append(f"{m.name}  ")
        t.append("━ ", style=hexrgb(pal.slo))
        t.append("SLO  ")
        t.append("★ ", style=hexrgb(pal.best))
        t.append("knee (best load at the SLO)")
        return t

    def _fill_table(self, ans: dict[str, Any]) -> None:
        table = self.query_one("#answer-table", DataTable)
        table.clear(columns=True)
        lw = self.state.load_word
        rows = [ComparisonRow.of(r) for r in ans["rows"]]
        has_q = any(r.quality for r in rows)
        has_j = any(r.j_per_token_out is not None for r in rows)
        has_qadj = any(r.usd_per_mtok_out_qadj is not None for r in rows)
        cols = [(k, h.format(lw=lw)) for k, h in ANSWER_COLUMNS
                if (k != "quality" or has_q) and (k != "j" or has_j) and (k != "qadj" or has_qadj)]
        th = self.app.current_theme
        winners = {q["key"]: set(q["winners"]) for q in ans["questions"]}
        won_src = {"best": "best", "tok": "output_tok_s", "usd": "usd_per_mtok_out", "j": "j_per_token_out",
                   "qadj": "usd_per_mtok_out_qadj"}
        shown: list[dict[str, tuple[str, bool]]] = []
        for r in rows:
            cells = answer_cells(r, ans["baseline"])
            won = {k: k in won_src and r.mode in winners.get(won_src[k], set()) and len(rows) > 1
                   for k in cells}
            shown.append({k: (("★" if won[k] else "") + v, won[k]) for k, v in cells.items()})
        cols = fit_columns(cols, [{k: v for k, (v, _) in row.items()} for row in shown],
                           self.size.width - 4)  # the body's padding and its scrollbar
        for k, h in cols:
            table.add_column(h, key=k)
        for r, row_cells in zip(rows, shown):
            row = [Text(row_cells[k][0], style=f"bold {th.success}" if row_cells[k][1] else "") for k, _ in cols]
            table.add_row(*row, key=str(r.mode))

    def _paths_text(self) -> Text:
        snap = self.kapp.snapshot_path()
        t = Text()
        if snap:
            # One command a line, never wrapped in the middle: a path too long for the width keeps
            # its start and its name, with an ellipsis between (the exports print it whole).
            width = max(40, (self.size.width or 80) - 4)
            t.append("snapshot ", style="bold")
            t.append(middle_ellipsis(str(snap), width - len("snapshot ")))
            for pre, post in (("kvtui export ", " --format md"), ("kvtui export ", " --format svg"),
                              ("kvtui diff ", " OTHER.json")):
                t.append(f"\n  {pre}{middle_ellipsis(str(snap), width - 2 - len(pre) - len(post))}{post}")
        for p in self.kapp.exports:
            t.append(f"\nexported {p}")
        # A replay of a document with no file behind it (an SVG export's portable copy): no commands
        # to offer on a path, and nothing said of it (the picture's title names the scenario).
        return t

    class ShowDashboard(Message):
        """Asks the app for the dashboard behind the answer (the screen does not reach into the app)."""

        def __init__(self, open_log: bool = False) -> None:
            super().__init__()
            self.open_log = open_log

    def action_dashboard(self) -> None:
        self.post_message(self.ShowDashboard())

    def action_log(self) -> None:
        self.post_message(self.ShowDashboard(open_log=True))


def middle_ellipsis(text: str, room: int) -> str:
    """`text` in `room` cells: whole if it fits, else its start and end around "…" (a path keeps
    its first folders and its file name)."""
    if len(text) <= room:
        return text
    room = max(room, 9)
    tail = (room - 1) * 3 // 5  # the end (the file name) matters more than the middle folders
    return text[: room - 1 - tail] + "…" + text[-tail:]
