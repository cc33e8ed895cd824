"""CSV of steps: one row per measured step of every mode, labels on every row.

Machine-readable on purpose: infinite latencies are written `inf` (Python's float() and
pandas read it), missing figures are empty cells, shares are 0–1 fractions.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from kvtui.explore.compare import passing_at
from kvtui.io.snapshot.schema import (
    Comparison,
    ComparisonRow,
    CostRange,
    EngineInfo,
    Environment,
    RowAtKnee,
    RowQuality,
    RowSuite,
    Run,
)

LABEL_COLUMNS = ("mode", "engine", "gpu", "version", "simulated", "dummy_weights", "mode_warnings")
STEP_COLUMNS = (
    "index", "load_kind", "load", "why", "passed", "limited_by", "at_knee", "requests", "errors", "error_rate",
    "output_tok_s", "input_tok_s", "total_tok_s", "request_s", "goodput", "goodput_req_s",
)
DIST_COLUMNS = tuple(f"{m}_ms_{k}" for m in ("ttft", "tpot", "itl", "e2e") for k in ("n", "mean", "p50", "p90", "p95",
    "p99"))
TAIL_COLUMNS = (
    "kv_cache_usage_max", "kv_cache_usage_mean", "preemptions", "running_max", "waiting_max", "prefix_cache_hit_rate",
    "gpu_mem_used_gib_max", "client_limited", "started_at", "duration_s", "window_s", "aborted", "flags",
)
# Each mode's quality (kvtui.quality), repeated on its rows: accuracy, its 95 % CI and n per built-in
# task, the verdict against the reference mode, and the quality-adjusted $/Mtok out.
QUALITY_COLUMNS = tuple(f"quality_{t}_{k}" for t in ("passkey", "quotation") for k in ("accuracy", "ci_lo", "ci_hi",
    "n", "verdict")) + (
    "quality_agreement_exact", "quality_flagged", "usd_per_mtok_out", "usd_per_mtok_out_qadj", "weights")
# Every task, the harness's suites too ("kvtui_arith 33% [15%–58%] n=24 Δ-4.2pt within noise; …"), the
# equivalence to the reference (TOST), the q-adjusted range, and the answers under the knee's load: written
# only where a mode has one of them (a snapshot from before keeps its columns, byte for byte).
SUITE_COLUMNS = ("quality_tasks", "quality_equivalent", "usd_per_mtok_out_qadj_lo", "usd_per_mtok_out_qadj_hi",
                 "quality_at_knee_changed", "quality_at_knee_compared", "quality_at_knee_delta_pt",
                 "quality_at_knee_verdict")
COLUMNS = LABEL_COLUMNS + STEP_COLUMNS + DIST_COLUMNS + TAIL_COLUMNS + QUALITY_COLUMNS
# The knee's interval (kvtui.core.knee_interval), repeated on its mode's rows, and the step's own
# pass probability: written only where a mode has one (a snapshot from before keeps its columns).
KNEE_COLUMNS = ("knee_lo", "knee_hi", "knee_confidence", "pass_probability")
# The mode's knee and whether it is a lower bound (no measured load failed above it: "≥ N" on screen),
# repeated on its rows: written where some mode's knee is one (other snapshots keep their columns).
BOUND_COLUMNS = ("knee", "knee_lower_bound")
# What the prefix cache gives the mode (modes[].prefix_cache_gain: its knee without the cache, SIMULATED or
# predicted), repeated on its rows: written only where some mode has one (other snapshots keep their columns).
GAIN_COLUMNS = ("knee_no_prefix_cache", "prefix_cache_gain", "prefix_cache_gain_basis")


def _quality_cells(row: ComparisonRow | None, info: EngineInfo) -> dict[str, Any]:
    q = (row.quality if row is not None else None) or RowQuality()
    suite = q.suite or RowSuite()
    tasks = suite.tasks or {}  # each task's verdict: a plain object (kvtui.quality.verdict)
    out: dict[str, Any] = {"weights": info.weights or ("dummy" if info.dummy_weights else None)}
    for t in ("passkey", "quotation"):
        v = tasks.get(t) or {}
        ci = v.get("ci") or [None, None]
        out.update({f"quality_{t}_accuracy": v.get("accuracy"), f"quality_{t}_ci_lo": ci[0],
                    f"quality_{t}_ci_hi": ci[1],
                    f"quality_{t}_n": v.get("n"), f"quality_{t}_verdict": v.get("verdict")})
    agree = tasks.get("agreement") or {}
    out["quality_agreement_exact"] = agree.get("exact_match_rate")
    out["quality_flagged"] = q.flagged if q and not q.skipped else None
    out["usd_per_mtok_out"] = row.usd_per_mtok_out if row is not None else None
    out["usd_per_mtok_out_qadj"] = row.usd_per_mtok_out_qadj if row is not None else None
    rng = (row.usd_per_mtok_out_qadj_range if row is not None else None) or CostRange()
    cells = []
    for name, v in tasks.items():
        if name == "agreement" or not isinstance(v, dict):
            continue
        acc, ci = v.get("accuracy"), v.get("ci") or [None, None]
        cell = f"{name} " + ("not run" if v.get("not_run") else "—" if acc is None
                             else f"{acc:.1%} [{(ci[0] or 0):.0%}–{(ci[1] or 0):.0%}] n={v.get('n')}")
        if v.get("delta_pt") is not None:
            cell += f" Δ{v['delta_pt']:+.1f}pt {v.get('verdict')}"
        cells.append(cell)
    out["quality_tasks"] = "; ".join(cells) or None
    # SUITE_COLUMNS are written where a mode has more than the first version's tasks (render_csv)
    eq = suite.equivalence
    out["_suite_columns"] = bool(set(tasks) - {"passkey", "quotation", "agreement"}) or bool(eq or rng or q.at_knee)
    out["quality_equivalent"] = ("reference" if eq.reference else eq.shown) if eq else None
    out["usd_per_mtok_out_qadj_lo"], out["usd_per_mtok_out_qadj_hi"] = rng.lo, rng.hi
    k = q.at_knee or RowAtKnee()
    out.update(quality_at_knee_changed=k.changed, quality_at_knee_compared=k.compared,
               quality_at_knee_delta_pt=k.delta_pt, quality_at_knee_verdict=k.verdict or k.skipped)
    return out


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
    if isinstance(v, dict):  # a step's flags: {name: count}
        return ";".join(f"{k}={x}" for k, x in sorted(v.items()))
    return str(v)


def step_records(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per step, by column. A step's figures are written through as the file holds them
    (`stored`: an older snapshot's odd value too); the labels and the mode's figures are read typed."""
    from kvtui.report.text import comparison

    run = Run.view(doc)
    env = run.environment or Environment()
    out = []
    comp_rows = {r.mode: r for r in Comparison.view(comparison(doc)).rows or ()} if run.modes else {}
    for m in run.all_modes:
        info = m.info
        comp_row = comp_rows.get(m.name)
        qcells = _quality_cells(comp_row, info)
        labels: dict[str, Any] = {
            "mode": m.name,
            "engine": info.engine or m.engine or env.engine,
            "gpu": ", ".join(info.gpu_names or env.gpu_names or []) or None,
            "version": info.version,
            "simulated": bool(m.simulated or info.simulated or env.simulated),
            "dummy_weights": bool(info.dummy_weights),
            "mode_warnings": list(m.facts.warnings or []) or None,
        }
        for s in m.all_steps:
            row = dict(labels)
            for k in STEP_COLUMNS:
                row[k] = s.stored(k)
            row["at_knee"] = passing_at(s, m.best_concurrency)
            for metric in ("ttft", "tpot", "itl", "e2e"):
                d = s.latency(metric)
                for k in ("n", "mean", "p50", "p90", "p95", "p99"):
                    row[f"{metric}_ms_{k}"] = d.stored(k) if d is not None else None
            for k in TAIL_COLUMNS:
                row[k] = s.stored(k)
            row.update(qcells)
            row["knee"] = m.best_concurrency
            row["knee_lower_bound"] = bool(comp_row.best_lower_bound) if comp_row is not None else None
            ki = comp_row.knee_interval if comp_row is not None else None
            if ki:
                row.update(knee_lo=ki.get("lo"), knee_hi=ki.get("hi"), knee_confidence=ki.get("confidence"),
                           pass_probability=(s.pass_probability or {}).get("p"))
            g = m.prefix_cache_gain
            if g and not g.get("skipped"):
                row.update(knee_no_prefix_cache=g.get("knee_no_cache"), prefix_cache_gain=g.get("gain"),
                           prefix_cache_gain_basis=g.get("basis"))
            out.append(row)
    return out


def render_csv(doc: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    rows = step_records(doc)
    suite = any(r.get("_suite_columns") for r in rows)
    cols = COLUMNS + (SUITE_COLUMNS if suite else ()) + (KNEE_COLUMNS if any("knee_lo" in r for r in rows) else ())
    cols += BOUND_COLUMNS if any(r.get("knee_lower_bound") for r in rows) else ()
    cols += GAIN_COLUMNS if any("prefix_cache_gain" in r for r in rows) else ()
    w.writerow(cols)
    for row in rows:
        w.writerow([_cell(row.get(c)) for c in cols])
    return buf.getvalue()
