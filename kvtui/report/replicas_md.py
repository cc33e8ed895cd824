"""The Markdown per-replica table of a mode run over several replicas (or DP engines).

Requests, errors, tokens and latency percentiles per replica come from kvtui's own
per-request records (each names its replica), exact; KV, running, waiting and preemptions
from each replica's /metrics. Absent for a mode of one server: old snapshots export as before.
"""

from __future__ import annotations

from typing import Any

from kvtui.report.text import fmt, fmt_load, fmt_share, table

HEADERS = ["step", "c", "replica", "n", "err", "tok/s out", "TTFT p50", "TTFT p95", "TPOT p50", "TPOT p95",
           "KV max", "running max", "waiting max", "preempt"]


def _p(step_rep: dict[str, Any], metric: str, p: str) -> str:
    d = step_rep.get(f"{metric}_ms")
    return fmt(d.get(p), 1) if isinstance(d, dict) else "—"


def replica_section(mode: dict[str, Any]) -> list[str]:
    steps = [s for s in mode.get("steps") or [] if isinstance(s, dict)]
    if not any(isinstance(s.get("replicas") or s.get("ranks"), list) for s in steps):
        return []
    out = ["#### Per replica", ""]
    reps = [r for r in mode.get("replicas") or [] if isinstance(r, dict)]
    if reps:
        facts = []
        for r in reps:
            srv = r.get("server") if isinstance(r.get("server"), dict) else {}
            where = r.get("base_url") or r.get("metrics_url") or "—"
            kv = f": KV {fmt(srv.get('kv_cache_tokens'))} tokens" if srv else ""
            facts.append(f"{r.get('name')} `{where}`{kv}")
        out += ["- replicas (" + str((mode.get("endpoint") or {}).get("routing") or "—") + "): " + "; ".join(facts), ""]
    rows = []
    for s in steps:
        for r in (s.get("replicas") or s.get("ranks") or []):
            if not isinstance(r, dict):
                continue
            rows.append([fmt(s.get("index")), fmt_load(s.get("load")), str(r.get("name")), fmt(r.get("requests")),
                         fmt(r.get("errors")), fmt(r.get("output_tok_s")), _p(r, "ttft", "p50"), _p(r, "ttft", "p95"),
                         _p(r, "tpot", "p50"), _p(r, "tpot", "p95"),
                         fmt_share(r.get("kv_cache_usage_max") if "kv_cache_usage_max" in r else r.get("kv_usage_max")),
                         fmt(r.get("running_max")), fmt(r.get("waiting_max")), fmt(r.get("preemptions"))])
        for x in s.get("replicas_lost") or []:
            if isinstance(x, dict):
                out_note = f"- step {fmt(s.get('index'))}: replica {x.get('name')} lost ({x.get('why')}); " \
                           f"{fmt(x.get('failed_requests'))} of its requests failed"
                out.append(out_note)
    if out[-1].startswith("- step"):
        out.append("")
    out += [table(HEADERS, rows, markdown=True), "",
            "Latencies in ms from kvtui's per-request records of each replica (— = too few samples); "
            "KV, running, waiting, preemptions from each replica's /metrics.", ""]
    return out
