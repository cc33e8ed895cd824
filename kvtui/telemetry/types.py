"""Telemetry samples that feed the run's time series (data only, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GpuSample:
    """One NVML reading of one GPU."""

    t: float  # time.monotonic()
    index: int
    name: str
    mem_used_gib: float
    mem_total_gib: float
    util_pct: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    temperature_c: float | None = None
    throttle: list[str] = field(default_factory=list)  # active throttle reasons, by name
    proc_mem_gib: float | None = None  # the server process tree's own memory on this GPU


@dataclass
class Histogram:
    """A cumulative Prometheus histogram: `buckets` maps upper bound (inf included) → count."""

    sum: float = 0.0
    count: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)

    def minus(self, earlier: "Histogram") -> "Histogram":
        return Histogram(
            self.sum - earlier.sum,
            self.count - earlier.count,
            {le: c - earlier.buckets.get(le, 0.0) for le, c in self.buckets.items()},
        )

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None


@dataclass
class MetricsSample:
    """One scrape of vLLM's /metrics, names mapped (old and new spellings), summed over labels."""

    t: float
    kv_usage: float | None = None  # 0..1
    running: float | None = None
    waiting: float | None = None
    preemptions: float | None = None  # counter
    prompt_tokens: float | None = None  # counter
    generation_tokens: float | None = None  # counter
    prefix_cache_queries: float | None = None  # counter (tokens)
    prefix_cache_hits: float | None = None  # counter (tokens)
    requests_success: float | None = None  # counter
    histograms: dict[str, Histogram] = field(default_factory=dict)  # "ttft", "itl", "tpot", "e2e", "queue"
    cache_config: dict[str, str] = field(default_factory=dict)  # vllm:cache_config_info labels
    ok: bool = True
    error: str | None = None  # why the scrape failed (then every field is None)
