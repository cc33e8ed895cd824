"""The live view of `kvtui run --cluster` (without --headless): a row per lane, and the lanes' lines.

Every lane at once, as kvtui.cluster.view.LanesView has them: its mode, state (queued, running,
retrying, done, lost, stopped), node, host, GPU, try, steps and its last step's figures, and its
knee once the mode is done. The lanes run in a worker thread (kvtui.cluster.driver.ClusterRun);
Ctrl-C or q asks every lane to stop. When every lane has ended the app closes and the lanes are
joined in the terminal, where the answer is printed as a headless run's.
"""

from __future__ import annotations

import threading
from typing import Any

from textual.app import App, ComposeResult
from textual.widgets import DataTable, Footer, RichLog, Static

from kvtui.cluster.view import COLUMNS, WIDTHS, LanesView


class ClusterApp(App):
    CSS = """
    #cluster-title { height: auto; padding: 0 1; }
    #lanes { height: auto; max-height: 50%; }
    #lane-log { height: 1fr; border-top: solid $accent; }
    """
    BINDINGS = [("ctrl+c", "stop", "stop every lane"), ("q", "stop", "stop every lane")]

    def __init__(self, view: LanesView, crun: Any, title: str, auto_exit: bool = True):
        super().__init__()
        self.view, self.crun, self.heading, self.auto_exit = view, crun, title, auto_exit
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self.view.on_line = self._line
        self.wall_s: float | None = None
        self.failure: BaseException | None = None
        self.done = False
        self.follower = threading.Thread(target=self._follow, name="kvtui-cluster", daemon=True)

    def _line(self, text: str) -> None:  # from the lanes' thread
        with self._lock:
            self._lines.append(text)

    def compose(self) -> ComposeResult:
        yield Static(self.heading, id="cluster-title")
        yield DataTable(id="lanes", cursor_type="row", zebra_stripes=True)
        yield RichLog(id="lane-log", max_lines=2000, wrap=False, markup=False)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#lanes", DataTable)
        for col, width in zip(COLUMNS, WIDTHS):
            table.add_column(col, key=col, width=width)
        for cells in self.view.table():
            table.add_row(*cells, key=cells[0])
        self.set_interval(0.25, self.redraw)
        self.follower.start()

    def _follow(self) -> None:
        try:
            self.wall_s = self.crun.run()
        except BaseException as e:  # shown, and raised again by the command after the app closed
            self.failure = e
        finally:
            try:
                self.call_from_thread(self._finished)
            except Exception:  # the app is already gone
                self.done = True

    def _finished(self) -> None:
        self.done = True
        self.redraw()
        self.query_one("#cluster-title", Static).update(f"{self.heading}\nevery lane ended: joining them…")
        if self.auto_exit:
            self.exit(self.wall_s)

    def redraw(self) -> None:
        with self._lock:
            lines, self._lines = self._lines, []
        log = self.query_one("#lane-log", RichLog)
        for line in lines:
            log.write(line)
        if not self.view.changed:
            return
        self.view.changed = False
        table = self.query_one("#lanes", DataTable)
        for cells in self.view.table():
            for col, value in zip(COLUMNS, cells):
                table.update_cell(cells[0], col, value)

    def action_stop(self) -> None:
        self.crun.stop("stopped from the TUI")
        self.query_one("#cluster-title", Static).update(
            f"{self.heading}\nstopping: every lane stops its server and sends back what it measured…")
