"""Startup facts from vLLM's `vllm:cache_config_info` gauge (its labels carry the cache settings)."""

from __future__ import annotations

import math

from kvtui.runtime.telemetry.types import MetricsSample, StartupFacts

# --- startup facts from vllm:cache_config_info ------------------------------------------------


def _cfg_str(cfg: dict[str, str], key: str) -> str | None:
    v = cfg.get(key)
    if v is None:
        return None
    v = v.strip()
    return None if v in ("", "None", "none", "null") else v


def _cfg_float(cfg: dict[str, str], key: str) -> float | None:
    """A label as a number, or None: not given, not a number, infinite, NaN or negative (a server
    kvtui did not start may say anything; no figure of the cache is below zero)."""
    v = _cfg_str(cfg, key)
    if v is None:
        return None
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) and x >= 0 else None


def _cfg_int(cfg: dict[str, str], key: str) -> int | None:
    x = _cfg_float(cfg, key)
    return int(x) if x is not None and x == int(x) else None


def cache_config_facts(sample: MetricsSample) -> StartupFacts:
    """Startup facts read from a scrape's `vllm:cache_config_info` (None where the server did not say)."""
    return facts_from_labels(sample.cache_config or {})


def facts_from_labels(cfg: dict[str, str]) -> StartupFacts:
    """The labels of `vllm:cache_config_info` (strings) as StartupFacts: the one reader of them,
    for the scraper and for the engines (kvtui.runtime.engines.vllm.cache_facts).

    kv_cache_tokens: `kv_cache_size_tokens` (0.32+), else num_gpu_blocks × block_size.
    kv_cache_gib: `kv_cache_memory_bytes` — only set when the server was launched with
    `--kv-cache-memory-bytes`; otherwise the KV size in bytes comes from the startup log.
    """
    facts = StartupFacts()
    facts.num_gpu_blocks = _cfg_int(cfg, "num_gpu_blocks")
    facts.block_size = _cfg_int(cfg, "block_size")
    facts.kv_cache_dtype = _cfg_str(cfg, "cache_dtype") or _cfg_str(cfg, "kv_cache_dtype")
    tokens = _cfg_int(cfg, "kv_cache_size_tokens")
    if tokens is None and facts.num_gpu_blocks is not None and facts.block_size is not None:
        tokens = facts.num_gpu_blocks * facts.block_size
    facts.kv_cache_tokens = tokens
    kv_bytes = _cfg_float(cfg, "kv_cache_memory_bytes")
    facts.kv_cache_gib = kv_bytes / 2**30 if kv_bytes else None  # 0: not set
    facts.max_concurrency_reported = _cfg_float(cfg, "kv_cache_max_concurrency")
    facts.gpu_memory_utilization = _cfg_float(cfg, "gpu_memory_utilization")
    pc = _cfg_str(cfg, "enable_prefix_caching")
    if pc is not None and pc.lower() in ("true", "false"):
        facts.prefix_caching = pc.lower() == "true"
    return facts
