"""The prediction against what was measured, as text: per mode the predicted knee, the measured
one, the error, how many verdicts came out as predicted, the figures' mean errors, and which
calibration predicted (SIMULATED). Markdown report, replay's plain answer and diff use it.

Only modes with a `prediction` show up: a snapshot without one renders as before, byte for byte.
"""

from __future__ import annotations

from typing import Any

from kvtui.report.text import fmt, fmt_load, table

HEADERS = ["mode", "predicted knee", "measured knee", "error", "verdicts as predicted", "TPOT p95 err",
           "TTFT p95 err", "out tok/s err", "refits", "calibration (SIMULATED)"]


def _pct(x: Any) -> str:
    return "—" if x is None else f"{x * 100:+.0f} %"


def has_prediction(doc: dict[str, Any]) -> bool:
    return any(isinstance(m, dict) and isinstance(m.get("prediction"), dict) for m in doc.get("modes") or [])


def row(mode: dict[str, Any]) -> list[str]:
    p = mode.get("prediction") or {}
    name = str(mode.get("name") or "?")
    if not p.get("covered"):
        return [name, f"none: {p.get('why') or '—'}", fmt_load(mode.get("best_concurrency")), "—", "—", "—", "—", "—",
                "—", str(p.get("calibration") or "—")]
    e = p.get("error") or {}
    refits = p.get("refits") or []
    last = refits[-1] if refits else None
    mult = ", ".join(f"{k} {v:.2f}" for k, v in (last or {}).get("multipliers", {}).items()) if last else ""
    agreed = f"{e['verdicts_agreed']}/{e['verdicts']}" if e.get("verdicts") else "—"
    err = e.get("knee_error")
    return [name, fmt_load(p.get("knee")), fmt_load(e.get("knee_measured", mode.get("best_concurrency"))),
            "—" if err is None else f"{err:+g}", agreed, _pct(e.get("tpot_p95_ms_error_mean")),
            _pct(e.get("ttft_p95_ms_error_mean")), _pct(e.get("output_tok_s_error_mean")),
            f"{len(refits)}" + (f" (last: {mult})" if mult else ""), str(p.get("calibration") or "—")]


def prediction_table(doc: dict[str, Any], markdown: bool = False) -> str:
    modes = [m for m in doc.get("modes") or [] if isinstance(m, dict) and isinstance(m.get("prediction"), dict)]
    return table(HEADERS, [row(m) for m in modes], markdown=markdown)


def markdown_section(doc: dict[str, Any]) -> list[str]:
    if not has_prediction(doc):
        return []
    return ["## Predicted against measured", "",
            "Each mode's knee and curves were predicted by the simulator (SIMULATED) before its first step; the "
            "search was seeded there, and the simulator's factors refitted after each step. Errors: "
            "(predicted − measured) / measured, mean over the judged steps.", "",
            prediction_table(doc, markdown=True), ""]


def step_prediction(step: dict[str, Any]) -> str:
    """A step's predicted verdict and the figure that decided it, for the step tables."""
    p = step.get("predicted")
    if not isinstance(p, dict):
        return "—"
    v = "pass" if p.get("passed") else "fail"
    d = p.get("deciding") or {}
    if d.get("target") and d.get("value") is not None:
        v += f" ({d['target'].replace('_ms', '').replace('_', ' ')} {fmt(d['value'], 0)})"
    elif p.get("tpot_p95_ms") is not None:
        v += f" (tpot p95 {fmt(p['tpot_p95_ms'], 0)})"
    return v + ("~" if p.get("interpolated") else "")


def diff_lines(a: dict[str, Any], b: dict[str, Any], name_a: str, name_b: str,
               tabulate: Any = None) -> list[str]:
    """The diff's predicted-against-measured section; `tabulate(headers, rows)` writes each table
    (default: every column; `kvtui diff` to a terminal passes one that fits its width)."""
    if not (has_prediction(a) or has_prediction(b)):
        return []
    out = ["", "Predicted against measured (SIMULATED predictions):"]
    for nm, d in ((name_a, a), (name_b, b)):
        if has_prediction(d):
            modes = [m for m in d.get("modes") or [] if isinstance(m, dict) and isinstance(m.get("prediction"), dict)]
            out += [f"{nm}:", tabulate(HEADERS, [row(m) for m in modes]) if tabulate else prediction_table(d)]
        else:
            out.append(f"{nm}: no prediction")
    return out
