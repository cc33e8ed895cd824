"""The simulator's prediction beside the measured points: the predicted curve and knee on the
latency charts, and the step table's "predicted" column (verdict and the figure deciding it).

Shown only for a mode that has a prediction (modes[].prediction), so nothing changes on screen
for runs and snapshots without one. The curve is the prediction as it stands now: after a refit
that re-predicted (kvtui.explore.refit), the refitted one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from kvtui.io.snapshot.schema import Prediction, Refit, Step
from kvtui.tui.charts import LegendItem, _finite
from kvtui.tui.modeview import ModeView
from kvtui.tui.themes import RGB

if TYPE_CHECKING:
    from textual_plotext.plot import Plot


def prediction_of(mv: ModeView | None) -> Prediction | Refit | None:
    """The mode's prediction as it stands now (`Prediction.now`: the latest refit that predicted
    again, else the prediction); None where it has none or it covers nothing."""
    p = mv.doc.prediction if mv is not None else None
    return p.now if p is not None else None


def prediction_key(mv: ModeView | None) -> Any:
    """What the charts redraw on: the prediction's identity and how many refits it has."""
    p = prediction_of(mv)
    if mv is None or p is None:
        return None
    return (p.knee, len(p.curve or ()), len((mv.doc.prediction or Prediction()).refits or ()))


def draw_predicted(plt: Plot, mv: ModeView | None, metric: str, lo: float, hi: float, color: RGB,
                   top: float) -> list[LegendItem]:
    """The predicted p95 of `metric` against the load (dotted) and the predicted knee; legend items."""
    p = prediction_of(mv)
    if not p:
        return []
    key = f"{metric}_p95_ms"
    xy: list[tuple[float, float]] = []
    for c in p.curve or ():
        y = _finite(c.by_key(key))
        if c.load is not None and lo <= c.load <= hi and y is not None:
            xy.append((c.load, y))
    items: list[LegendItem] = []
    if xy:
        plt.plot([q[0] for q in xy], [min(q[1], top) for q in xy], color=color, marker="·")
        items.append(("sim p95", color, "·"))
    knee = p.knee
    if knee is not None and lo <= knee <= hi:
        plt.vertical_line(knee, color=color)
        plt.text(f"sim {knee:g}", knee, top * 0.9, color=color, alignment="center")
        items.append(("predicted knee", color))
    return items


def has_prediction(mv: ModeView | None) -> bool:
    return prediction_of(mv) is not None


def predicted_cell(step: Step | Mapping[str, Any]) -> str:
    from kvtui.report.prediction_report import step_prediction

    return step_prediction(step)
