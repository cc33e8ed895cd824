"""The Markdown per-replica table of a mode run over several replicas (or DP engines).

Requests, errors, tokens and latency percentiles per replica come from kvtui's own
per-request records (each names its replica), exact; KV, running, waiting and preemptions
from each replica's /metrics. Absent for a mode of one server: old snapshots export as before.
"""

from __future__ import annotations

from kvtui.io.snapshot.schema import Distribution, Mode
from kvtui.report.text import ModeLike, fmt, fmt_load, fmt_share, table

HEADERS = ["step", "c", "replica", "n", "err", "tok/s out", "TTFT p50", "TTFT p95", "TPOT p50", "TPOT p95",
           "KV max", "running max", "waiting max", "preempt"]


def _p(d: Distribution | None, p: str) -> str:
    return fmt(d.by_key(p), 1) if d is not None else "—"


def replica_section(mode: ModeLike) -> list[str]:
    m = Mode.of(mode)
    steps = m.all_steps
    if not any((s.replicas or s.ranks) is not None for s in steps):
        return []
    out = ["#### Per replica", ""]
    reps = m.replicas or ()
    if reps:
        facts = []
        for rep in reps:
            where = rep.base_url or rep.metrics_url or "—"
            kv = f": KV {fmt(rep.server.kv_cache_tokens)} tokens" if rep.server else ""
            facts.append(f"{rep.name} `{where}`{kv}")
        out += ["- replicas (" + str((m.endpoint or {}).get("routing") or "—") + "): " + "; ".join(facts), ""]
    rows = []
    for s in steps:
        for r in (s.replicas or s.ranks or ()):
            rows.append([fmt(s.index), fmt_load(s.load), str(r.name), fmt(r.requests),
                         fmt(r.errors), fmt(r.output_tok_s), _p(r.ttft_ms, "p50"), _p(r.ttft_ms, "p95"),
                         _p(r.tpot_ms, "p50"), _p(r.tpot_ms, "p95"),
                         fmt_share(r.kv_cache_usage_max if r.has("kv_cache_usage_max") else r.kv_usage_max),
                         fmt(r.running_max), fmt(r.waiting_max), fmt(r.preemptions)])
        for x in s.replicas_lost or ():
            out.append(f"- step {fmt(s.index)}: replica {x.name} lost ({x.why}); "
                       f"{fmt(x.failed_requests)} of its requests failed")
    if out[-1].startswith("- step"):
        out.append("")
    out += [table(HEADERS, rows, markdown=True), "",
            "Latencies in ms from kvtui's per-request records of each replica (— = too few samples); "
            "KV, running, waiting, preemptions from each replica's /metrics.", ""]
    return out
