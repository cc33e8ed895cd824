"""The footer: every key the view offers where they fit, and where they do not, the essential ones.

Textual's footer lays its keys out in a row and cuts whatever passes the terminal's edge, so at 80
columns a live run lost `a`, `m` and `^p`. Here the keys are chosen before they are laid out: all of
them with their full labels if they fit; else short labels; else the least important go first
(`FOOTER_RANK`, by action) until the rest fit. A key left out still acts, and `?` and `^p` list it.
The keys a view offers are still Textual's (`check_action`): an ended run offers no pause, stop
or skip, whatever the width.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

# Kept first to last: quit, the palette (it reaches every key left out), the answer and the modes,
# a live run's controls, then the rest. An action not named here goes before `cycle_theme`.
FOOTER_RANK = ("quit", "command_palette", "show_answer", "dashboard", "watch_live", "jump", "cycle_mode", "compare",
               "toggle_pause", "stop_run", "skip_mode", "help", "replay_move", "dismiss_none", "start", "apply",
               "edit_slo", "export", "cycle_theme")
# Shorter labels for narrow terminals (by full label).
SHORT = {"skip mode": "skip", "jump to the answer": "jump"}
WIDE = 100  # from here the palette key docks right, Textual's way


@dataclass(frozen=True)
class Item:
    key: str
    key_display: str
    label: str
    action: str
    enabled: bool
    tooltip: str

    def cells(self, short: bool) -> int:
        """Cells in the compact footer: key, a space, the label, a margin of one."""
        return len(self.key_display) + 1 + len(SHORT.get(self.label, self.label) if short else self.label) + 1


def _rank(action: str) -> int:
    name = action.rsplit(".", 1)[-1].split("(", 1)[0]
    if name in FOOTER_RANK:
        return FOOTER_RANK.index(name)
    return FOOTER_RANK.index("cycle_theme") - 1  # unnamed: with SLO and export, before the theme


def choose(items: list[Item], width: int) -> tuple[list[Item], bool]:
    """The items that fit `width` cells (in their own order) and whether they take short labels."""
    if sum(i.cells(False) for i in items) <= width:
        return list(items), False
    kept = list(items)
    # Least important first out; among equals the later one (the table's order is its own priority).
    order = sorted(range(len(items)), key=lambda n: (_rank(items[n].action), n), reverse=True)
    for n in order:
        if sum(i.cells(True) for i in kept) <= width or len(kept) <= 1:
            break
        kept.remove(items[n])
    return kept, True


class KeyFooter(Footer):
    """Textual's footer, with the keys chosen for the width (see the module's note)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._laid_out_for = 0

    def _items(self) -> list[Item]:
        items: list[Item] = []
        seen: set[str] = set()
        for _node, binding, enabled, tooltip in self.screen.active_bindings.values():
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)  # one key per action (Textual's footer shows the first)
            items.append(Item(binding.key, self.app.get_key_display(binding), binding.description, binding.action,
                              enabled, tooltip))
        return items

    def _palette(self) -> Item | None:
        if not self.app.ENABLE_COMMAND_PALETTE:
            return None
        found = self.screen.active_bindings.get(self.app.COMMAND_PALETTE_BINDING)
        if found is None:
            return None
        _node, binding, enabled, _tooltip = found
        return Item(binding.key, self.app.get_key_display(binding), binding.description, binding.action, enabled,
                    binding.tooltip or binding.description)

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        width = self.app.size.width
        self._laid_out_for = width
        items = self._items()
        palette = self._palette()
        if palette is not None and width >= WIDE:
            room = width - palette.cells(False) - 1  # docked right behind a one-cell rule
            kept, short = choose(items, room)
        else:
            kept, short = choose(items + ([palette] if palette else []), width + 1)  # the last has no margin
        for it in kept:
            label = SHORT.get(it.label, it.label) if short else it.label
            yield FooterKey(it.key, it.key_display, label, it.action, disabled=not it.enabled,
                            tooltip=it.tooltip).data_bind(compact=Footer.compact)
        if palette is not None and width >= WIDE:
            yield FooterKey(palette.key, palette.key_display, palette.label, palette.action,
                            classes="-command-palette", disabled=not palette.enabled, tooltip=palette.tooltip)

    def on_resize(self) -> None:
        if self._bindings_ready and self.app.size.width != self._laid_out_for:
            self.call_after_refresh(self.recompose)

