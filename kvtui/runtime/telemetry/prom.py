"""vLLM's Prometheus `/metrics`: parse and scrape (kvtui.runtime.telemetry.prom_windows merges replicas' samples
and takes deltas between scrapes; kvtui.runtime.telemetry.cache_config reads the startup facts).

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
from collections import defaultdict
from typing import Any, Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from kvtui import clock as seam
from kvtui.runtime.telemetry.types import Histogram, MetricsSample

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


def failed_sample(t: float, error: str) -> MetricsSample:
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
        return failed_sample(t, f"not text: {type(text).__name__}")
    if not text.strip():
        return failed_sample(t, "empty /metrics body")
    if select:
        text = _select_lines(text)
        if not text:
            return failed_sample(t, "no vllm:* metrics in the /metrics body")

    # (kind, field) → {rank: accumulated}; only the best-ranked spelling present is kept.
    gauge_vals: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    counter_vals: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    hist_vals: dict[str, dict[int, Histogram]] = defaultdict(dict)
    cache_config: dict[str, str] = {}
    seen_vllm = False
    bad: dict[str, str] = {}  # field or histogram key -> its first series out of range
    # Per `engine` label (vLLM's data-parallel ranks): the gauges and preemptions of each rank.
    per_engine: dict[str, dict[tuple[str, int], list[float]]] = defaultdict(lambda: defaultdict(list))
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
                if not _valid(key, value, part):
                    # checked series by series, before any sum or mean: -5 on one engine and +10 on
                    # another must not pass as 5, nor 1.5 and 0.3 as a mean of 0.9
                    bad.setdefault(key, f"{key}{part}={value!r}"
                                        + (f" (engine {s.labels['engine']})" if "engine" in s.labels else ""))
                    continue
                if key in _PER_ENGINE and "engine" in s.labels:
                    per_engine[str(s.labels["engine"])][(key, rank)].append(value)
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
        return failed_sample(t, f"unparseable /metrics: {_short(exc)}")
    if not seen_vllm:
        return failed_sample(t, "no vllm:* metrics in the /metrics body")

    sample = MetricsSample(t=t, cache_config=cache_config)
    for key, why in bad.items():  # a field with one series out of range is no figure at all
        sample.out_of_range.append(why)
        gauge_vals.pop(key, None)
        counter_vals.pop(key, None)
        hist_vals.pop(key, None)
        for figs in per_engine.values():
            for k in [k for k in figs if k[0] == key]:
                del figs[k]
    for key, by_rank in gauge_vals.items():
        vals = by_rank[min(by_rank)]
        if key == "kv_usage":
            setattr(sample, key, sum(vals) / len(vals))
        else:
            setattr(sample, key, sum(vals))
    for key, counters in counter_vals.items():
        setattr(sample, key, counters[min(counters)])
    for key, hists in hist_vals.items():
        hist = hists[min(hists)]
        hist.buckets = dict(sorted(hist.buckets.items()))
        sample.histograms[key] = hist
    if len(per_engine) > 1:
        sample.engines = {eng: _engine_figures(vals) for eng, vals in sorted(per_engine.items(), key=_engine_order)}
    check_ranges(sample)
    return sample


# /metrics values are untrusted numbers too: `kv_cache_usage_perc 57.0` was once shown as "KV
# 5700%" and passed; a negative running count was stored; a NaN printed as "nan%". Each series
# has a valid range; a value outside it is dropped (None) and named in `out_of_range`: every
# series as it is parsed (before any sum over labels), and the totals again (a sum can overflow).
MAX_COUNT = 2.0**53  # a count past what a float holds exactly is no count (1e308 requests running)


def _valid(field: str, v: float, part: str = "") -> bool:
    if not math.isfinite(v):
        return False
    if field == "kv_usage":
        return 0.0 <= v <= 1.0  # a fraction (vLLM's *_perc gauges are 0–1)
    if part == "_sum":
        return v >= 0.0  # a histogram's sum of seconds
    # every count: requests running or waiting, a counter, a histogram's count and buckets
    return 0.0 <= v <= MAX_COUNT and v.is_integer()


def histogram_problem(h: Histogram) -> str | None:
    """Why a histogram's parts cannot be one histogram (None when they can): each part in its
    range, buckets that never go down as `le` grows, and a +Inf bucket equal to the count."""
    if not _valid("", h.sum, "_sum") or not _valid("", h.count):
        return f"sum={h.sum!r} count={h.count!r}"
    prev = 0.0
    for le, c in sorted(h.buckets.items()):
        if not _valid("", c) or c < prev:
            return f"bucket le={le:g} = {c!r} after {prev!r}"
        prev = c
    if math.inf in h.buckets and h.buckets[math.inf] != h.count:
        return f"+Inf bucket {h.buckets[math.inf]!r} != count {h.count!r}"
    return None


def check_ranges(sample: MetricsSample) -> MetricsSample:
    """Drop every gauge, counter or histogram value outside its valid range, naming it."""
    for name in GAUGE_FIELDS + COUNTER_FIELDS:
        v = getattr(sample, name)
        if v is not None and not _valid(name, v):
            sample.out_of_range.append(f"{name}={v!r}")
            setattr(sample, name, None)
    for key, h in list(sample.histograms.items()):
        why = histogram_problem(h)
        if why:
            sample.out_of_range.append(f"{key} histogram ({why})")
            del sample.histograms[key]
    for eng, figs in sample.engines.items():
        for name, v in list(figs.items()):
            if not _valid(name, v):
                sample.out_of_range.append(f"engine {eng} {name}={v!r}")
                del figs[name]
    return sample


# What the per-rank view shows of each data-parallel engine.
_PER_ENGINE = ("kv_usage", "running", "waiting", "preemptions")


def _engine_order(item: tuple[str, Any]) -> tuple[int, str]:
    return (int(item[0]), "") if item[0].isdigit() else (1 << 30, item[0])


def _engine_figures(vals: dict[tuple[str, int], list[float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key in _PER_ENGINE:
        ranks = sorted(r for k, r in vals if k == key)
        if ranks:
            v = vals[(key, ranks[0])]
            out[key] = sum(v) / len(v) if key == "kv_usage" else sum(v)
    return out


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
        clock: Callable[[], float] = seam.monotonic,
        headers: dict[str, str] | None = None,
    ) -> None:
        """`headers`: sent as given (another auth than a bearer key, say); `api_key` adds a bearer."""
        self.url = url
        self.timeout_s = timeout_s
        self._clock = clock
        headers = {"Accept": "text/plain", **(headers or {})}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        # A loopback server (the one kvtui launched) never goes through an HTTP(S)_PROXY
        # from the environment; a remote replica may need one.
        try:
            host = (httpx.URL(url).host or "").lower()
        except Exception:  # a malformed URL fails at scrape time, as an ok=False sample
            host = ""
        loopback = host in ("localhost", "::1") or host.startswith("127.")
        from kvtui.safeio import http_client

        # every socket wait within the scrape's whole deadline (a trickled header or body too)
        self._client = http_client(timeout=httpx.Timeout(timeout_s), headers=headers, trust_env=not loopback)

    def fetch_text(self) -> tuple[str | None, str | None]:
        """The body of one GET, bounded in size and time: (text, None), or (None, why). Never raises."""
        from kvtui.safeio import total_deadline

        deadline = seam.monotonic() + self.timeout_s
        try:
            with total_deadline(self.timeout_s), self._client.stream("GET", self.url) as resp:
                if resp.status_code != 200:
                    hint = " (API key?)" if resp.status_code in (401, 403) else ""
                    return None, f"HTTP {resp.status_code}{hint} from {self.url}"
                chunks: list[bytes] = []
                size = 0
                for chunk in resp.iter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > self.MAX_BODY_BYTES:
                        return None, f"body over {self.MAX_BODY_BYTES // 2**20} MiB from {self.url}"
                    if seam.monotonic() > deadline:
                        return None, f"timed out after {self.timeout_s:g} s reading {self.url}"
                encoding = resp.encoding or "utf-8"
        except httpx.TimeoutException:
            return None, f"timed out after {self.timeout_s:g} s ({self.url})"
        except httpx.ConnectError as exc:
            msg = str(exc).lower()
            what = "connection refused" if "refused" in msg else f"cannot connect ({_short(exc, 80)})"
            return None, f"{what} ({self.url})"
        except httpx.HTTPError as exc:
            return None, f"{_short(exc)} ({self.url})"
        except Exception as exc:  # anything else httpx or the socket layer throws
            return None, f"{_short(exc)} ({self.url})"
        return b"".join(chunks).decode(encoding, errors="replace"), None

    def scrape(self) -> MetricsSample:
        body, why = self.fetch_text()
        if body is None:
            return self._fail(why or "no body")
        sample = parse_metrics(body, self._clock())
        if not sample.ok:
            sample.error = f"metrics unavailable: {sample.error} ({self.url})"
        return sample

    def _fail(self, why: str) -> MetricsSample:
        return failed_sample(self._clock(), f"metrics unavailable: {why}")

    def close(self) -> None:
        try:
            self._client.close()
        except Exception:
            pass

    def __enter__(self) -> "MetricsScraper":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
