"""How the TUI writes one cell's number: milliseconds, loads and shares ("—" for none, "∞" for a failure)."""

from __future__ import annotations

import math
from typing import Any

from kvtui.io.snapshot.document import Document


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


def as_stored(doc: Document, key: str, absent: str = "—") -> Any:
    """A value written through as the document keeps it (a null shows as None, as it always did;
    a value of another type than the schema's as itself), `absent` where the key is missing."""
    return doc.stored(key) if doc.has(key) else absent
