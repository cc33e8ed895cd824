"""Plain-text tables for terminals and Markdown (one formatter, two borders)."""

from __future__ import annotations

import math
from typing import Any, Sequence


def fmt(x: Any, digits: int = 0, unit: str = "") -> str:
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    if isinstance(x, (int, float)):
        return f"{x:,.{digits}f}{unit}"
    return str(x)


def fmt_x(r: float | None) -> str:
    return "—" if r is None else f"{r:.2f}×"


def fmt_pct(r: float | None) -> str:
    return "—" if r is None else f"{r:+.1%}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool = False) -> str:
    if markdown:
        out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(out)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("─" * w for w in widths)]
    out += ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    return "\n".join(out)


COMPARISON_HEADERS = (
    "mode", "max conc @SLO", "×", "out tok/s @SLO", "×", "peak GPU GiB", "weights GiB", "KV tokens", "×",
    "preempt @knee", "knee limit", "$/Mtok out", "Δ", "$/Mtok in", "Δ",
)


def comparison_rows(doc: dict[str, Any]) -> list[list[str]]:
    from kvtui.explore.evaluate import LIMIT_WORDS

    comp = doc.get("comparison") or {}
    rows = []
    for r in comp.get("rows", []):
        rows.append([
            r["mode"], fmt(r["best"]), fmt_x(r.get("best_x")), fmt(r["output_tok_s"]), fmt_x(r.get("tok_s_x")),
            fmt(r["peak_gpu_mem_gib"], 1), fmt(r["weights_gib"], 2), fmt(r["kv_tokens"]), fmt_x(r.get("kv_tokens_x")),
            fmt(r["preemptions_at_knee"]), LIMIT_WORDS.get(r.get("knee_limited_by") or "", r.get("knee_limited_by") or "—"),
            fmt(r["usd_per_mtok_out"], 3), fmt_pct(r.get("cost_out_change")),
            fmt(r["usd_per_mtok_in"], 4), fmt_pct(r.get("cost_in_change")),
        ])
    return rows


def labels(doc: dict[str, Any]) -> str:
    """The caveats that travel with every figure: engine, GPU, version, SIMULATED."""
    env = doc.get("environment", {})
    versions = sorted({(m.get("engine_info") or {}).get("version") or "?" for m in doc.get("modes", [])})
    parts = [f"engine {env.get('engine', '?')}", f"GPU {', '.join(env.get('gpu_names') or ['?'])}", f"version {', '.join(versions)}"]
    if env.get("simulated"):
        parts.append("SIMULATED")
    if any((m.get("engine_info") or {}).get("dummy_weights") for m in doc.get("modes", [])):
        parts.append("dummy weights")
    return " · ".join(parts)


def comparison_table(doc: dict[str, Any], markdown: bool = False) -> str:
    comp = doc.get("comparison") or {}
    head = f"Modes vs baseline {comp.get('baseline') or '—'} ({labels(doc)})"
    body = table(COMPARISON_HEADERS, comparison_rows(doc), markdown)
    note = f"\nnote: {comp['note']}" if comp.get("note") else ""
    return f"{head}\n{body}{note}"
