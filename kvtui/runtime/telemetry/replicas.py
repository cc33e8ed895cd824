"""Several replicas' /metrics: one scraper each, merged into the run's sample, kept apart for
the per-replica view, and window deltas that survive a replica going down.

The merged sample sums the replicas that answered (histograms bucket by bucket, through
`prom_windows.merge_samples`); each replica's own sample rides along in `MetricsSample.replicas`, a
failed one as ``ok=False``. Window deltas are taken per replica and summed over the replicas
that answered at both ends: a replica that died mid-step takes its counters with it, and a
delta of the merged counters would read as a counter reset and lose the whole step's figures.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kvtui.runtime.telemetry.prom import COUNTER_FIELDS, HISTOGRAM_KEYS, MetricsScraper
from kvtui.runtime.telemetry.prom_windows import merge_samples, window_delta
from kvtui.runtime.telemetry.types import Histogram, MetricsSample


class ReplicaScrapers:
    """One MetricsScraper per replica; `scrape()` never raises, like MetricsScraper's."""

    def __init__(self, targets: list[tuple[str, str, dict[str, str]]], timeout_s: float = 5.0):
        """targets: (name, metrics URL, the headers it gets: its own credentials, or none)."""
        self.names = [n for n, _, _ in targets]
        self.urls = [u for _, u, _ in targets]
        self.scrapers = [MetricsScraper(u, headers=h, timeout_s=timeout_s) for _, u, h in targets]

    def scrape(self) -> MetricsSample:
        per = [s.scrape() for s in self.scrapers]
        ok = [s for s in per if s.ok]
        if ok:
            merged = merge_samples(ok)
        else:
            merged = merge_samples(per)  # fails, naming every replica
        merged.replicas = per
        return merged

    def close(self) -> None:
        for s in self.scrapers:
            s.close()


def light(sample: MetricsSample) -> MetricsSample:
    """The sample without its histograms and cache config (replicas included): what a long run keeps
    of every scrape for the gauge windows (a full scrape is ~10 KB)."""
    return dataclasses.replace(sample, histograms={}, cache_config={}, replicas=[light(r) for r in sample.replicas])


def replica_view(sample: MetricsSample | None, names: list[str]) -> list[dict[str, Any]]:
    """The per-replica rows of one scrape: name, up, kv_usage, running, waiting, preemptions.

    Replicas come from `sample.replicas` (named by `names`); a replica, or the one server,
    with several data-parallel engines is shown rank by rank ("r0.e1", or "engine 1")."""
    if sample is None:
        return []
    parts = list(zip(names, sample.replicas)) if sample.replicas else [("", sample)]
    rows: list[dict[str, Any]] = []
    for name, s in parts:
        if not s.ok:
            rows.append({"name": name, "up": False, "error": s.error})
            continue
        if s.engines:
            for eng, fig in s.engines.items():
                rows.append({"name": f"{name}.e{eng}" if name else f"engine {eng}", "up": True, **fig})
        elif name:
            rows.append({"name": name, "up": True, "kv_usage": s.kv_usage, "running": s.running,
                         "waiting": s.waiting, "preemptions": s.preemptions})
    return rows


def replicas_delta(before: MetricsSample, after: MetricsSample) -> dict[str, Any]:
    """`window_delta` for a run of several replicas: per replica, then summed over the replicas
    that answered at both ends (`replicas`: each one's delta; `lost`: the indexes that did not)."""
    if not before.replicas or len(before.replicas) != len(after.replicas):
        return window_delta(before, after)
    per = [window_delta(b, a) for b, a in zip(before.replicas, after.replicas)]
    good = [d for d in per if d["ok"] and not d["counter_reset"]]
    out: dict[str, Any] = {"ok": bool(good), "error": None if good else (per[0].get("error") or "no replica answered"),
                           "counter_reset": False, "duration_s": after.t - before.t,
                           "replicas": per, "lost": [i for i, d in enumerate(per) if not d["ok"]]}
    for name in COUNTER_FIELDS:
        vals = [d[name] for d in good if d.get(name) is not None]
        out[name] = sum(vals) if vals else None
    q, h = out["prefix_cache_queries"], out["prefix_cache_hits"]
    out["prefix_cache_hit_rate"] = h / q if q and h is not None else None
    dur = out["duration_s"]
    for name, rate in (("generation_tokens", "generation_tok_s"), ("prompt_tokens", "prompt_tok_s")):
        v = out[name]
        out[rate] = v / dur if v is not None and dur > 0 else None
    hists: dict[str, Histogram] = {}
    for key in HISTOGRAM_KEYS:
        parts = [d["histograms"][key] for d in good if key in d.get("histograms", {})]
        out[f"{key}_mean_s"] = out[f"{key}_count"] = None
        if not parts:
            continue
        acc = Histogram()
        for hh in parts:  # bucket by bucket: a bound missing in one replica counts 0 there
            acc.sum += hh.sum
            acc.count += hh.count
            for le, c in hh.buckets.items():
                acc.buckets[le] = acc.buckets.get(le, 0.0) + c
        acc.buckets = dict(sorted(acc.buckets.items()))
        hists[key] = acc
        out[f"{key}_count"], out[f"{key}_mean_s"] = acc.count, acc.mean
    out["histograms"] = hists
    return out
