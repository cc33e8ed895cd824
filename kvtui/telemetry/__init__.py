"""Telemetry: the NVML GPU sampler and vLLM's Prometheus /metrics (scrape, parse, merge, deltas).

Nothing here imports the UI. Callbacks from the NVML sampler run on its own thread.
"""

from kvtui.telemetry.nvml import (
    GpuInfo,
    Inventory,
    NvmlSampler,
    gpu_inventory,
    process_tree,
    process_tree_provider,
    throttle_names,
    wait_for_release,
)
from kvtui.telemetry.prom import (
    MetricsScraper,
    cache_config_facts,
    merge_samples,
    parse_metrics,
    window_delta,
)
from kvtui.telemetry.types import GpuSample, Histogram, MetricsSample

__all__ = [
    "GpuInfo",
    "GpuSample",
    "Histogram",
    "Inventory",
    "MetricsSample",
    "MetricsScraper",
    "NvmlSampler",
    "cache_config_facts",
    "gpu_inventory",
    "merge_samples",
    "parse_metrics",
    "process_tree",
    "process_tree_provider",
    "throttle_names",
    "wait_for_release",
    "window_delta",
]
