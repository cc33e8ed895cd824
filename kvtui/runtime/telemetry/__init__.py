"""Telemetry: the NVML GPU sampler and vLLM's Prometheus /metrics (scrape, parse, merge, deltas).

Nothing here imports the UI. Callbacks from the NVML sampler run on its own thread.
"""

from kvtui.runtime.telemetry.cache_config import cache_config_facts
from kvtui.runtime.telemetry.nvml import (
    GpuInfo,
    Inventory,
    NvmlSampler,
    gpu_inventory,
    process_tree,
    process_tree_provider,
    throttle_names,
    wait_for_release,
)
from kvtui.runtime.telemetry.prom import MetricsScraper, parse_metrics
from kvtui.runtime.telemetry.prom_windows import merge_samples, window_delta
from kvtui.runtime.telemetry.types import GpuSample, Histogram, MetricsSample

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
