"""Arithmetic on parsed /metrics samples: several replicas merged into one sample, and what
happened between two scrapes (counter increases, rates, the window's histograms)."""

from __future__ import annotations

from typing import Any

from kvtui import clock
from kvtui.runtime.telemetry.prom import COUNTER_FIELDS, HISTOGRAM_KEYS, failed_sample
from kvtui.runtime.telemetry.types import Histogram, MetricsSample

# --- several replicas -------------------------------------------------------------------------


def merge_samples(samples: list[MetricsSample]) -> MetricsSample:
    """Merge scrapes of several replicas taken at about the same time into one sample.

    Gauges and counters are summed, `kv_usage` is averaged (over replicas that report it),
    histograms are summed bucket by bucket (a bound missing in one replica counts as 0 there),
    `cache_config` is the first replica's. A field stays None only when no replica has it.
    If any replica failed, the merge fails too (``ok=False``, error naming the replica): a
    partial sum would make counters jump down and up and corrupt every window delta.
    """
    if not samples:
        return failed_sample(clock.monotonic(), "no samples to merge")
    t = max(s.t for s in samples)
    bad = [(i, s) for i, s in enumerate(samples) if not s.ok]
    if bad:
        why = "; ".join(f"replica {i}: {s.error}" for i, s in bad)
        return failed_sample(t, why)
    if len(samples) == 1:
        only = samples[0]
        return MetricsSample(
            t=only.t,
            kv_usage=only.kv_usage,
            running=only.running,
            waiting=only.waiting,
            preemptions=only.preemptions,
            prompt_tokens=only.prompt_tokens,
            generation_tokens=only.generation_tokens,
            prefix_cache_queries=only.prefix_cache_queries,
            prefix_cache_hits=only.prefix_cache_hits,
            requests_success=only.requests_success,
            histograms={k: Histogram(h.sum, h.count, dict(h.buckets)) for k, h in only.histograms.items()},
            cache_config=dict(only.cache_config),
        )
    out = MetricsSample(t=t)
    usages = [s.kv_usage for s in samples if s.kv_usage is not None]
    out.kv_usage = sum(usages) / len(usages) if usages else None
    for name in ("running", "waiting") + COUNTER_FIELDS:
        vals = [getattr(s, name) for s in samples if getattr(s, name) is not None]
        setattr(out, name, sum(vals) if vals else None)
    for s in samples:
        for key, h in s.histograms.items():
            acc = out.histograms.setdefault(key, Histogram())
            acc.sum += h.sum
            acc.count += h.count
            for le, c in h.buckets.items():
                acc.buckets[le] = acc.buckets.get(le, 0.0) + c
    for h in out.histograms.values():
        h.buckets = dict(sorted(h.buckets.items()))
    out.cache_config = next((dict(s.cache_config) for s in samples if s.cache_config), {})
    return out


# --- deltas between two scrapes ---------------------------------------------------------------


def counter_values(sample: MetricsSample) -> tuple[float | None, ...]:
    """The sample's counters (COUNTER_FIELDS, summed over replicas in a merged sample): two scrapes
    with equal values saw no request move the server between them."""
    return tuple(getattr(sample, name) for name in COUNTER_FIELDS)


def window_delta(before: MetricsSample, after: MetricsSample) -> dict[str, Any]:
    """What happened between two scrapes of the same server(s).

    Returns a dict; a value is None when it cannot be known (a failed scrape, a metric the
    server does not expose, or a counter that went down — the server restarted, then
    ``counter_reset`` is True):

    - ``duration_s``: after.t − before.t
    - ``preemptions``, ``prompt_tokens``, ``generation_tokens``, ``prefix_cache_queries``,
      ``prefix_cache_hits``, ``requests_success``: counter increases
    - ``prefix_cache_hit_rate``: hits / queries over the window (None when no queries)
    - ``generation_tok_s``, ``prompt_tok_s``: counter increase / duration_s
    - ``histograms``: {key: Histogram of the window} for ttft/itl/tpot/e2e/queue/prefill/decode
    - ``<key>_mean_s`` and ``<key>_count`` for ttft, itl, tpot, e2e, queue, prefill, decode
    - ``ok`` (both scrapes ok) and ``error``
    """
    out: dict[str, Any] = {"ok": bool(before.ok and after.ok), "error": None, "counter_reset": False}
    if not before.ok or not after.ok:
        out["error"] = before.error if not before.ok else after.error
    duration = after.t - before.t
    out["duration_s"] = duration
    for name in COUNTER_FIELDS:
        out[name] = None
        if out["ok"]:
            a, b = getattr(after, name), getattr(before, name)
            if a is not None and b is not None:
                if a < b:
                    out["counter_reset"] = True
                else:
                    out[name] = a - b
    q, h = out["prefix_cache_queries"], out["prefix_cache_hits"]
    out["prefix_cache_hit_rate"] = h / q if q and h is not None else None
    for name, rate in (("generation_tokens", "generation_tok_s"), ("prompt_tokens", "prompt_tok_s")):
        v = out[name]
        out[rate] = v / duration if v is not None and duration > 0 else None
    hists: dict[str, Histogram] = {}
    for key in HISTOGRAM_KEYS:
        out[f"{key}_mean_s"] = None
        out[f"{key}_count"] = None
        if not out["ok"]:
            continue
        ha, hb = after.histograms.get(key), before.histograms.get(key)
        if ha is None:
            continue
        d = ha.minus(hb) if hb is not None else Histogram(ha.sum, ha.count, dict(ha.buckets))
        if d.count < 0 or d.sum < 0 or any(c < 0 for c in d.buckets.values()):
            out["counter_reset"] = True
            continue
        hists[key] = d
        out[f"{key}_count"] = d.count
        out[f"{key}_mean_s"] = d.mean
    out["histograms"] = hists
    return out
