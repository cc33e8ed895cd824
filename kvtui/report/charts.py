"""Charts as text: horizontal bars and sparklines, for Markdown reports and terminals."""

from __future__ import annotations

import math
from typing import Any, Sequence

_EIGHTHS = " ▏▎▍▌▋▊▉"
_SPARK = "▁▂▃▄▅▆▇█"


def bar(value: float | None, vmax: float, width: int) -> str:
    """A bar of `width` cells at full scale, in eighths of a cell."""
    if value is None or not isinstance(value, (int, float)) or vmax <= 0 or math.isnan(value):
        return ""
    if math.isinf(value):
        return "█" * width + "▶"
    cells = max(0.0, min(1.0, value / vmax)) * width
    full = int(cells)
    rest = int(round((cells - full) * 8))
    if rest == 8:
        full, rest = full + 1, 0
    return "█" * full + (_EIGHTHS[rest] if rest else "")


def bars(items: Sequence[tuple[str, float | None, str]], width: int = 40, marker: float | None = None,
         vmax: float | None = None) -> str:
    """One line per (label, value, annotation); `marker` draws a │ at that value (e.g. an SLO limit)."""
    finite = [v for _, v, _ in items if isinstance(v, (int, float)) and math.isfinite(v)]
    top = vmax or max(finite + ([marker] if marker else []) + [0.0])
    if top <= 0:
        top = 1.0
    if marker:
        top = max(top, marker * 1.05)
    lw = max((len(lbl) for lbl, _, _ in items), default=0)
    pos = int(round(marker / top * width)) if marker else None
    lines = []
    for lbl, v, note in items:
        b = bar(v, top, width) if v is not None else ""
        cells = list(b.ljust(width + (1 if b.endswith("▶") else 0)))
        if pos is not None and pos < len(cells) and cells[pos] == " ":
            cells[pos] = "│"
        lines.append(f"{lbl.ljust(lw)}  {''.join(cells)}  {note}".rstrip())
    return "\n".join(lines)


def sparkline(values: Sequence[float | None], width: int = 60) -> str:
    """Values (gaps as None) squeezed into `width` cells, bucket maxima, ▁ … █ between min and max."""
    vals = [v if isinstance(v, (int, float)) and math.isfinite(v) else None for v in values]
    if not any(v is not None for v in vals):
        return ""
    if len(vals) > width:
        n = len(vals)
        buckets = []
        for i in range(width):
            chunk = [v for v in vals[i * n // width:(i + 1) * n // width] if v is not None]
            buckets.append(max(chunk) if chunk else None)
        vals = buckets
    finite = [v for v in vals if v is not None]
    lo, hi = min(finite), max(finite)
    span = hi - lo
    out = []
    for v in vals:
        if v is None:
            out.append(" ")
        elif span <= 0:
            out.append(_SPARK[len(_SPARK) // 2] if hi else _SPARK[0])
        else:
            out.append(_SPARK[min(len(_SPARK) - 1, int((v - lo) / span * (len(_SPARK) - 1) + 0.5))])
    return "".join(out)


def series_lines(series: list[dict[str, Any]], keys: Sequence[tuple[str, str, str]], width: int = 60) -> str:
    """Sparklines of a mode's time series: (key, title, unit) each; min and max beside the line."""
    lines = []
    tw = max((len(t) for _, t, _ in keys), default=0)
    for key, title, unit in keys:
        vals = [r.get(key) for r in series]
        line = sparkline(vals, width)
        if not line:
            continue
        finite = [v for v in vals if isinstance(v, (int, float)) and math.isfinite(v)]
        lo, hi = min(finite), max(finite)
        if unit == "%":
            f = (lambda x: f"{x:.0%}") if hi >= 0.1 else (lambda x: f"{x:.2%}")
        else:
            f = lambda x: f"{x:,.3g}{unit}"  # noqa: E731
        lines.append(f"{title.ljust(tw)}  {line}  " + (f"{f(lo)} (flat)" if lo == hi else f"{f(lo)} … {f(hi)}"))
    return "\n".join(lines)
