"""A table that fits the terminal: the columns chosen by width and priority, empty ones dropped.

The comparison has 19 columns (~230 characters); at 80 or 120 columns it wrapped into noise. Here a
column whose every cell is empty ("—") goes first, then the least important ones (PRIORITY, last
first) until the rest fit `width`; the mode column always stays. A "×" or "Δ" column goes with the
figure it qualifies. The exports keep every column (`--wide` prints them all here too).
"""

from __future__ import annotations

from typing import Sequence

from kvtui.report.text import table

EMPTY = ("—", "", "-")
# The order columns are kept in, by header (most important first); others after, in table order.
PRIORITY = ("mode", "max conc @SLO", "max req/s @SLO", "max load @SLO", "out tok/s @SLO",
            "$/Mtok out", "KV tokens", "q-adj $/Mtok out", "quality", "J/tok out", "preempt @knee", "peak GPU GiB",
            "weights GiB", "$/Mtok in")
# Left out before any other column: the answer's "why" lines say in words what limited each mode's
# next step, so the table loses least without it ($/Mtok, a figure said nowhere else, stays longer).
DROP_FIRST = ("next step limit",)
QUALIFIERS = ("×", "Δ")  # a column that qualifies the figure to its left


def _groups(headers: Sequence[str]) -> list[list[int]]:
    """Column indexes, a figure with the ×/Δ columns after it as one group."""
    groups: list[list[int]] = []
    for i, h in enumerate(headers):
        if h in QUALIFIERS and groups:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def fit(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int,
        wide: bool = False) -> tuple[list[str], list[list[str]], list[str]]:
    """(headers, rows, dropped headers) that fit `width` characters (all of them when `wide`)."""
    cols = [i for i in range(len(headers)) if wide or i == 0 or any(str(r[i]) not in EMPTY for r in rows)]
    dropped: list[str] = []  # an empty column is not news: only those left out for width are named
    groups = [[i for i in g if i in cols] for g in _groups(headers)]
    groups = [g for g in groups if g and g[0] in cols]

    def rank(g: list[int]) -> int:
        h = headers[g[0]]
        if h in DROP_FIRST:
            return 10 * (len(PRIORITY) + len(headers))
        return PRIORITY.index(h) if h in PRIORITY else len(PRIORITY) + g[0]

    def width_of(gs: list[list[int]]) -> int:
        idx = [i for g in gs for i in g]
        return sum(max([len(headers[i])] + [len(str(r[i])) for r in rows]) for i in idx) + 2 * (len(idx) - 1)

    while not wide and len(groups) > 1 and width_of(groups) > width:
        worst = max(groups[1:], key=rank)
        groups.remove(worst)
        dropped.append(headers[worst[0]])
    keep = sorted(i for g in groups for i in g)
    return [headers[i] for i in keep], [[r[i] for i in keep] for r in rows], dropped


def fitted_table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, wide: bool = False) -> str:
    names: dict[str, str] = {}
    if not wide:  # long mode names took the width the figures need: shortened, spelled out below
        rows, names = short_first_column(rows, max(16, width // 4))
    h, r, dropped = fit(headers, rows, width, wide)
    out = table(h, r)
    if names:
        out += "\n" + _wrap("names: " + "; ".join(f"{k} = {v}" for k, v in names.items()), width)
    if dropped:
        note = "not shown: " + ", ".join(dropped) + " (--wide for every column; the exports have them all)"
        out += "\n" + _wrap(note, width)
    return out


def short_first_column(rows: Sequence[Sequence[str]], room: int) -> tuple[list[list[str]], dict[str, str]]:
    """The rows with each first cell (a mode's name; kvtui diff's " [A]" kept whole) at most `room`
    characters: its start and end around "…", no two alike; and {short: full} for those shortened."""
    def short(name: str, n: int) -> str:
        if n >= len(name):
            return name
        keep = (n - 1) * 3 // 5  # the end (fp8-kv, -awq, …) tells modes apart more often than the start
        return name[: n - 1 - keep] + "…" + name[-keep:]

    taken = {str(r[0]) for r in rows if len(str(r[0])) <= room}
    out: list[list[str]] = []
    names: dict[str, str] = {}
    for row in rows:
        cell = str(row[0])
        if len(cell) <= room:
            out.append(list(row))
            continue
        side = ""
        if cell.endswith("]") and " [" in cell:  # "mode [A]" and "mode [B]": one short name, the side kept
            cell, side = cell[: cell.rindex(" [")], cell[cell.rindex(" ["):]
        n = max(8, room)
        name = short(cell, n)
        while name in taken and names.get(name) != cell and n < len(cell):
            n += 1
            name = short(cell, n)
        taken.add(name)
        if name != cell:
            names[name] = cell
        out.append([name + side, *row[1:]])
    return out, names


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, max(20, width), break_long_words=False, break_on_hyphens=False))
