"""The calibration file: what `kvtui calibrate` writes and `--calibration FILE` reads.

The same TOML the catalogue's own fit is (kvtui/data/calibration/*.toml, read by
kvtui.simulator.model.roofline): [meta] says what it was fitted on (GPU, vLLM, which snapshots),
[step] holds the efficiency factors, [fit] the fit's summary. A bad file is refused in one line
naming the file and the line or field.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

from kvtui.errors import UsageError
from kvtui.simulator.model.roofline import DEFAULT_CALIBRATION, Calibration

STEP_DICTS = ("weights_bw_eff", "gemm_eff", "kv_bw_eff")
STEP_SCALARS = ("attn_eff", "step_overhead_s", "seq_overhead_s", "mixed_overhead_s", "cpu_step_s", "cpu_seq_s",
                "frontend_s_per_request", "step_jitter")


def _bad(path: Path, what: str) -> UsageError:
    return UsageError(f"{path}: {what}")


def read_calibration(path: str | Path | None) -> Calibration:
    """The calibration in `path` (None: the catalogue's default fit), checked field by field."""
    p = Path(path) if path else DEFAULT_CALIBRATION
    from kvtui.errors import UsageError
    from kvtui.safeio import SCENARIO_CAP, read_bytes_file

    if not p.exists() and not p.is_symlink():
        raise _bad(p, "no such calibration file")
    try:  # a regular file, capped (a FIFO or /dev/zero: one line, kvtui.safeio)
        raw = read_bytes_file(p, "calibration", SCENARIO_CAP)
    except UsageError as e:
        raise _bad(p, str(e).split(": ", 1)[-1]) from None
    try:
        d = tomllib.loads(raw.decode("utf-8"))
    except RecursionError:  # tomllib is recursive: `a = [[[[…` past its depth is one line, not a traceback
        raise _bad(p, "nested too deep: not a calibration file") from None
    except UnicodeDecodeError:
        raise _bad(p, "not UTF-8 text: not a calibration file") from None
    except tomllib.TOMLDecodeError as e:
        raise _bad(p, f"not TOML: {str(e).splitlines()[0]}") from None
    step = d.get("step")
    if not isinstance(step, dict):
        raise _bad(p, "no [step] table: not a calibration file (kvtui calibrate writes one)")
    for k in STEP_DICTS:
        v = step.get(k)
        if v is None:
            continue
        if not isinstance(v, dict):
            raise _bad(p, f"step.{k} must be a table of format = factor, got {type(v).__name__}")
        for kk, vv in v.items():
            if isinstance(vv, bool) or not isinstance(vv, (int, float)) or not (0 < vv <= 1.5) or math.isnan(vv):
                raise _bad(p, f"step.{k}.{kk} must be an efficiency in (0, 1.5], got {vv!r}")
    for k in STEP_SCALARS:
        v = step.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0) or math.isinf(v):
            raise _bad(p, f"step.{k} must be a number ≥ 0, got {v!r}")
    meta = d.get("meta", {})
    if not isinstance(meta, dict):
        raise _bad(p, "meta must be a table")
    try:
        return Calibration.from_dict(d, name=str(meta.get("name") or p.stem))
    except (TypeError, ValueError, AttributeError) as e:
        raise _bad(p, f"a field has the wrong type: {e}") from None


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def calibration_toml(cal: Calibration, meta: dict[str, Any], fit: dict[str, Any] | None = None) -> str:
    """The file's text: base memory constants kept as they are, the step factors as fitted."""
    def tbl(x: dict[str, float]) -> str:
        return "{ " + ", ".join(f"{json.dumps(k)} = {_fmt(v)}" for k, v in x.items()) + " }"

    def val(v: Any) -> str:  # TOML: JSON's strings, numbers and lists are TOML; a dict is an inline table
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(str(k))} = {val(x)}" for k, x in v.items()) + " }"
        if isinstance(v, bool):
            return "true" if v else "false"
        return json.dumps(v)

    lines = ["# Simulator calibration written by `kvtui calibrate` (SIMULATED what-ifs on this GPU).",
             "# The step factors are fitted to the measured steps named in [meta]; memory constants are the base's.",
             "",
             "[meta]"]
    for k, v in meta.items():
        lines.append(f"{k} = {val(v)}")
    lines += ["", "[memory]",
              f"non_torch_gib = {_fmt(cal.non_torch_gib)}",
              f"weights_extra_gib = {_fmt(cal.weights_extra_gib)}",
              f"activation_scale = {_fmt(cal.activation_scale)}",
              f"cuda_graph_gib_per_layer = {tbl(cal.cuda_graph_gib_per_layer)}",
              f"cuda_graphs_in_budget = {'true' if cal.cuda_graphs_in_budget else 'false'}",
              f"nvml_overhead_gib = {_fmt(cal.nvml_overhead_gib)}", "", "[step]"]
    for k in STEP_DICTS:
        lines.append(f"{k} = {tbl(getattr(cal, k))}")
    for k in STEP_SCALARS:
        lines.append(f"{k} = {_fmt(getattr(cal, k))}")
    if fit:
        lines += ["", "[fit]"] + [f"{k} = {val(v)}" for k, v in fit.items()]
    return "\n".join(lines) + "\n"


def factors_dict(cal: Calibration) -> dict[str, Any]:
    """The step factors as plain data (the snapshot keeps them; `calibration_from_factors` reads them)."""
    out: dict[str, Any] = {k: {kk: round(float(vv), 6) for kk, vv in getattr(cal, k).items()} for k in STEP_DICTS}
    for k in STEP_SCALARS:
        out[k] = float(f"{getattr(cal, k):.6g}")
    return out


def calibration_from_factors(factors: dict[str, Any], base: Calibration, name: str) -> Calibration:
    """`base` with a snapshot's fitted step factors on top (unknown keys ignored)."""
    from kvtui.simulator.model.fit import copy_calibration

    cal = copy_calibration(base)
    for k in STEP_DICTS:
        v = factors.get(k)
        if isinstance(v, dict):
            cur = dict(getattr(cal, k))
            cur.update({kk: float(vv) for kk, vv in v.items() if isinstance(vv, (int, float))})
            setattr(cal, k, cur)
    for k in STEP_SCALARS:
        v = factors.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            setattr(cal, k, float(v))
    cal.name = name
    return cal
