"""vLLM's Prometheus `/metrics`: parse, scrape, merge replicas, and take deltas between scrapes.

Parsing goes through `prometheus_client.parser.text_string_to_metric_families`; names are then
matched *per sample* (not per family), because real scrapes come in two shapes:

- a live vLLM scrape has `# TYPE` lines: a counter family is named without `_total` while its
  sample keeps it, a histogram family holds `_bucket`/`_count`/`_sum` samples, and every
  `_created` sample comes as its own gauge family;
- a filtered capture (``grep vllm:``, like the H200 calibration files) has no `# TYPE` lines, so
  every sample name becomes its own "unknown" family.

Matching sample names works the same for both.

Old and new vLLM spellings are both understood (the new one wins when a server exposes both):

==========================================  ==========================================
MetricsSample field / histogram key          vLLM sample names (new first)
==========================================  ==========================================
kv_usage (mean over engines)                 vllm:kv_cache_usage_perc, vllm:gpu_cache_usage_perc
running / waiting                            vllm:num_requests_running / _waiting
preemptions                                  vllm:num_preemptions_total
prompt_tokens / generation_tokens            vllm:prompt_tokens_total / vllm:generation_tokens_total
prefix_cache_queries / _hits                 vllm:prefix_cache_queries_total, vllm:gpu_prefix_cache_queries_total
                                             (same for hits)
requests_success (all finished_reason)       vllm:request_success_total
"ttft"                                       vllm:time_to_first_token_seconds
"itl"                                        vllm:inter_token_latency_seconds, vllm:time_per_output_token_seconds
"tpot"                                       vllm:request_time_per_output_token_seconds
"e2e"                                        vllm:e2e_request_latency_seconds
"queue" / "prefill" / "decode"               vllm:request_queue_time_seconds / request_prefill_time_seconds /
                                             request_decode_time_seconds
==========================================  ==========================================

Values are summed over label sets (model_name, engine, finished_reason, …), except
`kv_usage`, a fraction, which is averaged over them (two data-parallel engines at 0.5 are 0.5
full, not 1.0). `requests_success` counts every finished request, whatever its
`finished_reason` (stop, length, abort, error, …).

Cost (measured): a full vLLM 0.32 scrape (614 lines) parses in ~3.4 ms on the H200 host's CPU and
~8 ms on a 2-core CI box, because only the ~180 lines kvtui reads go to prometheus_client's
parser (the whole body: 7.7 / 18 ms; ~40 µs a bucket line on the CI box). The H200 0.26 captures
without buckets (53 lines): ~0.9 ms. Scrape at ≤ 1 Hz.
"""

from __future__ import annotations

import math
import re
import time
from collections import defaultdict
from typing import Any, Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from kvtui.telemetry.types import Histogram, MetricsSample, StartupFacts

# --- name tables ------------------------------------------------------------------------------

# field → sample names, preferred first. Gauges are read as-is.
_GAUGES: dict[str, tuple[str, ...]] = {
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
}
# field → counter base names (the sample is `<base>_total`), preferred first.
_COUNTERS: dict[str, tuple[str, ...]] = {
    "preemptions": ("vllm:num_preemptions",),
    "prompt_tokens": ("vllm:prompt_tokens",),
    "generation_tokens": ("vllm:generation_tokens",),
    "prefix_cache_queries": ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    "requests_success": ("vllm:request_success",),
}
# histogram key → histogram base names, preferred first.
_HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "tpot": ("vllm:request_time_per_output_token_seconds",),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "queue": ("vllm:request_queue_time_seconds",),
    "prefill": ("vllm:request_prefill_time_seconds",),
    "decode": ("vllm:request_decode_time_seconds",),
}
_CACHE_CONFIG = "vllm:cache_config_info"

COUNTER_FIELDS: tuple[str, ...] = tuple(_COUNTERS)
GAUGE_FIELDS: tuple[str, ...] = tuple(_GAUGES)
HISTOGRAM_KEYS: tuple[str, ...] = tuple(_HISTOGRAMS)

# sample name → (kind, field or key, preference rank, part)
_LOOKUP: dict[str, tuple[str, str, int, str]] = {}
for _f, _names in _GAUGES.items():
    for _rank, _n in enumerate(_names):
        _LOOKUP[_n] = ("gauge", _f, _rank, "")
for _f, _names in _COUNTERS.items():
    for _rank, _n in enumerate(_names):
        _LOOKUP[_n + "_total"] = ("counter", _f, _rank, "")
for _k, _names in _HISTOGRAMS.items():
    for _rank, _n in enumerate(_names):
        for _part in ("_bucket", "_count", "_sum"):
            _LOOKUP[_n + _part] = ("hist", _k, _rank, _part)


def _failed(t: float, error: str) -> MetricsSample:
    return MetricsSample(t=t, ok=False, error=error)


