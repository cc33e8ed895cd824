"""Chart legends and titles that fit their border: shorter words, then fewer items, never a cut word.

A legend that does not fit its chart's width first takes each label's short form (the `?` help
lists them among the abbreviations), then drops whole items from the end and says how many went
("+2"); a title takes its short form. Textual would otherwise cut the border text mid-word
("SLO 150 ━ KV…").
"""

from __future__ import annotations

from rich.text import Text

# label (or its first word) → short form; each is explained in the `?` help (kvtui.tui.dialogs.ABBREVIATIONS)
SHORT = {
    "KV in use": "KV use", "weights": "w", "KV pool": "pool", "KV-bound": "KV≈", "ITL p99": "ITL",
    "preempt": "pre", "target": "tgt", "clipped": "clip", "total": "tot",
}
BORDER_MARGIN = 4  # the border's corners and the padding Textual keeps around a border text


def short_label(label: str) -> str:
    if label in SHORT:
        return SHORT[label]
    head, _, rest = label.partition(" ")
    return f"{SHORT[head]} {rest}" if rest and head in SHORT else label


def _item(label: str, color: str, mark: str) -> str:
    return f"[{color}]{mark}[/] {label}"


def cells(markup: str) -> int:
    return Text.from_markup(markup).cell_len


def fit_legend(items: list[tuple[str, str, str]], width: int) -> str:
    """(label, colour as #rrggbb, marker) items as one markup line of at most `width - BORDER_MARGIN` cells."""
    room = width - BORDER_MARGIN
    full = " ".join(_item(*it) for it in items)
    if cells(full) <= room:
        return full
    short = [(short_label(label), c, m) for label, c, m in items]
    for n in range(len(short), 0, -1):
        more = f" +{len(short) - n}" if n < len(short) else ""
        line = " ".join(_item(*it) for it in short[:n]) + more
        if cells(line) <= room:
            return line
    return ""


def fit_text(markup: str, width: int, sep: str = " · ") -> str:
    """A free legend ("now 41.5% · ━ KV wall"): whole parts between `sep` from the left, as many as fit."""
    room = width - BORDER_MARGIN
    parts = markup.split(sep)
    for n in range(len(parts), 0, -1):
        line = sep.join(parts[:n])
        if cells(line) <= room:
            return line
    return ""


def fit_title(full: str, short: str | None, width: int) -> str:
    """The title, or its short form where the full one would be cut."""
    if short is None or len(full) + BORDER_MARGIN <= width:
        return full
    return short
