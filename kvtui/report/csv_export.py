"""CSV of steps: one row per measured step of every mode, labels on every row.

Machine-readable on purpose: infinite latencies are written `inf` (Python's float() and
pandas read it), missing figures are empty cells, shares are 0–1 fractions.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from kvtui.report.compare import knee_steps

LABEL_COLUMNS = ("mode", "engine", "gpu", "version", "simulated", "dummy_weights", "mode_warnings")
STEP_COLUMNS = (
    "index", "load_kind", "load", "why", "passed", "limited_by", "at_knee", "requests", "errors", "error_rate",
    "output_tok_s", "input_tok_s", "total_tok_s", "request_s", "goodput", "goodput_req_s",
)
DIST_COLUMNS = tuple(f"{m}_ms_{k}" for m in ("ttft", "tpot", "itl", "e2e") for k in ("n", "mean", "p50", "p90", "p95", "p99"))
TAIL_COLUMNS = (
    "kv_cache_usage_max", "kv_cache_usage_mean", "preemptions", "running_max", "waiting_max", "prefix_cache_hit_rate",
    "gpu_mem_used_gib_max", "client_limited", "started_at", "duration_s", "window_s", "aborted",
)
COLUMNS = LABEL_COLUMNS + STEP_COLUMNS + DIST_COLUMNS + TAIL_COLUMNS


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if math.isnan(v):
            return ""
        return repr(v)
    if isinstance(v, (list, tuple)):
        return ";".join(str(x) for x in v)
    return str(v)


def step_records(doc: dict[str, Any]) -> list[dict[str, Any]]:
    env = doc.get("environment") or {}
    out = []
    for m in doc.get("modes", []):
        info = m.get("engine_info") or {}
        knee_ids = {id(s) for s in knee_steps(m)}
        labels = {
            "mode": m.get("name"),
            "engine": info.get("engine") or m.get("engine") or env.get("engine"),
            "gpu": ", ".join(info.get("gpu_names") or env.get("gpu_names") or []) or None,
            "version": info.get("version"),
            "simulated": bool(m.get("simulated") or info.get("simulated") or env.get("simulated")),
            "dummy_weights": bool(info.get("dummy_weights")),
            "mode_warnings": list((m.get("server") or {}).get("warnings") or []) or None,
        }
        for s in m.get("steps", []):
            row = dict(labels)
            for k in STEP_COLUMNS:
                row[k] = s.get(k)
            row["at_knee"] = id(s) in knee_ids
            for metric in ("ttft", "tpot", "itl", "e2e"):
                d = s.get(f"{metric}_ms") or {}
                for k in ("n", "mean", "p50", "p90", "p95", "p99"):
                    row[f"{metric}_ms_{k}"] = d.get(k)
            for k in TAIL_COLUMNS:
                row[k] = s.get(k)
            out.append(row)
    return out


def render_csv(doc: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for row in step_records(doc):
        w.writerow([_cell(row.get(c)) for c in COLUMNS])
    return buf.getvalue()
