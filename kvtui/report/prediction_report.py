"""The prediction against what was measured, as text: per mode the predicted knee, the measured
one, the error, how many verdicts came out as predicted, the figures' mean errors, and which
calibration predicted (SIMULATED). Markdown report, replay's plain answer and diff use it.

Only modes with a `prediction` show up: a snapshot without one renders as before, byte for byte.
"""

from __future__ import annotations

from typing import Any, Mapping

from kvtui.io.snapshot.schema import Mode, Prediction, PredictionError, Run, Step
from kvtui.report.text import ModeLike, StepLike, fmt, fmt_load, table

HEADERS = ["mode", "predicted knee", "measured knee", "error", "verdicts as predicted", "TPOT p95 err",
           "TTFT p95 err", "out tok/s err", "refits", "calibration (SIMULATED)"]


def _pct(x: Any) -> str:
    return "—" if x is None else f"{x * 100:+.0f} %"


def _predicted(doc: Mapping[str, Any] | Run) -> list[Mode]:
    """The modes with a prediction."""
    return [m for m in Run.of(doc).all_modes if m.prediction is not None]


def has_prediction(doc: Mapping[str, Any] | Run) -> bool:
    return bool(_predicted(doc))


def row(mode: ModeLike) -> list[str]:
    m = Mode.of(mode)
    p = m.prediction or Prediction()
    name = str(m.name or "?")
    if not p.covered:
        return [name, f"none: {p.why or '—'}", fmt_load(m.best_concurrency), "—", "—", "—", "—", "—",
                "—", str(p.calibration or "—")]
    refits = p.refits or ()
    last = refits[-1] if refits else None
    mult = ", ".join(f"{k} {v:.2f}" for k, v in (last.multipliers or {}).items()) if last else ""
    e = p.error or PredictionError()
    agreed = f"{e.verdicts_agreed}/{e.verdicts}" if e.verdicts else "—"
    err = e.knee_error
    return [name, fmt_load(p.knee), fmt_load(e.knee_measured if e.has("knee_measured") else m.best_concurrency),
            "—" if err is None else f"{err:+g}", agreed, _pct(e.tpot_p95_ms_error_mean),
            _pct(e.ttft_p95_ms_error_mean), _pct(e.output_tok_s_error_mean),
            f"{len(refits)}" + (f" (last: {mult})" if mult else ""), str(p.calibration or "—")]


def prediction_table(doc: Mapping[str, Any] | Run, markdown: bool = False) -> str:
    return table(HEADERS, [row(m) for m in _predicted(doc)], markdown=markdown)


def markdown_section(doc: Mapping[str, Any] | Run) -> list[str]:
    if not has_prediction(doc):
        return []
    return ["## Predicted against measured", "",
            "Each mode's knee and curves were predicted by the simulator (SIMULATED) before its first step; the "
            "search was seeded there, and the simulator's factors refitted after each step. Errors: "
            "(predicted − measured) / measured, mean over the judged steps.", "",
            prediction_table(doc, markdown=True), ""]


def step_prediction(step: StepLike) -> str:
    """A step's predicted verdict and the figure that decided it, for the step tables."""
    p = Step.of(step).predicted
    if p is None:
        return "—"
    v = "pass" if p.passed else "fail"
    d = p.deciding
    if d is not None and d.target and d.value is not None:
        v += f" ({d.target.replace('_ms', '').replace('_', ' ')} {fmt(d.value, 0)})"
    elif p.tpot_p95_ms is not None:
        v += f" (tpot p95 {fmt(p.tpot_p95_ms, 0)})"
    return v + ("~" if p.interpolated else "")


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
