"""How the TUI writes one cell's number: milliseconds, loads and shares ("—" for none, "∞" for a failure)."""

from __future__ import annotations

import math
from typing import Any


def _f(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x)


def fmt_ms(x: Any) -> str:
    v = _f(x)
    if v is None:
        return "—"
    if math.isinf(v):
        return "∞"
    return f"{v:.1f}" if v < 100 else f"{v:,.0f}"


def fmt_load(x: Any) -> str:
    v = _f(x)
    return "—" if v is None else f"{v:g}"


def fmt_share(x: Any) -> str:
    v = _f(x)
    return "—" if v is None else f"{v:.0%}"
