"""Telemetry samples that feed the run's time series (data only, no I/O)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class GpuSample:
    """One NVML reading of one GPU."""

    t: float  # clock.monotonic() (kvtui.clock)
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
    # Data parallel: {engine label: {kv_usage, running, waiting, preemptions}} when the scrape
    # carries more than one engine (vLLM labels its DP ranks); else empty.
    engines: dict[str, dict[str, float]] = field(default_factory=dict)
    # Series whose value was outside its valid range (kvtui.runtime.telemetry.prom.check_ranges): that
    # field is None here, so no verdict or "limited by" uses it; the step is flagged with these.
    out_of_range: list[str] = field(default_factory=list)
    # Several replicas (kvtui.runtime.telemetry.replicas): each replica's own scrape, in replica order.
    replicas: list["MetricsSample"] = field(default_factory=list)
    ok: bool = True
    error: str | None = None  # why the scrape failed (then every field is None)


@dataclass
class StartupFacts:
    """What the server said about its memory at startup (log lines, `vllm:cache_config_info`).

    None means "not reported", never zero.
    """

    weights_gib: float | None = None
    kv_cache_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency_reported: float | None = None
    max_concurrency_len: int | None = None  # the tokens-per-request that figure assumes
    cuda_graph_gib: float | None = None
    activation_peak_gib: float | None = None
    startup_s: float | None = None  # launch → /health 200
    load_s: float | None = None  # weight loading
    compile_s: float | None = None  # torch.compile
    init_engine_s: float | None = None  # profile, create KV cache, warm-up
    # torch.compile's cache at this start (kvtui.runtime.engines.vllm.compile_cache): "hit" | "miss" | "cold"
    compile_cache: str | None = None
    compile_cache_dir: str | None = None  # "Using cache directory: …" (the configuration's entry)
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    kv_cache_dtype: str | None = None
    device: str | None = None  # "GPU" or "CPU"
    attention_backend: str | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    prefix_caching: bool | None = None
    gpu_total_gib: float | None = None
    gpu_memory_utilization: float | None = None
    phases: list[str] = field(default_factory=list)  # startup phases seen, in order
    warnings: list[str] = field(default_factory=list)  # e.g. "uncalibrated fp8 KV scales"
    # Data-parallel engines behind the one endpoint (vLLM labels each engine's metrics); when more
    # than one, the KV figures above are their sum (each engine has its own KV cache).
    engines: int | None = None

    def merge(self, other: "StartupFacts") -> "StartupFacts":
        """Fill what this one lacks from `other` (the log wins over /metrics)."""
        for k, v in asdict(other).items():
            if getattr(self, k) in (None, []) and v not in (None, []):
                setattr(self, k, v)
        return self

    def summed_over_engines(self, n: int) -> "StartupFacts":
        """One engine's KV figures (what each engine's log line and cache_config say) as the whole
        server's: n data-parallel engines hold n KV caches of that size. Once only."""
        if n > 1 and not self.engines:
            self.engines = n
            for name in ("kv_cache_tokens", "num_gpu_blocks"):
                v = getattr(self, name)
                if v is not None:
                    setattr(self, name, v * n)
            for name in ("kv_cache_gib", "max_concurrency_reported"):
                v = getattr(self, name)
                if v is not None:
                    setattr(self, name, v * n)
        return self

    def kv_bound_concurrency(self, tokens_per_request: int) -> float | None:
        """Requests of this length that fit in the KV cache at once."""
        if self.kv_cache_tokens and tokens_per_request > 0:
            return self.kv_cache_tokens / tokens_per_request
        return None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
