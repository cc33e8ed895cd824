"""Map TOML key paths to line numbers, so every validation error can name its line.

tomllib gives values, not positions. This scanner follows table headers (`[a.b]`,
`[[modes]]`) and `key = value` lines, which is all a scenario file uses; a key written in
an inline table maps to the line of its table.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*((?:[A-Za-z0-9_\-]+|\"[^\"]*\"|'[^']*')"
                  r"(?:\s*\.\s*(?:[A-Za-z0-9_\-]+|\"[^\"]*\"|'[^']*'))*)\s*=")
_INLINE_KEY = re.compile(r"([A-Za-z0-9_\-]+)\s*=")


def _split_key(raw: str) -> list[str]:
    parts = re.findall(r"\"[^\"]*\"|'[^']*'|[A-Za-z0-9_\-]+", raw)
    return [p.strip("\"'") for p in parts]


class LineIndex:
    """`line(path)` → 1-based line of the deepest known prefix of `path` (0 if unknown)."""

    def __init__(self, text: str):
        self._lines: dict[tuple, int] = {}
        self._array_counts: dict[tuple, int] = {}
        table: tuple = ()
        in_multiline = None
        for no, line in enumerate(text.splitlines(), start=1):
            if in_multiline:
                if in_multiline in line:
                    in_multiline = None
                continue
            h = _HEADER.match(line)
            if h and not _KEY.match(line):
                keys = tuple(_split_key(h.group(2)))
                if h.group(1) == "[[":
                    idx = self._array_counts.get(keys, 0)
                    self._array_counts[keys] = idx + 1
                    table = keys + (idx,)
                    self._lines.setdefault(keys, no)  # the array itself starts at its first table
                else:
                    table = keys
                self._lines.setdefault(table, no)
                continue
            k = _KEY.match(line)
            if k:
                path = table + tuple(_split_key(k.group(1)))
                self._lines.setdefault(path, no)
                rest = line[k.end():]
                if rest.strip().startswith("{"):
                    for sub in _INLINE_KEY.findall(rest):
                        self._lines.setdefault(path + (sub,), no)
                value = rest.lstrip()
                for quote in ('"""', "'''"):
                    # a multi-line string opens here (not a quote inside a one-line string: x = "'''")
                    if value.startswith(quote) and value.count(quote) == 1:
                        in_multiline = quote

    def line(self, path: tuple) -> int:
        p = tuple(path)
        while p:
            if p in self._lines:
                return self._lines[p]
            p = p[:-1]
        return 0

    # A value given on the command line (`--set ramp.max=8.5`) is reported there, not at the
    # file's line of the key it replaced (that line holds another value).
    def set_by_override(self, path: tuple, text: str) -> None:
        self._overrides = getattr(self, "_overrides", {})
        self._overrides[tuple(int(x) if isinstance(x, str) and x.isdigit() else x for x in path)] = text

    def override(self, path: tuple) -> str | None:
        """The `--set` that gave `path` (or a table above it) its value, or None."""
        found = getattr(self, "_overrides", {})
        p = tuple(path)
        while p:
            if p in found:
                return found[p]
            p = p[:-1]
        return None
