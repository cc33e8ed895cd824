"""The dashboard's charts: textual-plotext plots that redraw only when their data changed.

A `Chart` is a `PlotextPlot` whose `render()` draws from the `RunState` at the widget's
own width (series downsampled to it) and caches the result by (data key, size, theme):
Textual asks for a render on every repaint of the region, the plot is rebuilt only when
the dashboard's timer saw its data change (`update_if_changed`). The plot's character
matrix is turned into Textual strips directly (Line API; no ANSI round trip, no Text to
Content conversion).

Compact layouts use `Spark`: one line, label + sparkline + value.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol, Sequence, cast

from rich.color import Color as RichColor
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual_plotext import PlotextPlot

from kvtui.io.snapshot.schema import Step
from kvtui.tui.legend import fit_legend, fit_text, fit_title
from kvtui.tui.redraw import RedrawnOnChange
from kvtui.tui.state import ModeView, RunState
from kvtui.tui.themes import RGB, ChartPalette

if TYPE_CHECKING:
    from textual_plotext.plot import Plot

# A legend item: (label, line colour) or (label, line colour, the series' marker in mono).
LegendItem = tuple[str, RGB] | tuple[str, RGB, str]

SPARK = "▁▂▃▄▅▆▇█"
MONO_MARKERS = ("•", "+", "o", "x", "*", "#")  # one per series without colour (NO_COLOR, 16 colours)


def _finite(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def fmt_num(x: Any, unit: str = "") -> str:
    v = _finite(x)
    if v is None:
        return "∞" if isinstance(x, float) and math.isinf(x) else "—"
    if abs(v) >= 10000:
        if unit == "ms":  # "21kms" read as a unit of its own: 21 s
            return f"{v / 1000:.0f}s"
        return f"{v / 1000:.0f}k{(' ' + unit) if unit else ''}"
    if abs(v) >= 100:
        return f"{v:.0f}{unit}"
    if abs(v) >= 10:
        return f"{v:.1f}{unit}"
    return f"{v:.2f}{unit}"


def hexrgb(rgb: tuple[int, int, int]) -> str:
    return "#%02x%02x%02x" % rgb


# -- plotext matrix → strips ---------------------------------------------------------------------
_STYLE_CACHE: dict[tuple, Style] = {}


def _pcolor(c: Any) -> RichColor | None:
    from plotext import _utility as ut

    if c is None or c == ut.no_color:
        return None
    if isinstance(c, tuple) and len(c) == 3:
        return RichColor.from_rgb(*c)
    if isinstance(c, int):
        return RichColor.from_ansi(c)
    if ut.is_string_color(c):
        code = ut.get_color_code(c)
        return RichColor.from_ansi(code) if isinstance(code, int) and code >= 0 else None
    return None


def _style(fg: Any, st: Any, bg: Any, default_bg: Any = None) -> Style:
    key = (fg, st, bg, default_bg)
    s = _STYLE_CACHE.get(key)
    if s is None:
        from plotext import _utility as ut

        bold = isinstance(st, str) and "bold" in st
        try:
            # A cell plotext leaves without a background gets the widget's own (tmux shows the
            # terminal's default there otherwise, not the theme's surface).
            s = Style(color=_pcolor(fg), bgcolor=_pcolor(bg) or default_bg, bold=bold or None)
        except Exception:
            s = Style()
        if st not in (None, ut.no_color) and not bold:
            s = s + Style(dim="dim" in str(st), italic="italic" in str(st))
        _STYLE_CACHE[key] = s
    return s


class _Matrix(Protocol):
    """plotext's character matrix (plotext._matrix.matrix_class): per row, each cell's marker and
    its foreground, style and background."""

    rows: int
    cols: int
    marker: list[list[str]]
    fullground: list[list[Any]]
    style: list[list[Any]]
    background: list[list[Any]]


class _Monitor(Protocol):
    matrix: _Matrix


class _BuiltFigure(Protocol):
    """What `matrix_strips` uses of a plotext figure: its private build steps and monitor, which
    textual_plotext's stubs (textual_plotext/plotext/_figure.pyi) leave out."""

    monitor: _Monitor

    def _set_sizes(self) -> None: ...
    def _build_matrix(self) -> None: ...


