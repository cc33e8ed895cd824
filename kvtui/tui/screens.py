"""The dashboard (live and replay). The setup form (setup_screen), the SLO editor (slo_form) and the
mode comparison (compare_screen) have modules of their own, imported from here too."""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Grid, Vertical
from textual.screen import Screen
from textual.widgets import Collapsible

from kvtui.tui.charts import KvChart, MemoryChart, QueueChart, TokChart
from kvtui.tui.compare_screen import CompareScreen  # noqa: F401 - imported from here by callers
from kvtui.tui.footer import KeyFooter
from kvtui.tui.keys import bindings
from kvtui.tui.latency_charts import TpotChart, TtftChart
from kvtui.tui.redraw import RedrawnOnChange, guarded
from kvtui.tui.replicas_panel import ReplicaPanel
from kvtui.tui.slo_form import SloScreen  # noqa: F401
from kvtui.tui.sparks import Spark
from kvtui.tui.state import RunState
from kvtui.tui.widgets import InfoHeader, LogPane, MemoryBar, StatusBar, StepSlider, StepTable

COMPACT_WIDTH = 100
COMPACT_HEIGHT = 30


class DashboardScreen(Screen):
    """The live dashboard; with a snapshot loaded, the same dashboard replays it."""

    # Shown in the footer only where they act (app.check_action / check_action): the run's
    # controls live, the step keys in a replay. The rest are in `?` and the palette.
    BINDINGS = bindings("dashboard")  # kvtui.tui.keys: the one key table (the help reads it too)

    def __init__(self, state: RunState, replay: bool = False):
        super().__init__()
        self.state = state
        self.replay = replay
        self.compact = False

    @property
    def kapp(self) -> Any:
        """The KvtuiApp (typed loosely: the screens never import the app module back)."""
        return self.app

    def compose(self) -> ComposeResult:
        st = self.state
        pal = lambda: self.kapp.palette  # noqa: E731
        yield InfoHeader(st, id="header")
        yield StatusBar(st, id="status")
        yield MemoryBar(st, pal, id="membar")
        yield ReplicaPanel(st, pal, id="replicas")
        with Grid(id="charts"):
            yield MemoryChart(st, pal, id="chart-mem")
            yield KvChart(st, pal, id="chart-kv")
            yield TokChart(st, pal, id="chart-tok")
            yield TtftChart(st, pal, id="chart-ttft")
            yield TpotChart(st, pal, id="chart-tpot")
            yield QueueChart(st, pal, id="chart-queue")
        with Vertical(id="sparks"):
            yield Spark(st, "KV %", "kv_usage", pal, scale=100, unit="%", fixed_max=100, color=2, id="spark-kv")
            yield Spark(st, "tok/s", "gen_tok_s", pal, how="mean", color=0, id="spark-tok")
            yield Spark(st, "running", "running", pal, color=1, id="spark-run")
            yield Spark(st, "TTFT p95", "step:ttft:p95", pal, unit="ms", color=3, id="spark-ttft")
            yield Spark(st, "TPOT p95", "step:tpot:p95", pal, unit="ms", color=4, id="spark-tpot")
        if self.replay:
            yield StepSlider(st, id="slider")
        yield StepTable(st, id="steps")
        with Collapsible(title="server log  (l)", collapsed=True, id="logbox"):
            yield LogPane(st, id="log")
        yield KeyFooter(compact=True)

    def on_mount(self) -> None:
        self._apply_layout()
        self.query_one(StepTable).focus()
        self.sync()

    def on_resize(self) -> None:
        self._apply_layout()
        self.sync()

    def _apply_layout(self) -> None:
        w, h = self.size.width, self.size.height
        compact = w < COMPACT_WIDTH or h < COMPACT_HEIGHT
        self.compact = compact
        self.set_class(compact, "-compact")
        self.set_class(h >= 44 and not compact, "-tall")
        self.app.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("replay_move", "replay_jump"):
            return self.replay
        return True

    def action_replay_move(self, delta: int) -> None:
        self.state.move_cursor(delta)
        self.sync()

    def action_replay_jump(self, to: int) -> None:
        self.state.move_cursor(to=to)
        self.sync()

    def action_toggle_log(self) -> None:
        box = self.query_one("#logbox", Collapsible)
        box.collapsed = not box.collapsed
        self.sync()

    def sync(self) -> None:
        """Bring every visible view up to date with the state (called from the app's timer)."""
        guarded(self, self._sync_views)

    def _sync_views(self) -> None:
        with self.app.batch_update():
            self.query_one(InfoHeader).sync()
            self.query_one(StatusBar).sync(self.kapp.control_flags())
            self.query_one(MemoryBar).sync()
            self.query_one(ReplicaPanel).sync()
            if self.compact:
                for sp in self.query(Spark):
                    sp.update_if_changed()
            else:
                for ch in self.query("#charts > *").results(RedrawnOnChange):  # every chart is one
                    ch.update_if_changed()
            self.query_one(StepTable).sync(self.compact)
            if self.replay:
                self.query_one(StepSlider).sync()
            if not self.query_one("#logbox", Collapsible).collapsed:
                self.query_one(LogPane).sync()

    @on(StepSlider.Moved)
    def _slider_moved(self, event: StepSlider.Moved) -> None:
        self.state.move_cursor(to=event.index)
        self.sync()

    @on(StepTable.RowSelected)
    def _row_selected(self, event: StepTable.RowSelected) -> None:
        """Replay: enter or a click on a row moves the slider there."""
        if self.replay and event.cursor_row >= 0 and event.cursor_row != self.state.cursor:
            self.state.move_cursor(to=event.cursor_row)
            self.sync()


# The setup form lives in its own module; callers import it from here too.
from kvtui.tui.setup_screen import SetupScreen  # noqa: E402,F401
