"""One step's figures per replica, and the replicas it lost.

Latency percentiles and tokens come from kvtui's own per-request records (each record names
the replica that served it), exact and never averaged over replicas; KV usage, running,
waiting and preemptions from each replica's own /metrics. A replica that went down during the
step is named in `replicas_lost` and in a note; the step's figures stay those of every request
sent (its failed requests count as errors), and the run goes on with the others.
"""

from __future__ import annotations

from typing import Any

from kvtui.core.evaluate import _window_tokens
from kvtui.core.record import Record
from kvtui.core.stats import summarize

# Errors that say the replica itself went away (not a slow or refused answer).
GONE_ERRORS = ("connect", "truncated")


def replica_figures(records: list[Record], names: list[str], t0: float, t1: float, time_scale: float,
                    window: dict[str, dict[str, Any]], deltas: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Per replica (in `names` order): requests, errors, tok/s, TTFT/TPOT percentiles (records);
    kv_cache_usage_max, running_max, waiting_max (window of its scrapes), preemptions (its delta)."""
    s = 1.0 / time_scale if time_scale else 1.0
    dur = max(1e-9, t1 - t0)
    out = []
    for i, name in enumerate(names):
        mine = [r for r in records if r.replica == i]
        counted = [r for r in mine if r.counted]
        ok = [r for r in counted if r.ok]
        failed = [r for r in counted if not r.ok and r.error != "client"]
        out_tok, in_tok = _window_tokens(mine, t0, t1)
        ttft = summarize((r.ttft * s for r in ok if r.ttft is not None), failures=len(failed))
        tpot = summarize((r.tpot * s for r in ok if r.tpot is not None), failures=len(failed))
        row: dict[str, Any] = {
            "name": name, "requests": len(counted), "errors": len(failed),
            "output_tok_s": round(out_tok / dur / s, 2), "input_tok_s": round(in_tok / dur / s, 2),
            "ttft_ms": {k: ttft[k] for k in ("n", "p50", "p95", "p99")},
            "tpot_ms": {k: tpot[k] for k in ("n", "p50", "p95", "p99")},
        }
        w = window.get(name) or {}
        row["kv_cache_usage_max"] = w.get("kv_usage_max")
        row["running_max"] = w.get("running_max")
        row["waiting_max"] = w.get("waiting_max")
        d = deltas[i] if deltas and i < len(deltas) else None
        row["preemptions"] = d.get("preemptions") if d and d.get("ok") else None
        out.append(row)
    return out


def lost_replicas(records: list[Record], names: list[str], down: dict[str, tuple[float, str]],
                  t_start: float) -> list[dict[str, Any]]:
    """The replicas that went down during this step: their /metrics stopped answering since
    `t_start`, or a request to them found the server gone (refused, or cut mid-stream) and it
    has not answered since."""
    out = []
    for i, name in enumerate(names):
        gone = [r for r in records if r.replica == i and r.error in GONE_ERRORS]
        when = down.get(name)
        if when is None or (when[0] < t_start and not gone):
            continue  # up, or down before this step and sent nothing here
        out.append({"name": name, "why": when[1], "failed_requests": len(gone)})
    return out


def lost_note(lost: list[dict[str, Any]], names: list[str]) -> str:
    left = [n for n in names if n not in {x["name"] for x in lost}]
    parts = ", ".join(f"{x['name']} ({x['why']}; {x['failed_requests']} of its requests failed)" for x in lost)
    rest = f"the run goes on with {', '.join(left)}" if left else "no replica is left"
    return f"replica lost mid-step: {parts}; {rest}"


def mark_remeasure(step: dict[str, Any]) -> bool:
    """A step that failed while a replica died in it is measured again on the replicas left,
    not taken as the SLO's verdict: the dead replica's refused and cut requests are errors of a
    fleet that no longer exists (one of two killed in the first step once ended the mode "no load
    met the SLO", exit 0). Marks the step (`remeasured`, a note) and says whether to; a step that
    passed anyway, or one that left no replica, is judged as it is."""
    lost = step.get("replicas_lost") or []
    if not lost or step.get("passed") is True:
        return False
    gone = {x.get("name") for x in lost if isinstance(x, dict)}
    left = [r.get("name") for r in step.get("replicas") or [] if isinstance(r, dict) and r.get("name") not in gone]
    if not left:
        return False
    step["remeasured"] = True
    step.setdefault("notes", []).append(
        f"not the SLO's verdict: {', '.join(sorted(str(g) for g in gone))} lost mid-step; "
        f"measured again at the same load on {', '.join(str(n) for n in left)}")
    return True
