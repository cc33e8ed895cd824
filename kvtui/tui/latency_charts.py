"""A latency metric's p50/p95 per step against the load: the SLO as a line (the axis clipped at 3×
its target so the line stays visible), the best load and the KV-bound prediction marked apart.
Steps are read through the snapshot schema's typed `Step`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal, Sequence

from kvtui.io.snapshot.schema import Step
from kvtui.tui.charts import Chart, LegendItem, _finite
from kvtui.tui.modeview import ModeView
from kvtui.tui.predicted import draw_predicted, prediction_key
from kvtui.tui.themes import ChartPalette

if TYPE_CHECKING:
    from textual_plotext.plot import Plot


def _points(steps: Sequence[Step], metric: str, pct: str) -> list[tuple[Any, float]]:
    """(load, the step's `metric` latency at `pct`) of each step where that figure is a finite number."""
    out = []
    for s in steps:
        d = s.latency(metric)
        y = _finite(d.by_key(pct)) if d is not None else None
        if y is not None:
            out.append((s.load, y))
    return out


class LatencyChart(Chart):
    """A latency metric's p50/p95 per step against the load, the SLO as a line, the best load marked."""

    METRIC = "ttft"
    STALLS = False
    SUFFIX = ""

    def data_key(self) -> Any:
        st = self.state
        mv = self.viewed()
        return (mv.name if mv else None, st.steps_version, st.slo_version, st.cursor, st.best(mv) if mv else None,
                mv.predicted_kv if mv else None, prediction_key(mv))

    def full_title(self) -> str:
        return f"{self.TITLE} vs {self.state.load_word}{self.SUFFIX}"

    def short_title(self) -> str:  # the suffix goes first where it would be cut
        return f"{self.TITLE} vs {self.state.load_word}"

    def update_if_changed(self) -> bool:
        from kvtui.tui.legend import fit_title

        title = fit_title(self.full_title(), self.short_title(), self.size.width or 200)
        if self.border_title != title:
            self.border_title = title
        return super().update_if_changed()

    def draw(self, plt: Plot, mv: ModeView | None, w: int, h: int, pal: ChartPalette) -> str:
        st = self.state
        steps = [Step.of(s) for s in st.steps_of(mv)] if mv else []
        if not steps:
            self.empty(plt, "no step finished yet")
            return ""
        m = self.METRIC
        pts = sorted(steps, key=lambda s: s.load or 0)
        # One point per load on the line: the latest step there (a repeat overrides, as in the search);
        # earlier repeats stay as dots.
        latest: dict[float, Step] = {}
        for s in steps:
            if s.load is not None:
                latest[s.load] = s
        line_pts = [latest[x] for x in sorted(latest)]
        repeats = [s for s in steps if s.load is not None and latest.get(s.load) is not s]
        items: list[LegendItem] = []
        ymax = 0.0
        series = [("p50", pal.line(0)), ("p95", pal.line(1))]
        for k, (pct, color) in enumerate(series):
            xy = _points(line_pts, m, pct)
            if xy:
                plt.plot([p[0] for p in xy], [p[1] for p in xy], color=color, marker=self.mark(k))
                items.append((pct, color, self.mark(k)))
                ymax = max(ymax, max(p[1] for p in xy))
            rxy = _points(repeats, m, pct)
            if rxy:
                plt.scatter([p[0] for p in rxy], [p[1] for p in rxy], color=color, marker="•")
                ymax = max(ymax, max(p[1] for p in rxy))
        if self.STALLS:
            xy = _points(pts, "itl", "p99")
            if xy:
                plt.scatter([p[0] for p in xy], [p[1] for p in xy], color=pal.line(4), marker="x")
                items.append(("ITL p99", pal.line(4), "x"))
                ymax = max(ymax, max(p[1] for p in xy))
        metrics = (m, "itl") if self.STALLS else (m,)
        for metric, pct, limit in st.shown_slo.targets():
            if metric in metrics:
                plt.horizontal_line(limit, color=pal.slo)
                items.append((f"SLO {limit:g}", pal.slo))
                ymax = max(ymax, limit)
        best = st.best(mv)
        loads = [s.load for s in pts if s.load is not None]
        lo, hi = min(loads), max(loads)
        pred = mv.predicted_kv if mv else None
        if pred and lo * 0.5 <= pred <= hi * 1.5:  # the KV-bound prediction beside the best load
            lo, hi = min(lo, pred), max(hi, pred)
        whole = all(float(x).is_integer() for x in loads)  # a concurrency: whole ticks ("11 11.1 11.1" was not)
        if lo == hi or (whole and hi - lo < 2):
            lo, hi = math.floor(lo) - 1, math.ceil(hi) + 1
        # A latency tail far above the SLO would squash its line at the bottom: clip at 3× the target.
        limits = [limit for metric, _p, limit in st.shown_slo.targets() if metric in metrics]
        clipped = bool(limits) and ymax > 3 * max(limits)
        if clipped:
            ymax = 3 * max(limits)
            items.append((f"clipped {ymax:g}", pal.slo))
        from kvtui.tui.ticks import nice_ticks

        plt.xlim(lo, hi)
        plt.ylim(0, ymax * 1.15 if ymax > 0 else 1)
        xt, xl = nice_ticks(lo, hi, max(2, min(5, w // 12)), integer=whole)
        plt.xticks(xt, xl)
        yt, yl = nice_ticks(0, ymax * 1.15 if ymax > 0 else 1, max(2, min(4, h // 3)))
        plt.yticks(yt, yl)
        top = ymax * 1.1 if ymax else 1
        items += draw_predicted(plt, mv, m, lo, hi, pal.line(3), top)
        near = best is not None and pred is not None and abs(pred - best) < (hi - lo) * 0.2
        def align(x: float) -> Literal["left", "center", "right"]:
            """A label at the axis' end grows inwards (centred there, its first letters fell off the plot)."""
            frac = (x - lo) / (hi - lo)
            return "left" if frac < 0.15 else "right" if frac > 0.85 else "center"

        if pred and lo <= pred <= hi:
            # Two labels closer than a fifth of the axis would merge ("111"): the KV one goes lower.
            plt.vertical_line(pred, color=pal.line(5))
            plt.text(f"KV≈{pred:.0f}", pred, top * (0.8 if near else 1.0), color=pal.line(5), alignment=align(pred))
            items.append(("KV-bound", pal.line(5)))
        if best is not None:
            plt.vertical_line(best, color=pal.best)
            plt.text(f"★{best:g}", best, top, color=pal.best, alignment=align(best))
        return self.legend(items)


class TtftChart(LatencyChart):
    TITLE = "TTFT ms"
    METRIC = "ttft"


class TpotChart(LatencyChart):
    TITLE = "TPOT ms"
    SUFFIX = " · ITL p99 = stalls"
    METRIC = "tpot"
    STALLS = True
