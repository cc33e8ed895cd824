"""Startup facts from /metrics: the labels of `vllm:cache_config_info` as facts to merge under the log's."""

from __future__ import annotations

from kvtui.runtime.engines.base import StartupFacts
from kvtui.runtime.telemetry.cache_config import facts_from_labels as facts_from_cache_config  # the one label reader


# --- /metrics: vllm:cache_config_info ------------------------------------------------------
def facts_from_metrics_text(text: str) -> StartupFacts | None:
    """Find `vllm:cache_config_info` in a /metrics scrape (Prometheus text) and read it."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:  # pragma: no cover - prometheus_client is a dependency
        return None
    try:
        for fam in text_string_to_metric_families(text):
            if fam.name == "vllm:cache_config_info":
                for s in fam.samples:
                    return facts_from_cache_config(dict(s.labels))
    except Exception:  # the parser raises ValueError, KeyError, IndexError … on garbage
        return None
    return None


def engines_in_metrics(text: str) -> int:
    """How many engines a /metrics scrape labels in `vllm:cache_config_info` (data parallel: one
    sample per engine, `engine="0"`, `"1"` …); 1 when it says nothing."""
    try:
        from prometheus_client.parser import text_string_to_metric_families

        for fam in text_string_to_metric_families(text):
            if fam.name == "vllm:cache_config_info":
                return max(1, len({s.labels.get("engine") for s in fam.samples}))
    except Exception:  # garbage: as the parser may raise on it, no engines counted
        pass
    return 1
