"""Theme files (shipped kvtui/data/themes/*.toml and the user's <user dir>/themes/*.toml) turned into \
Textual `Theme`s, plus the colours charts use.

A theme file holds the fields of `textual.theme.Theme` (name, dark, primary, …, a
`[variables]` table) and an optional `[chart]` table: `lines` (plot line colours in order
of use), `slo` (the SLO line) and `best` (the best-concurrency marker). Charts follow
the app's theme: their background is the theme's surface and their lines come from here.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from textual.color import Color
from textual.theme import BUILTIN_THEMES, Theme

DEFAULT_THEME = "kvtui-dark"
RGB = tuple[int, int, int]


@dataclass
class ChartPalette:
    lines: list[RGB] = field(default_factory=list)
    slo: RGB = (239, 111, 108)
    best: RGB = (92, 201, 139)

    def line(self, i: int) -> RGB:
        return self.lines[i % len(self.lines)] if self.lines else (200, 200, 200)


def _rgb(value: str | None, default: RGB) -> RGB:
    if not value:
        return default
    try:
        return Color.parse(value).rgb
    except Exception:
        return default


def palette_for(theme: Theme, chart: dict[str, Any] | None = None) -> ChartPalette:
    """The chart colours of a theme: its [chart] table, else derived from its colours."""
    chart = chart or {}
    base = [theme.primary, theme.accent, theme.success, theme.secondary, theme.warning, theme.error]
    lines = [_rgb(c, (200, 200, 200)) for c in (chart.get("lines") or [c for c in base if c])]
    return ChartPalette(lines=lines, slo=_rgb(chart.get("slo") or theme.error, (239, 111, 108)),
                        best=_rgb(chart.get("best") or theme.success, (92, 201, 139)))


_THEME_FIELDS = {f.name for f in fields(Theme)}


def theme_from_dict(d: dict[str, Any], source: str = "<theme>") -> tuple[Theme, ChartPalette]:
    """One theme file's content → (Theme, ChartPalette). Raises ValueError naming the problem."""
    if not isinstance(d.get("name"), str) or not d["name"]:
        raise ValueError(f"{source}: a theme needs a name")
    if not isinstance(d.get("primary"), str):
        raise ValueError(f"{source}: a theme needs a primary colour")
    unknown = [k for k in d if k not in _THEME_FIELDS and k != "chart"]
    if unknown:
        raise ValueError(f"{source}: unknown key(s) {', '.join(unknown)}")
    kwargs = {k: v for k, v in d.items() if k in _THEME_FIELDS}
    for k, v in kwargs.items():
        if k in ("primary", "secondary", "warning", "error", "success", "accent", "foreground", "background",
                 "surface", "panel", "boost") and v is not None:
            try:
                Color.parse(v)
            except Exception:
                raise ValueError(f"{source}: {k} = {v!r} is not a colour")
    theme = Theme(**kwargs)
    return theme, palette_for(theme, d.get("chart"))


def load_themes(directory: Path | None = None) -> tuple[dict[str, tuple[Theme, ChartPalette]], list[str]]:
    """Every *.toml theme in `directory` (default: the shipped ones, then the user's, see
    kvtui/paths.py); problems come back as messages."""
    from kvtui import paths

    files = paths.all_files("themes") if directory is None else (
        sorted(Path(directory).glob("*.toml")) if Path(directory).is_dir() else [])
    out: dict[str, tuple[Theme, ChartPalette]] = {}
    problems: list[str] = []
    for p in files:
        try:
            d = tomllib.loads(p.read_text(encoding="utf-8"))
            theme, pal = theme_from_dict(d, str(p))
        except (OSError, tomllib.TOMLDecodeError, ValueError, TypeError) as e:
            problems.append(f"theme {p.name}: {e}")
            continue
        out[theme.name] = (theme, pal)
    return out, problems


def builtin_palette(name: str) -> ChartPalette | None:
    t = BUILTIN_THEMES.get(name)
    return palette_for(t) if t else None
