"""What the app's one timer calls: each screen's `sync` (`redraw`), and on each chart and sparkline a
redraw only when the data changed.

A view names its data with `data_key()` (versions, cursor, size of what it reads); the timer
calls `update_if_changed()` on the visible views, and only a changed key costs a redraw.
The chart colours come from the app's theme through a getter (the theme can change live).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from rich.text import Text
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Static

from kvtui.tui.themes import ChartPalette

if TYPE_CHECKING:  # the mixin's host: what it calls (`refresh`) is checked against Widget's
    _Host = Widget
else:  # at run time the mixin is a plain class: the widget comes after it in each view's bases
    _Host = object


def guarded(screen: Screen[Any], draw: Callable[[], Any]) -> None:
    """Draw a screen unless it is still composing or already being torn down (the app exiting removes
    the children before the screen; CI once saw the answer screen's head not yet mounted): nothing to
    draw then, and the timer's next tick draws what is there."""
    if not screen.is_mounted:
        return
    try:
        draw()
    except NoMatches:
        return


def redraw(screen: Screen[Any]) -> None:
    """A screen's `sync`, as the app's timer calls it (`guarded`)."""
    guarded(screen, screen.sync)  # type: ignore[attr-defined]


class RedrawnOnChange(_Host):
    """Mixin of a Textual widget (it has `refresh()`): `data_key()` decides whether it redraws."""

    _key: Any = None
    _palette_getter: Callable[[], ChartPalette]

    def data_key(self) -> Any:
        raise NotImplementedError

    def update_if_changed(self) -> bool:
        key = self.data_key()
        if key != self._key:
            self._key = key
            self.refresh()
            return True
        return False

    @property
    def palette(self) -> ChartPalette:
        return self._palette_getter()


class KeyedText(Static):
    """A one-text panel (the header, the memory bar, the replicas): `sync()` rebuilds its text only
    when `data_key()` changed, so the dashboard's timer costs nothing while nothing moves."""

    def __init__(self, state: Any, **kw: Any):
        super().__init__("", **kw)
        self.state = state
        self._key: Any = None

    def data_key(self) -> Any:
        raise NotImplementedError

    def build(self) -> Text:
        raise NotImplementedError

    def sync(self) -> None:
        key = self.data_key()
        if key == self._key:
            return
        self._key = key
        self.show()

    def show(self) -> None:
        """Put the rebuilt text up (a panel whose height can change asks for a layout pass)."""
        self.update(self.build(), layout=False)