def _short(exc: BaseException, limit: int = 120) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- parsing ----------------------------------------------------------------------------------


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_WANTED = frozenset(_LOOKUP) | {_CACHE_CONFIG}


def _select_lines(text: str) -> str:
    """Keep only the sample lines whose metric name kvtui reads (no comments, no python_*,
    no unused vllm:* series). This is a name-prefix filter, not a parser: the kept lines go
    through prometheus_client's parser as they are. It halves the parse cost of a vLLM 0.32
    scrape (614 lines → ~180), and a malformed line kvtui does not read no longer sinks the
    whole scrape."""
    keep = []
    for line in text.splitlines():
        line = line.lstrip()
        if line.startswith("vllm:"):
            m = _NAME.match(line)
            if m is not None and m.group(0) in _WANTED:
                keep.append(line)
    return "\n".join(keep) + "\n" if keep else ""


def parse_metrics(text: str, t: float, *, select: bool = True) -> MetricsSample:
    """Parse one /metrics body into a MetricsSample taken at time `t`.

    Never raises: empty text, text the Prometheus parser rejects, or text without a single
    vllm:* metric kvtui reads gives ``ok=False`` and a short ``error``. `select=False` hands
    the whole body to the parser (slower; same result on well-formed scrapes).
    """
    if not isinstance(text, str):
        return _failed(t, f"not text: {type(text).__name__}")
    if not text.strip():
        return _failed(t, "empty /metrics body")
    if select:
        text = _select_lines(text)
        if not text:
            return _failed(t, "no vllm:* metrics in the /metrics body")

    # (kind, field) → {rank: accumulated}; only the best-ranked spelling present is kept.
    gauge_vals: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    counter_vals: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    hist_vals: dict[str, dict[int, Histogram]] = defaultdict(dict)
    cache_config: dict[str, str] = {}
    seen_vllm = False
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                name = s.name
                if not name.startswith("vllm:"):
                    continue
                seen_vllm = True
                hit = _LOOKUP.get(name)
                if hit is None:
                    if name == _CACHE_CONFIG and not cache_config:
                        cache_config = {str(k): str(v) for k, v in s.labels.items()}
                    continue
                kind, key, rank, part = hit
                value = float(s.value)
                if kind == "gauge":
                    gauge_vals[key][rank].append(value)
                elif kind == "counter":
                    counter_vals[key][rank] += value
                else:
                    h = hist_vals[key].get(rank)
                    if h is None:
                        h = hist_vals[key][rank] = Histogram()
                    if part == "_sum":
                        h.sum += value
                    elif part == "_count":
                        h.count += value
                    else:
                        le = _le(s.labels.get("le"))
                        if le is not None:
                            h.buckets[le] = h.buckets.get(le, 0.0) + value
    except Exception as exc:  # the parser raises ValueError, KeyError, IndexError … on garbage
        return _failed(t, f"unparseable /metrics: {_short(exc)}")
    if not seen_vllm:
        return _failed(t, "no vllm:* metrics in the /metrics body")

    sample = MetricsSample(t=t, cache_config=cache_config)
    for key, by_rank in gauge_vals.items():
        vals = by_rank[min(by_rank)]
        if key == "kv_usage":
            setattr(sample, key, sum(vals) / len(vals))
        else:
            setattr(sample, key, sum(vals))
    for key, by_rank in counter_vals.items():
        setattr(sample, key, by_rank[min(by_rank)])
    for key, by_rank in hist_vals.items():
        h = by_rank[min(by_rank)]
        h.buckets = dict(sorted(h.buckets.items()))
        sample.histograms[key] = h
    return sample


def _le(raw: Any) -> float | None:
    if raw is None:
        return None
    try:
        return float(raw)  # float("+Inf") == inf
    except (TypeError, ValueError):
        return None


# --- scraping ---------------------------------------------------------------------------------


