"""Modes side by side against the baseline (the first mode with a result).

Cost: all GPU time is attributed to the tokens counted, so $/Mtok output and $/Mtok input
are each "what a million of them cost if they carried the whole bill" — the usual way to
quote serving cost. Failed requests still burn GPU time: with cost.count_failed the cost is
spread over successful requests only.
"""

from __future__ import annotations

from typing import Any

from kvtui.scenario.schema import Scenario


def _at(mode: dict[str, Any], load: float | None) -> list[dict[str, Any]]:
    if load is None:
        return []
    return [s for s in mode.get("steps", []) if s.get("load") == load and s.get("passed")]


def _mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def usd_per_mtok(tok_s: float | None, gpu_hourly: float, gpus: int, success_share: float = 1.0) -> float | None:
    if not tok_s or tok_s <= 0 or gpu_hourly <= 0:
        return None
    return gpu_hourly * gpus / (tok_s * success_share * 3600) * 1e6


def mode_summary(mode: dict[str, Any], scenario: dict[str, Any] | Scenario) -> dict[str, Any]:
    sc = scenario if isinstance(scenario, dict) else scenario.to_dict()
    cost = sc.get("cost", {})
    gpus = cost.get("gpus") or sc.get("server", {}).get("tensor_parallel_size") or 1
    hourly = cost.get("gpu_hourly_usd", 0.0)
    best = mode.get("best_concurrency")
    at = _at(mode, best)
    out_tok = _mean([s.get("output_tok_s") for s in at])
    in_tok = _mean([s.get("input_tok_s") for s in at])
    err = _mean([s.get("error_rate") for s in at]) or 0.0
    share = (1 - err) if cost.get("count_failed", True) else 1.0
    server = mode.get("server") or {}
    steps = mode.get("steps", [])
    fail = mode.get("search", {}).get("first_fail")
    knee = [s for s in steps if fail is not None and s.get("load") == fail and s.get("passed") is False]
    mems = [s.get("gpu_mem_used_gib_max") for s in steps if s.get("gpu_mem_used_gib_max") is not None]
    return {
        "mode": mode.get("name"),
        "best": best,
        "search": mode.get("search", {}).get("describe"),
        "output_tok_s": round(out_tok, 1) if out_tok else None,
        "input_tok_s": round(in_tok, 1) if in_tok else None,
        "peak_gpu_mem_gib": round(max(mems), 2) if mems else None,
        "weights_gib": server.get("weights_gib"),
        "kv_cache_gib": server.get("kv_cache_gib"),
        "kv_tokens": server.get("kv_cache_tokens"),
        "preemptions_at_knee": knee[0].get("preemptions") if knee else None,
        "knee_limited_by": knee[0].get("limited_by") if knee else None,
        "usd_per_mtok_out": _round(usd_per_mtok(out_tok, hourly, gpus, share)),
        "usd_per_mtok_in": _round(usd_per_mtok(in_tok, hourly, gpus, share)),
        "error": (mode.get("error") or {}).get("message"),
    }


def _round(x: float | None, n: int = 4) -> float | None:
    return None if x is None else round(x, n)


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b:
        return None
    return round(a / b, 3)


def compare_modes(doc: dict[str, Any], scenario: dict[str, Any] | Scenario | None = None) -> dict[str, Any]:
    sc = scenario if scenario is not None else doc.get("scenario", {})
    rows = [mode_summary(m, sc) for m in doc.get("modes", [])]
    base = next((r for r in rows if r["best"] is not None), None)
    note = None
    if not rows:
        note = "no mode ran"
    elif base is None:
        note = "no mode met the SLO: nothing to compare against"
    elif base is not rows[0]:
        note = f"the first mode ({rows[0]['mode']}) has no result; {base['mode']} is the baseline"
    for r in rows:
        if base is None:
            r.update(best_x=None, tok_s_x=None, kv_tokens_x=None, cost_out_change=None, cost_in_change=None)
            continue
        r["best_x"] = _ratio(r["best"], base["best"])
        r["tok_s_x"] = _ratio(r["output_tok_s"], base["output_tok_s"])
        r["kv_tokens_x"] = _ratio(r["kv_tokens"], base["kv_tokens"])
        for k, key in (("cost_out_change", "usd_per_mtok_out"), ("cost_in_change", "usd_per_mtok_in")):
            a, b = r[key], base[key]
            r[k] = round(a / b - 1, 4) if a is not None and b else None
    return {"baseline": base["mode"] if base else None, "note": note, "rows": rows}