def matrix_strips(plt: "Plot", width: int, default_bg: Any = None) -> list[Strip]:
    """The built plot as Textual strips, straight from plotext's marker/colour matrices.

    No ANSI string and no Rich-Text-to-Content conversion on the way (see bench/ui_frame_cost.py).
    """
    fig = cast(_BuiltFigure, plt)  # the same object, seen through the private API the stubs omit
    fig._set_sizes()
    fig._build_matrix()
    m = fig.monitor.matrix
    strips: list[Strip] = []
    for r in range(m.rows - 1, -1, -1):
        markers, fgs, sts, bgs = m.marker[r], m.fullground[r], m.style[r], m.background[r]
        segs: list[Segment] = []
        if m.cols:
            start = 0
            key = (fgs[0], sts[0], bgs[0])
            for c in range(1, m.cols + 1):
                k = (fgs[c], sts[c], bgs[c]) if c < m.cols else None  # None: past the last cell
                if k != key:
                    segs.append(Segment("".join(markers[start:c]), _style(*key, default_bg)))
                    start = c
                    if k is not None:
                        key = k
        strips.append(Strip(segs, m.cols).adjust_cell_length(width))
    return strips


# -- charts ------------------------------------------------------------------------------------
class Chart(RedrawnOnChange, PlotextPlot):
    """A plot that reads the RunState; redrawn only when `data_key()` changes (kvtui.tui.redraw)."""

    DEFAULT_CSS = """
    Chart {
        width: 1fr;
        height: 1fr;
        min-height: 5;
        border-top: solid $panel-lighten-2;
        border-bottom: blank;
        border-title-color: $text;
        border-title-style: bold;
        border-subtitle-align: left;
        border-subtitle-color: $text-muted;
    }
    """
    TITLE = ""
    SHORT_TITLE: str | None = None  # where the title would be cut (kvtui.tui.legend.fit_title)

    def __init__(self, state: RunState, palette: Any, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.state = state
        self._palette_getter = palette  # () -> ChartPalette
        self._cache_key: Any = None
        self._strips: list[Strip] = []
        self.builds = 0  # how often the plot was rebuilt (bench and tests)
        self.border_title = self.TITLE
        self._legend_items = False  # the last draw made its legend from items (fitted there)

    def render_line(self, y: int) -> Strip:
        """Line API: the plot's rows, rebuilt only when (data, size, theme) changed."""
        w, h = self.size.width, self.size.height
        ck = (self._key, w, h, self.app.theme)
        if ck != self._cache_key:
            self._strips = self._build(w, h)
            self._cache_key = ck
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(w, self.rich_style)

    def _build(self, w: int, h: int) -> list[Strip]:
        if w < 8 or h < 3:
            return []
        plt = self._plot
        plt.clear_figure()  # (clear_data() and re-initialising the axes is cheaper, but loses the axes on rebuilds)
        plt.plotsize(w, h)
        plt._set_size(w, h)
        plt.theme(self._get_plotext_theme_name(self.app.theme))
        plt.xfrequency(max(2, min(5, w // 12)))
        plt.yfrequency(max(2, min(5, h // 3)))
        self._draw_w = w
        self._legend_items = False
        legend = self.draw(plt, self.viewed(), w, h, self.palette) or ""
        if not self._legend_items:
            legend = fit_text(legend, w)  # items were fitted in legend(); a free text is fitted here
        title = fit_title(self.full_title(), self.short_title(), w) if self.TITLE else self.border_title
        if title != self.border_title:
            self.border_title = title
            self.call_after_refresh(self.refresh)
        if legend != self.border_subtitle:
            self.border_subtitle = legend
            self.call_after_refresh(self.refresh)  # the border is painted outside render_line(): once more
        self.builds += 1
        bg = self.rich_style.bgcolor if self.rich_style else None
        return matrix_strips(plt, w, bg)

    def viewed(self) -> ModeView | None:
        return self.state.viewed

    def short_title(self) -> str | None:
        """The title where the full one would be cut (kvtui.tui.legend.fit_title)."""
        return self.SHORT_TITLE

    def draw(self, plt: "Plot", mv: ModeView | None, w: int, h: int, pal: ChartPalette) -> str:
        raise NotImplementedError

    @property
    def mono(self) -> bool:
        """No colour (NO_COLOR) or 16 colours (several series map to the same red): tell series
        apart by their marker, not by colour alone."""
        try:
            if self.app.is_headless:  # an SVG export or a test: the picture keeps its colours (NO_COLOR aside)
                return bool(self.app.no_color)
            return bool(self.app.no_color) or self.app.console.color_system in ("standard", "windows", None)
        except Exception:
            return False

    def mark(self, i: int) -> str:
        return MONO_MARKERS[i % len(MONO_MARKERS)] if self.mono else "hd"

    def full_title(self) -> str:
        return self.TITLE

    def legend(self, items: Sequence[LegendItem]) -> str:
        """Legend items (label, colour[, marker]): the line colour, or in mono the series' marker; fitted
        to the chart's width (short labels, then fewer items: kvtui.tui.legend)."""
        out: list[tuple[str, str, str]] = []
        for it in items:
            label, c = it[0], it[1]
            m = it[2] if len(it) > 2 and self.mono else "━"
            out.append((label, hexrgb(c), m))
        self._legend_items = True
        return fit_legend(out, getattr(self, "_draw_w", 0) or self.size.width)

    @staticmethod
    def empty(plt: "Plot", msg: str) -> None:
        plt.xticks([])
        plt.yticks([])
        plt.text(msg, 0.5, 0.5, alignment="center")
        plt.xlim(0, 1)
        plt.ylim(0, 1)


def time_scale(mv: ModeView | None) -> float:
    """The simulator's wall seconds per modelled second (1 for a real server)."""
    if mv is None:
        return 1.0
    ts = _finite(mv.info.time_scale)
    if ts is None:
        ts = next((t for s in mv.steps if (t := _finite(Step.of(s).time_scale))), None)
    return ts if ts and ts > 0 else 1.0


class TimeChart(Chart):
    """A telemetry series over the time since the mode started, in (modelled) seconds.

    Per-mode origin: a replay joined from several runs has each mode on its own clock (the
    run-relative times of a joined mode can be negative). The simulator's wall seconds are
    turned back into modelled seconds, as every figure in the step table is.
    """

    def data_key(self) -> Any:
        mv = self.viewed()
        return (mv.name if mv else None, mv.series.version if mv else 0, self.state.t_max())

    def buckets(self, w: int) -> int:
        return max(8, w - 8)

    def view(self, mv: ModeView, key: str, buckets: int, how: str = "max") -> tuple[list[float], list[float]]:
        xs, ys = mv.series.view(key, buckets, self.state.t_max(), how)
        t0 = mv.series.t[0] if mv.series.t else 0.0
        ts = time_scale(mv)
        return [(x - t0) / ts for x in xs], ys

    def time_ticks(self, plt: "Plot", mv: ModeView, w: int) -> None:
        """Round second ticks with a unit (the x axis of every time chart)."""
        from kvtui.tui.ticks import nice_ticks

        if not mv.series.t:
            return
        end = self.state.t_max()
        last = mv.series.t[mv.series.end_index(end) - 1] if mv.series.end_index(end) else mv.series.t[-1]
        # at least a second: a series of one sample spans 0 s ("0s 5e-07s 1e-06s" at a run's start)
        span = max(1.0, (last - mv.series.t[0]) / time_scale(mv))
        xt, xl = nice_ticks(0.0, span, max(2, min(5, w // 14)), unit="s", integer=span >= 2)
        plt.xticks(xt, xl)
        plt.xlim(0, span)


class MemoryChart(TimeChart):
    TITLE = "GPU memory GiB"

    def data_key(self) -> Any:
        mv = self.viewed()
        return super().data_key() + (mv.server if mv else (),)  # the startup facts (a document compares by value)

    def draw(self, plt: "Plot", mv: ModeView | None, w: int, h: int, pal: ChartPalette) -> str:
        if mv is None or not len(mv.series):
            self.empty(plt, "waiting for the server…")
            return ""
        s, b = mv.series, self.buckets(w)
        f = mv.server
        xs, used = self.view(mv, "gpu_mem_used_gib", b)
        kx, kv = self.view(mv, "kv_in_use_gib", b)
        total = s.last("gpu_mem_total_gib") or f.gpu_total_gib
        weights = _finite(f.weights_gib) or 0.0
        static = weights + (_finite(f.activation_peak_gib) or 0.0) + (_finite(f.cuda_graph_gib) or 0.0)
        pool = _finite(f.kv_cache_gib)
        items: list[LegendItem] = []
        per_gpu = sorted(k for k in s.cols if k.startswith("gpu") and k.endswith("_mem_gib"))
        if len(per_gpu) > 1:
            # Tensor parallel: the startup facts are per GPU (each rank's weights and KV pool),
            # so show each GPU's NVML line against them, not the sum.
            for i, key in enumerate(per_gpu):
                gx, gy = self.view(mv, key, b)
                if gx:
                    plt.plot(gx, gy, color=pal.line(0 if i == 0 else 4 + i % 2), marker=self.mark(i))
                    items.append((key.split("_")[0].upper(), pal.line(0 if i == 0 else 4 + i % 2), self.mark(i)))
            total = (total / len(per_gpu)) if total else None
            used = [v / len(per_gpu) for v in used]
        elif xs:
            plt.plot(xs, used, color=pal.line(0), marker=self.mark(0))
            items.append(("NVML", pal.line(0), self.mark(0)))
        if kx:
            plt.plot(kx, [static + v for v in kv], color=pal.line(1), marker=self.mark(1))
            items.append(("KV in use", pal.line(1), self.mark(1)))
        if weights:
            plt.horizontal_line(weights, color=pal.line(3))
            items.append(("weights", pal.line(3)))
        if pool:
            plt.horizontal_line(static + pool, color=pal.line(2))
            items.append(("KV pool", pal.line(2)))
        top = _finite(total) or max(used + [static + (pool or 0)] or [1.0])
        if total:
            plt.horizontal_line(top, color=pal.slo)
            items.append(("total", pal.slo))
        plt.ylim(0, top * 1.02 if top else 1)
        self.time_ticks(plt, mv, w)
        return self.legend(items)


class KvChart(TimeChart):
    TITLE = "KV cache usage %"

    def draw(self, plt: "Plot", mv: ModeView | None, w: int, h: int, pal: ChartPalette) -> str:
        if mv is None or not len(mv.series):
            self.empty(plt, "no /metrics yet")
            return ""
        xs, ys = self.view(mv, "kv_usage", self.buckets(w))
        if xs:
            plt.plot(xs, [y * 100 for y in ys], color=pal.line(2), marker=self.mark(0), fillx=False)
        plt.horizontal_line(95, color=pal.slo)
        plt.ylim(0, 100)
        self.time_ticks(plt, mv, w)
        last = mv.series.last("kv_usage")
        return f"now {last * 100:.1f}% · [{hexrgb(pal.slo)}]━[/] KV wall" if last is not None else ""


class TokChart(TimeChart):
    TITLE = "output tokens/s"

    def draw(self, plt: "Plot", mv: ModeView | None, w: int, h: int, pal: ChartPalette) -> str:
        if mv is None or not len(mv.series):
            self.empty(plt, "no /metrics yet")
            return ""
        # The server's counter rate is per wall second; the simulator's modelled rate is that
        # times its time scale — the table's tok/s (figures scaled back to modelled time).
        ts = time_scale(mv)
        xs, ys = self.view(mv, "gen_tok_s", self.buckets(w), how="mean")
        ys = [y * ts for y in ys]
        if xs:
            plt.plot(xs, ys, color=pal.line(0), marker=self.mark(0))
            top = max(ys) * 1.1 if max(ys) > 0 else 1
            plt.ylim(0, top)
            from kvtui.tui.ticks import nice_ticks

            yt, yl = nice_ticks(0, top, max(2, min(4, h // 3)))
            plt.yticks(yt, yl)
        self.time_ticks(plt, mv, w)
        last = self.now_tok_s(mv)
        return f"now {fmt_num(last)}" + (" (modelled)" if ts != 1.0 else "") if last is not None else ""

    def now_tok_s(self, mv: ModeView) -> float | None:
        """The latest output tok/s as the chart shows it (modelled for the simulator)."""
        t_max = self.state.t_max()
        if t_max is None:
            last = mv.series.last("gen_tok_s")
        else:
            shown = mv.series.values("gen_tok_s", t_max)
            last = shown[-1] if shown else None
        return None if last is None else last * time_scale(mv)


class QueueChart(TimeChart):
    TITLE = "requests: running / waiting / preempted"
    SHORT_TITLE = "requests"  # the legend names the series

    def draw(self, plt: "Plot", mv: ModeView | None, w: int, h: int, pal: ChartPalette) -> str:
        if mv is None or not len(mv.series):
            self.empty(plt, "no /metrics yet")
            return ""
        b = self.buckets(w)
        items: list[LegendItem] = []
        for i, (key, label) in enumerate((("running", "run"), ("waiting", "wait"), ("load", "target"))):
            xs, ys = self.view(mv, key, b)
            if xs:
                c = pal.line(i if key != "load" else 5)
                plt.plot(xs, ys, color=c, marker=self.mark(i))
                items.append((label, c, self.mark(i)))
        px, py = self.view(mv, "preempt", b)
        pts = [(x, y) for x, y in zip(px, py) if y and y > 0]
        if pts:
            plt.scatter([p[0] for p in pts], [p[1] for p in pts], color=pal.slo, marker="x")
            items.append(("preempt", pal.slo, "x"))
        self.time_ticks(plt, mv, w)
        # request counts are whole: whole ticks from 0 (plotext's own read "11 11.1 11.1" on a flat line)
        from kvtui.tui.ticks import nice_ticks

        top = max([y for key in ("running", "waiting", "load") for y in self.view(mv, key, b)[1]
                   if isinstance(y, (int, float)) and math.isfinite(y)] + [1.0])
        plt.ylim(0, top * 1.1)
        yt, yl = nice_ticks(0, top * 1.1, max(2, min(4, h // 3)), integer=True)
        plt.yticks(yt, yl)
        return self.legend(items)


# The latency charts (kvtui.tui.latency_charts) and the sparklines (kvtui.tui.sparks) build on this
# module and are imported from their own: the arrows point one way.
__all__ = ["Chart", "MemoryChart", "KvChart", "TokChart", "QueueChart", "matrix_strips", "fmt_num"]