class MetricsScraper:
    """Scrapes one /metrics URL with a reused, synchronous httpx client.

    ``scrape()`` never raises: connection refused, HTTP errors, timeouts, oversized or
    unparseable bodies give ``ok=False`` and ``error="metrics unavailable: …"``. The whole
    scrape (connect + body) is bounded by about ``timeout_s``, also against a server that
    trickles its body. Sample times are ``clock()`` (``time.monotonic`` by default) when the
    body has arrived. Not thread-safe: use one scraper per thread.
    """

    MAX_BODY_BYTES = 16 * 1024 * 1024

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        timeout_s: float = 2.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._clock = clock
        headers = {"Accept": "text/plain"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        # A loopback server (the one kvtui launched) never goes through an HTTP(S)_PROXY
        # from the environment; a remote replica may need one.
        try:
            host = (httpx.URL(url).host or "").lower()
        except Exception:  # a malformed URL fails at scrape time, as an ok=False sample
            host = ""
        loopback = host in ("localhost", "::1") or host.startswith("127.")
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s), headers=headers, trust_env=not loopback)
        self.last_scrape_s: float | None = None  # wall time the last scrape took (HTTP + parse)

    def scrape(self) -> MetricsSample:
        t0 = time.perf_counter()
        try:
            return self._scrape()
        finally:
            self.last_scrape_s = time.perf_counter() - t0

    def _scrape(self) -> MetricsSample:
        deadline = time.monotonic() + self.timeout_s
        try:
            with self._client.stream("GET", self.url) as resp:
                if resp.status_code != 200:
                    hint = " (API key?)" if resp.status_code in (401, 403) else ""
                    return self._fail(f"HTTP {resp.status_code}{hint} from {self.url}")
                chunks: list[bytes] = []
                size = 0
                for chunk in resp.iter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > self.MAX_BODY_BYTES:
                        return self._fail(f"body over {self.MAX_BODY_BYTES // 2**20} MiB from {self.url}")
                    if time.monotonic() > deadline:
                        return self._fail(f"timed out after {self.timeout_s:g} s reading {self.url}")
                encoding = resp.encoding or "utf-8"
        except httpx.TimeoutException:
            return self._fail(f"timed out after {self.timeout_s:g} s ({self.url})")
        except httpx.ConnectError as exc:
            msg = str(exc).lower()
            what = "connection refused" if "refused" in msg else f"cannot connect ({_short(exc, 80)})"
            return self._fail(f"{what} ({self.url})")
        except httpx.HTTPError as exc:
            return self._fail(f"{_short(exc)} ({self.url})")
        except Exception as exc:  # anything else httpx or the socket layer throws
            return self._fail(f"{_short(exc)} ({self.url})")
        body = b"".join(chunks).decode(encoding, errors="replace")
        sample = parse_metrics(body, self._clock())
        if not sample.ok:
            sample.error = f"metrics unavailable: {sample.error} ({self.url})"
        return sample

    def _fail(self, why: str) -> MetricsSample:
        return _failed(self._clock(), f"metrics unavailable: {why}")

    def close(self) -> None:
        try:
            self._client.close()
        except Exception:
            pass

    def __enter__(self) -> "MetricsScraper":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
        return _failed(time.monotonic(), "no samples to merge")
    t = max(s.t for s in samples)
    bad = [(i, s) for i, s in enumerate(samples) if not s.ok]
    if bad:
        why = "; ".join(f"replica {i}: {s.error}" for i, s in bad)
        return _failed(t, why)
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


# --- startup facts from vllm:cache_config_info ------------------------------------------------


def _cfg_str(cfg: dict[str, str], key: str) -> str | None:
    v = cfg.get(key)
    if v is None:
        return None
    v = v.strip()
    return None if v in ("", "None", "none", "null") else v


def _cfg_float(cfg: dict[str, str], key: str) -> float | None:
    v = _cfg_str(cfg, key)
    if v is None:
        return None
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _cfg_int(cfg: dict[str, str], key: str) -> int | None:
    x = _cfg_float(cfg, key)
    return int(x) if x is not None and x == int(x) else None


def cache_config_facts(sample: MetricsSample) -> StartupFacts:
    """Startup facts read from `vllm:cache_config_info` (None where the server did not say).

    kv_cache_tokens: `kv_cache_size_tokens` (0.32+), else num_gpu_blocks × block_size.
    kv_cache_gib: `kv_cache_memory_bytes` — only set when the server was launched with
    `--kv-cache-memory-bytes`; otherwise the KV size in bytes comes from the startup log.
    """
    cfg = sample.cache_config or {}
    facts = StartupFacts()
    facts.num_gpu_blocks = _cfg_int(cfg, "num_gpu_blocks")
    facts.block_size = _cfg_int(cfg, "block_size")
    facts.kv_cache_dtype = _cfg_str(cfg, "cache_dtype") or _cfg_str(cfg, "kv_cache_dtype")
    tokens = _cfg_int(cfg, "kv_cache_size_tokens")
    if tokens is None and facts.num_gpu_blocks is not None and facts.block_size is not None:
        tokens = facts.num_gpu_blocks * facts.block_size
    facts.kv_cache_tokens = tokens
    kv_bytes = _cfg_float(cfg, "kv_cache_memory_bytes")
    facts.kv_cache_gib = kv_bytes / 2**30 if kv_bytes is not None else None
    facts.max_concurrency_reported = _cfg_float(cfg, "kv_cache_max_concurrency")
    facts.gpu_memory_utilization = _cfg_float(cfg, "gpu_memory_utilization")
    pc = _cfg_str(cfg, "enable_prefix_caching")
    if pc is not None and pc.lower() in ("true", "false"):
        facts.prefix_caching = pc.lower() == "true"
    return facts


# --- deltas between two scrapes ---------------------------------------------------------------


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
