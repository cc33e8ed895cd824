"""Compact layouts (80×24): one line per series — label, sparkline downsampled to the width, value."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widget import Widget

from kvtui.tui.charts import SPARK, _finite, fmt_num, hexrgb, time_scale
from kvtui.tui.redraw import RedrawnOnChange
from kvtui.tui.series import downsample
from kvtui.tui.state import RunState
from kvtui.tui.themes import ChartPalette


class Spark(RedrawnOnChange, Widget):
    """One line: label, sparkline of the series (downsampled to the width), last value."""

    DEFAULT_CSS = """
    Spark { height: 1; width: 1fr; }
    """

    def __init__(self, state: RunState, label: str, source: str, palette: Any, *, how: str = "max",
                 scale: float = 1.0, unit: str = "", fixed_max: float | None = None, color: int = 0,
                 id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.state = state
        self.label = label
        self.source = source  # a series column, or "step:<metric>:<pct>" for per-step values
        self.how = how
        self.scale = scale
        self.unit = unit
        self.fixed_max = fixed_max
        self._palette_getter = palette
        self.color = color

    def data_key(self) -> Any:
        st = self.state
        mv = st.viewed
        return (mv.name if mv else None, mv.series.version if mv else 0, st.steps_version, st.slo_version, st.cursor)

    def _values(self, width: int) -> list[float]:
        st = self.state
        mv = st.viewed
        if mv is None:
            return []
        if self.source.startswith("step:"):
            _, metric, pct = self.source.split(":")
            vals = [_finite((s.get(f"{metric}_ms") or {}).get(pct)) for s in st.steps_of(mv)]
            return [v for v in vals if v is not None][-width:]
        t_max = st.t_max()
        col = mv.series.cols.get(self.source) or []
        pairs = [(t, v) for t, v in zip(mv.series.t, col) if v is not None and (t_max is None or t <= t_max)]
        _, ys = downsample(pairs, width, self.how)
        scale = self.scale * (time_scale(mv) if self.source == "gen_tok_s" else 1.0)  # modelled, as the table
        return [y * scale for y in ys]

    def render(self):
        w = self.content_size.width
        label_w = 9
        val_w = 8
        spark_w = max(4, w - label_w - val_w - 2)
        vals = self._values(spark_w)
        pal: ChartPalette = self.palette
        t = Text(no_wrap=True, overflow="crop", end="")
        t.append(f"{self.label:<{label_w}}", style="bold")
        if vals:
            top = self.fixed_max if self.fixed_max else max(vals)
            top = top if top and top > 0 else 1.0
            chars = "".join(SPARK[min(7, max(0, int(v / top * 7.999)))] for v in vals)
            t.append(f"{chars:<{spark_w}}", style=hexrgb(pal.line(self.color)))
            t.append(f" {fmt_num(vals[-1], self.unit):>{val_w}}")
        else:
            t.append(f"{'·' * spark_w} {'—':>{val_w}}", style="dim")
        return t
