"""Energy per output token (J/token) from NVML power samples, per step and per mode.

vLLM's own `bench sweep` reports energy per token; kvtui has the power in its telemetry rows
(`gpus[].power_w`, sampled every ~0.5 s). A step's energy per output token is the mean power
(summed over the mode's GPUs) over the samples of its measurement window, divided by the
step's output tok/s. The simulator draws no power: no figure there, never an estimate.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from kvtui.io.snapshot.schema import Comparison, ComparisonRow, Mode, Run, Step


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def row_power_w(row: dict[str, Any]) -> float | None:
    """The row's power over all GPUs (W); None unless every GPU reported one."""
    gpus = row.get("gpus") or []
    vals = [_num(g.get("power_w")) for g in gpus if isinstance(g, dict)]
    known = [v for v in vals if v is not None]
    if not vals or len(known) < len(vals):
        return None
    return sum(known)


def _step_power_w(mode: Mode, step: Step) -> float | None:
    """Mean power over the step's window rows (its load, phase window, within its run-relative times)."""
    lo, hi = _num(step.t_rel_start), _num(step.t_rel_end)
    vals = []
    for row in mode.series or []:
        if not isinstance(row, dict) or row.get("phase") not in (None, "window"):
            continue
        t = _num(row.get("t"))
        if t is None or lo is None or hi is None or not lo <= t <= hi:
            continue
        if step.load is not None and row.get("load") is not None and row.get("load") != step.load:
            continue
        p = row_power_w(row)
        if p is not None:
            vals.append(p)
    return sum(vals) / len(vals) if vals else None


def step_j_per_token(mode: dict[str, Any], step: dict[str, Any]) -> float | None:
    """Joules per output token in the step's window (power / output tok/s)."""
    return _step_j_per_token(Mode.view(mode), Step.view(step))


def _step_j_per_token(mode: Mode, step: Step) -> float | None:
    p = _step_power_w(mode, step)
    tok = _num(step.output_tok_s)
    if p is None or not tok:
        return None
    return p / tok


def mode_j_per_token(mode: Mode | Mapping[str, Any], load: float | None) -> float | None:
    """A mode's J/token at `load` (the fastest load meeting the SLO): the mean over its passing steps there."""
    if load is None:
        return None
    m = Mode.of(mode)
    vals = [_step_j_per_token(m, s) for s in m.all_steps if s.load == load and s.passed]
    known = [v for v in vals if v is not None]
    return round(sum(known) / len(known), 4) if known else None


def add_energy(doc: dict[str, Any], comp: dict[str, Any]) -> dict[str, Any]:
    """Put `j_per_token_out` (and its Δ against the baseline) on each comparison row, in place."""
    by_name = {m.name: m for m in Run.view(doc).all_modes}
    rows: list[dict[str, Any]] = comp.get("rows") or []  # written to: the comparison's own row dicts
    j: list[float | None] = []
    for r in rows:
        row = ComparisonRow.view(r)
        m = by_name.get(row.mode)
        load = row.peak_load if row.peak_load is not None else row.best
        r["j_per_token_out"] = mode_j_per_token(m, load) if m else None
        j.append(r["j_per_token_out"])
    baseline = Comparison.view(comp).baseline
    base = next((x for x, r in zip(j, rows) if ComparisonRow.view(r).mode == baseline), None)
    for r, x in zip(rows, j):
        r["energy_change"] = energy_change(x, base)
    return comp


def energy_change(j: float | None, ref: float | None) -> float | None:
    """J/token against a reference row's: j ÷ ref − 1 (None where either has no figure)."""
    return round(j / ref - 1, 4) if j is not None and ref else None
