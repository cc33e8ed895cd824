"""The last net under the TUI (terminal and web): no control or bidi character of a text reaches
the screen, whatever widget drew it. The documents and events are made visible where they enter
(`kvtui.terminal.visible_tree`); this catches what any other path would bring."""

from __future__ import annotations

from typing import Any

from kvtui.terminal import cell_safe, has_controls

_textual_guarded = False


def guard_textual() -> None:
    """Every strip Textual renders (terminal or web) carries no control of its text's own."""
    global _textual_guarded
    if _textual_guarded:
        return
    from textual.strip import Strip

    original = Strip.render

    def render(self: Strip, console: Any) -> str:
        if self._render_cache is None:
            segs = list(self._segments)
            if any(has_controls(seg.text) for seg in segs):
                from rich.segment import Segment

                self._segments = [Segment(cell_safe(s.text), s.style, s.control) for s in segs]
        return original(self, console)

    Strip.render = render  # type: ignore[method-assign]
    _textual_guarded = True
