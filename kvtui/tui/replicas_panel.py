"""The per-replica panel: KV usage, running / waiting and preemptions of each replica (or of
each data-parallel engine of one server), one line each, from the mode's telemetry series.

Hidden when the mode has one server with one engine. In a replay it follows the step cursor
(the series are cut at the selected step's end), like the charts.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from kvtui.terminal import printable
from kvtui.tui.charts import hexrgb
from kvtui.tui.modeview import ModeView
from kvtui.tui.redraw import KeyedText
from kvtui.tui.replica_cols import column
from kvtui.tui.state import RunState

BAR = 10


class ReplicaPanel(KeyedText):
    DEFAULT_CSS = """
    ReplicaPanel { display: none; height: auto; max-height: 9; width: 1fr; padding: 0 1; }
    """

    def __init__(self, state: RunState, palette: Any, **kw: Any):
        super().__init__(state, **kw)
        self._palette = palette

    def data_key(self) -> Any:
        mv = self.state.viewed
        return (mv.name if mv else None, mv.series.version if mv else 0, self.state.cursor, self.app.theme)

    def show(self) -> None:
        mv = self.state.viewed
        self.display = bool(mv and mv.replica_names)
        if self.display:
            self.update(self.build(), layout=True)  # one line per replica: the height follows

    def _last(self, mv: ModeView, col: str) -> float | None:
        vals = mv.series.values(col, self.state.t_max())
        for v in reversed(vals):
            if v is not None:
                return v
        return None

    def build(self) -> Text:
        mv = self.state.viewed
        pal = self._palette()
        t = Text(no_wrap=True, overflow="ellipsis", end="")
        if mv is None:
            return t
        width = max(len(n) for n in mv.replica_names)
        for i, name in enumerate(mv.replica_names):
            if i:
                t.append("\n")
            t.append(f"{printable(name):<{width}} ", style="bold")
            if self._last(mv, column(name, "up")) == 0.0:
                t.append("DOWN", style="bold red")
                continue
            kv = self._last(mv, column(name, "kv_usage"))
            filled = int(round((kv or 0.0) * BAR))
            t.append("█" * filled, style=hexrgb(pal.line(1)))
            t.append("░" * (BAR - filled), style=hexrgb(pal.line(2)))
            t.append(f" KV {kv:5.0%}" if kv is not None else " KV    —")
            for label, key in (("run", "running"), ("wait", "waiting"), ("preempt", "preemptions")):
                v = self._last(mv, column(name, key))
                t.append(f"  {label} " + (f"{v:g}" if v is not None else "—"))
        return t
