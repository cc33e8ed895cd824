"""Startup facts from vLLM's log, one line at a time.

`StartupLogParser.feed(line)` updates a `StartupFacts` and the startup phase as the log
streams in, so a UI can show "loading weights → torch.compile → KV cache → CUDA graphs →
ready" instead of a frozen screen. Spellings of the GPU build (0.26.0 and older v0/v1
releases) and of the CPU build (0.32.0) are all recognised; numbers may carry thousands
separators. `facts_from_cache_config()` turns the labels of `vllm:cache_config_info`
(from /metrics) into facts to merge under the log's.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Iterable

from kvtui.engines.base import StartupFacts

# Startup phases in the order vLLM goes through them. A phase is recorded when first seen and
# only moving forward (the CPU build skips CUDA graphs; older builds skip torch.compile).
STARTING = "starting"
ENGINE_INIT = "engine init"
LOADING_WEIGHTS = "loading weights"
TORCH_COMPILE = "torch.compile"
PROFILING_KV = "profiling / KV cache"
CUDA_GRAPHS = "CUDA graphs"
API_SERVER = "API server"
READY = "API server ready"
PHASES = (STARTING, ENGINE_INIT, LOADING_WEIGHTS, TORCH_COMPILE, PROFILING_KV, CUDA_GRAPHS, API_SERVER, READY)

UNCALIBRATED_FP8 = "uncalibrated fp8 KV scales (k/v scale 1.0)"

_NUM = r"[\d][\d,]*"  # 896,912 or 8192
_FLOAT = r"-?[\d]+(?:\.\d+)?(?:[eE][-+]?\d+)?"


def _int(s: str) -> int:
    return int(s.replace(",", ""))


def _float(s: str) -> float:
    return float(s.replace(",", ""))


_PHASE_RULES: list[tuple[str, re.Pattern[str]]] = [
    (ENGINE_INIT,
     re.compile(r"Initializing an? (?:V1 )?LLM engine|EngineCore.*(?:started|starting)|Resolved architecture")),
    (
        LOADING_WEIGHTS,
        re.compile(
            r"Starting to load model|Loading model from scratch|Loading model weights|"
            r"Loading (?:safetensors|pt) checkpoint shards|Loading weights took|Model loading took|"
            r"Initializing model took"
        ),
    ),
    (
        TORCH_COMPILE,
        re.compile(
            r"Dynamo bytecode transform|for vLLM's torch\.compile|Compiling a graph|Compiling model|"
            r"Warming up model for the compilation|torch\.compile (?:took|takes)|compiled function"
        ),
    ),
    (
        PROFILING_KV,
        re.compile(
            r"Memory profiling takes|Initial profiling/warmup run|Available KV cache memory|KV cache size:|"
            r"for KV cache on node|# \w+ blocks: \d|Maximum concurrency for|reserved for KV Cache"
        ),
    ),
    (CUDA_GRAPHS, re.compile(r"Capturing CUDA graph|Capturing cudagraphs|Graph capturing finished|capturing cudagraph",
                             re.I)),
    (
        API_SERVER,
        re.compile(
            r"init engine \(profile, create kv cache, warmup model\) took|Starting vLLM (?:API )?server on|"
            r"Available routes are|Supported tasks:|Waiting for application startup"
        ),
    ),
    (READY, re.compile(r"Application startup complete")),
]

# --- facts ---------------------------------------------------------------------------
RE_VERSION = [
    re.compile(r"Initializing an? (?:V1 )?LLM engine \(v(?P<v>[0-9][^)\s]*)\)"),
    re.compile(r"█\s+version (?P<v>[0-9][^\s]*)"),
    re.compile(r"vLLM API server version (?P<v>[0-9][^\s,]*)"),
]
RE_WEIGHTS = re.compile(
    rf"Model loading took (?P<gib>{_FLOAT}) (?P<unit>GiB|GB)(?: memory)?(?: and (?P<s>{_FLOAT}) s(?:ec(?:ond)?s?)?)?"
)
RE_WEIGHTS_V0 = re.compile(rf"Loading model weights took (?P<gib>{_FLOAT}) ?(?P<unit>GiB|GB)")
RE_LOAD_S = re.compile(rf"Loading weights took (?P<s>{_FLOAT}) s(?:ec(?:ond)?s?)?")
RE_KV_GIB_GPU = re.compile(rf"Available KV cache memory: (?P<gib>{_FLOAT}) GiB")
RE_KV_GIB_CPU = re.compile(rf"(?:Auto|Explicitly) set \((?P<kv>{_FLOAT})/(?P<total>{_FLOAT})\) GiB for KV cache")
RE_KV_TOKENS = re.compile(rf"(?P<dev>GPU|CPU|XPU|TPU|NPU)(?: \+ host)? KV cache size: (?P<tok>{_NUM}) tokens")
RE_MAX_CONC = re.compile(rf"Maximum concurrency for (?P<len>{_NUM}) tokens per request: (?P<x>{_FLOAT})x")
RE_BLOCKS_V0 = re.compile(r"# (?P<dev>GPU|CUDA|cuda|gpu|CPU|cpu|XPU|xpu|NPU|npu|HPU|hpu|TPU|tpu) blocks: (?P<n>\d+)")
RE_GRAPHS = re.compile(rf"Graph capturing finished in (?P<s>{_FLOAT}) secs?(?:, took (?P<gib>{_FLOAT}) GiB)?")
RE_INIT_ENGINE = re.compile(
    rf"init engine \(profile, create kv cache, warmup model\) took (?P<s>{_FLOAT}) s(?:ec(?:ond)?s?)?"
    rf"(?: \(compilation: (?P<c>{_FLOAT}) s\))?"
)
RE_COMPILE = re.compile(rf"torch\.compile (?:took|takes) (?P<s>{_FLOAT}) s in total")
# v0 and early v1: "the current vLLM instance can use total_gpu_memory (79.25GiB) x gpu_memory_utilization (0.15) =
# 11.89GiB"
RE_TOTAL_V0 = re.compile(rf"total_gpu_memory \((?P<tot>{_FLOAT}) ?GiB\) x gpu_memory_utilization \((?P<u>{_FLOAT})\)")
RE_PROFILE_V0 = re.compile(
    rf"model weights take (?P<w>{_FLOAT}) ?GiB; non_torch_memory takes (?P<nt>{_FLOAT}) ?GiB; "
    rf"PyTorch activation peak memory takes (?P<act>{_FLOAT}) ?GiB;? ?(?:the rest of the memory reserved for KV "
    rf"Cache is (?P<kv>{_FLOAT}) ?GiB)?"
)
RE_KV_REST_V0 = re.compile(rf"the rest of the memory reserved for KV Cache is (?P<kv>{_FLOAT}) ?GiB")
# 0.2x: "Free memory on device (139.29/139.8 GiB) on startup. Desired GPU memory utilization is (0.9, 125.82 GiB).
# Actual usage is 15.0 GiB for weight, 1.1 GiB for peak activation, 0.22 GiB for non-torch memory, and 0.98 GiB for
# CUDAGraph memory."
RE_FREE_ON_DEVICE = re.compile(rf"Free memory on device \((?P<free>{_FLOAT})/(?P<tot>{_FLOAT}) GiB\) on startup")
RE_DESIRED_UTIL = re.compile(rf"[Dd]esired GPU memory utilization (?:is )?\((?P<u>{_FLOAT}), (?P<des>{_FLOAT}) GiB\)")
RE_KV_IN_USE = re.compile(rf"Current kv cache memory in use is (?P<gib>{_FLOAT}) GiB")
RE_ACTUAL_USAGE = re.compile(
    rf"Actual usage is (?P<w>{_FLOAT}) GiB for weight, (?P<act>{_FLOAT}) GiB for peak activation, "
    rf"(?P<nt>{_FLOAT}) GiB for non-torch memory, and (?P<cg>{_FLOAT}) GiB for CUDAGraph memory"
)
RE_ATTN = [
    re.compile(r"Using (?P<b>[A-Z][A-Z0-9_]+) attention backend"),  # v1: "Using FLASH_ATTN attention backend out of …"
    re.compile(r"Using (?P<b>[A-Za-z][\w ]*?) backend(?: on V1 engine)?\.\s*$"),  # "Using Flash Attention backend."
    re.compile(r"Using (?P<b>[A-Za-z][\w]*) (?:attention )?backend for"),
]
RE_FA_VERSION = re.compile(r"Using FlashAttention version (?P<v>\d+)")
RE_CHUNKED = re.compile(r"[Cc]hunked prefill is enabled with max_num_batched_tokens=(?P<n>\d+)")
RE_MAX_MODEL_LEN = re.compile(r"Using max model len (?P<n>\d+)")
RE_NON_DEFAULT = re.compile(r"non-default args: (?P<d>\{.*\})\s*$")
RE_ENGINE_CONFIG = re.compile(r"(?:LLM engine|engine) \(v[^)]*\) with config: (?P<c>.*)$")
RE_FP8_KV_NOTE = re.compile(r"Using fp8 data type to store kv cache")
RE_FP8_SCALE = re.compile(
    r"Using KV cache scaling factor 1\.0|Using uncalibrated (?:q_scale|k_scale|v_scale|scales?)|"
    r"[Cc]heckpoint does not provide a q scaling factor|KV cache scaling factors? (?:are )?not "
    r"(?:provided|found|loaded)"
)
RE_EXPLICIT_KV_BYTES = re.compile(r"kv_cache_memory_bytes['\"]?\s*[:=]\s*(?P<n>\d+)")

_CONFIG_KEYS = {
    "dtype": re.compile(r"(?:^|, )dtype=(?:torch\.)?(?P<v>[\w]+)"),
    "kv_cache_dtype": re.compile(r"(?:^|, )kv_cache_dtype=(?P<v>[\w]+)"),
    "quantization": re.compile(r"(?:^|, )quantization=(?P<v>[\w-]+)"),
    "enable_prefix_caching": re.compile(r"(?:^|, )enable_prefix_caching=(?P<v>\w+)"),
    "enforce_eager": re.compile(r"(?:^|, )enforce_eager=(?P<v>\w+)"),
    "max_seq_len": re.compile(r"(?:^|, )max_seq_len=(?P<v>\d+)"),
    "load_format": re.compile(r"(?:^|, )load_format=(?P<v>[\w.]+)"),
    "device": re.compile(r"(?:^|, )device_config=(?P<v>\w+)"),
    "tensor_parallel_size": re.compile(r"(?:^|, )tensor_parallel_size=(?P<v>\d+)"),
    "cudagraph_capture_sizes": re.compile(r"'cudagraph_capture_sizes': \[(?P<v>[\d, ]*)\]"),
    "cudagraph_mode": re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(?P<v>\w+)"),
}

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def clean_line(line: str) -> str:
    """Strip colour codes and line endings; of a tqdm line redrawn with \\r keep the last state."""
    line = _ANSI.sub("", line).rstrip("\r\n")
    if "\r" in line:
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    return line


class StartupLogParser:
    """Feed it vLLM's log lines; read `facts`, `phase`, `version` and `extra` at any time.

    >>> p = StartupLogParser()
    >>> p.feed("(EngineCore pid=1) INFO 11-29 08:17:43 [kv_cache_utils.py:2177] GPU KV cache size: 896,912 tokens")
    'profiling / KV cache'
    >>> p.facts.kv_cache_tokens
    896912
    """

    def __init__(self, facts: StartupFacts | None = None):
        self.facts = facts if facts is not None else StartupFacts()
        if not self.facts.phases:
            self.facts.phases.append(STARTING)
        self.version: str | None = None
        self.max_model_len: int | None = None
        # Everything else the log says about the effective server settings:
        # dtype, quantization, load_format, enforce_eager, cudagraph_capture_sizes, flash_attn_version …
        self.extra: dict[str, Any] = {}
        self.lines = 0
        self._fp8_kv = False
        self._weights_from_v0_profile = False

    # --- public -------------------------------------------------------------------------
    @property
    def phase(self) -> str:
        return self.facts.phases[-1] if self.facts.phases else STARTING

    @property
    def ready(self) -> bool:
        return READY in self.facts.phases

    def feed_many(self, lines: Iterable[str]) -> "StartupLogParser":
        for line in lines:
            self.feed(line)
        return self

    def feed(self, line: str) -> str | None:
        """Parse one line. Returns the new phase when this line moved the startup forward."""
        line = clean_line(line)
        if not line.strip():
            return None
        self.lines += 1
        self._facts(line)
        return self._phase(line)

    def mark_phase(self, phase: str) -> str | None:
        """Record a phase known from outside the log (e.g. /health answered 200)."""
        if phase not in PHASES:
            raise ValueError(phase)
        cur = PHASES.index(self.phase) if self.phase in PHASES else 0
        if PHASES.index(phase) > cur:
            self.facts.phases.append(phase)
            return phase
        return None

    # --- internals ----------------------------------------------------------------------
    def _phase(self, line: str) -> str | None:
        new = None
        for phase, rx in _PHASE_RULES:
            if rx.search(line):
                new = phase  # the latest phase a line speaks of
        return self.mark_phase(new) if new else None

    def _warn(self, text: str) -> None:
        if text not in self.facts.warnings:
            self.facts.warnings.append(text)

    def _facts(self, line: str) -> None:  # noqa: C901 - one flat list of patterns reads best
        f = self.facts
        if self.version is None:
            for rx in RE_VERSION:
                m = rx.search(line)
                if m:
                    self.version = m.group("v")
                    break

        m = RE_WEIGHTS.search(line)
        if m:
            f.weights_gib = _gib(m.group("gib"), m.group("unit"))
            if m.group("s"):
                f.load_s = _float(m.group("s"))
            return
        m = RE_WEIGHTS_V0.search(line)
        if m:
            f.weights_gib = _gib(m.group("gib"), m.group("unit"))
            return
        m = RE_LOAD_S.search(line)
        if m:
            if f.load_s is None:  # "Model loading took … and N seconds" (the total) wins
                f.load_s = _float(m.group("s"))
            return
        m = RE_KV_GIB_GPU.search(line)
        if m:
            f.kv_cache_gib = _float(m.group("gib"))
            return
        m = RE_KV_GIB_CPU.search(line)
        if m:
            f.kv_cache_gib = _float(m.group("kv"))
            f.device = f.device or "CPU"
            self.extra["cpu_kv_space_total_gib"] = _float(m.group("total"))
            return

        hit = False
        m = RE_KV_TOKENS.search(line)
        if m:
            f.kv_cache_tokens = _int(m.group("tok"))
            f.device = "GPU" if m.group("dev") == "GPU" else m.group("dev")
            hit = True
        m = RE_MAX_CONC.search(line)  # on the same line as the size in 0.32, the next line in 0.26
        if m:
            f.max_concurrency_len = _int(m.group("len"))
            f.max_concurrency_reported = _float(m.group("x"))
            hit = True
        if hit:
            return
        m = RE_BLOCKS_V0.search(line)
        if m:
            f.num_gpu_blocks = int(m.group("n"))
            dev = m.group("dev").upper()
            f.device = f.device or ("GPU" if dev in ("GPU", "CUDA") else dev)
            return
        m = RE_GRAPHS.search(line)
        if m:
            self.extra["cuda_graph_s"] = _float(m.group("s"))
            if m.group("gib"):
                f.cuda_graph_gib = _float(m.group("gib"))
            return
        m = RE_INIT_ENGINE.search(line)
        if m:
            f.init_engine_s = _float(m.group("s"))
            if m.group("c") and f.compile_s is None:
                f.compile_s = _float(m.group("c"))
            return
        m = RE_COMPILE.search(line)
        if m:
            f.compile_s = _float(m.group("s"))
            return

        m1 = RE_FREE_ON_DEVICE.search(line)
        if m1:
            f.gpu_total_gib = _float(m1.group("tot"))
            self.extra["gpu_free_at_start_gib"] = _float(m1.group("free"))
        m = RE_DESIRED_UTIL.search(line)
        if m:
            f.gpu_memory_utilization = _float(m.group("u"))
        m2 = RE_ACTUAL_USAGE.search(line)
        if m2:
            f.activation_peak_gib = _float(m2.group("act"))
            self.extra["non_torch_gib"] = _float(m2.group("nt"))
            if f.weights_gib is None:
                f.weights_gib = _float(m2.group("w"))
            if f.cuda_graph_gib is None:
                f.cuda_graph_gib = _float(m2.group("cg"))
        m = RE_KV_IN_USE.search(line)
        if m and f.kv_cache_gib is None:
            f.kv_cache_gib = _float(m.group("gib"))
        if m1 or m2:
            return
        m = RE_TOTAL_V0.search(line)
        if m:
            f.gpu_total_gib = _float(m.group("tot"))
            f.gpu_memory_utilization = _float(m.group("u"))
        m = RE_PROFILE_V0.search(line)
        if m:
            if f.weights_gib is None:
                f.weights_gib = _float(m.group("w"))
            f.activation_peak_gib = _float(m.group("act"))
            self.extra["non_torch_gib"] = _float(m.group("nt"))
        m = RE_KV_REST_V0.search(line)
        if m:
            f.kv_cache_gib = _float(m.group("kv"))
            return

        for rx in RE_ATTN:
            m = rx.search(line)
            if m and "Triton" not in m.group("b") and "mamba" not in line:
                f.attention_backend = m.group("b").strip()
                return
        m = RE_FA_VERSION.search(line)
        if m:
            self.extra["flash_attn_version"] = int(m.group("v"))
            return
        m = RE_CHUNKED.search(line)
        if m:
            f.max_num_batched_tokens = int(m.group("n"))
            return
        m = RE_MAX_MODEL_LEN.search(line)
        if m:
            self.max_model_len = int(m.group("n"))
            return
        m = RE_NON_DEFAULT.search(line)
        if m:
            self._non_default(m.group("d"))
            return
        m = RE_ENGINE_CONFIG.search(line)
        if m:
            self._engine_config(m.group("c"))
            return
        if RE_FP8_KV_NOTE.search(line):
            self._fp8_kv = True
            f.kv_cache_dtype = f.kv_cache_dtype or "fp8"
            if self.extra.get("quantization", "") is None:  # engine config already said: no quantized checkpoint
                self._warn(UNCALIBRATED_FP8)
            return
        if RE_FP8_SCALE.search(line):
            self._warn(UNCALIBRATED_FP8)
            return

    def _non_default(self, text: str) -> None:
        try:
            args = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            args = {}
            for key in ("max_num_seqs", "max_num_batched_tokens", "kv_cache_memory_bytes", "max_model_len"):
                m = re.search(rf"'{key}': (\d+)", text)
                if m:
                    args[key] = int(m.group(1))
            m = re.search(r"'enable_prefix_caching': (True|False)", text)
            if m:
                args["enable_prefix_caching"] = m.group(1) == "True"
        if not isinstance(args, dict):
            return
        self.extra["non_default_args"] = args
        f = self.facts
        if isinstance(args.get("max_num_seqs"), int):
            f.max_num_seqs = args["max_num_seqs"]
        if isinstance(args.get("max_num_batched_tokens"), int):
            f.max_num_batched_tokens = args["max_num_batched_tokens"]
        if isinstance(args.get("enable_prefix_caching"), bool):
            f.prefix_caching = args["enable_prefix_caching"]
        if isinstance(args.get("gpu_memory_utilization"), (int, float)):
            f.gpu_memory_utilization = float(args["gpu_memory_utilization"])
        if isinstance(args.get("kv_cache_dtype"), str):
            f.kv_cache_dtype = args["kv_cache_dtype"]
        if isinstance(args.get("kv_cache_memory_bytes"), int):
            self.extra["kv_cache_memory_bytes"] = args["kv_cache_memory_bytes"]
        if isinstance(args.get("max_model_len"), int):
            self.max_model_len = args["max_model_len"]

    def _engine_config(self, text: str) -> None:
        f = self.facts
        for key, rx in _CONFIG_KEYS.items():
            m = rx.search(text)
            if not m:
                continue
            v = m.group("v")
            if key == "enable_prefix_caching":
                f.prefix_caching = v == "True"
            elif key == "kv_cache_dtype":
                f.kv_cache_dtype = v
                self._fp8_kv = self._fp8_kv or v.startswith("fp8")
            elif key == "device":
                f.device = {"cuda": "GPU", "cpu": "CPU"}.get(v, v.upper())
            elif key == "max_seq_len":
                self.max_model_len = self.max_model_len or int(v)
            elif key == "cudagraph_capture_sizes":
                self.extra[key] = [int(x) for x in v.split(",") if x.strip()]
            elif key == "quantization":
                self.extra[key] = None if v == "None" else v
            elif key == "enforce_eager":
                self.extra[key] = v == "True"
            elif key == "tensor_parallel_size":
                self.extra[key] = int(v)
            else:
                self.extra[key] = v
        # fp8 KV with an unquantized checkpoint: no k/v scales exist, vLLM uses 1.0.
        if self._fp8_kv and self.extra.get("quantization", "") is None:
            self._warn(UNCALIBRATED_FP8)


def _gib(value: str, unit: str | None) -> float:
    """vLLM's "GB" in old lines is GiB too (divides by 2**30)."""
    return _float(value)


def parse_log(lines: Iterable[str] | str) -> StartupLogParser:
    """Parse a whole log (text or lines) at once."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    return StartupLogParser().feed_many(lines)


# --- /metrics: vllm:cache_config_info ------------------------------------------------------
def _num(labels: dict[str, str], key: str, cast=float):
    v = labels.get(key)
    if v in (None, "", "None", "none"):
        return None
    try:
        return cast(float(v)) if cast is int else cast(v)
    except (TypeError, ValueError):
        return None


def facts_from_cache_config(labels: dict[str, str]) -> StartupFacts:
    """The labels of `vllm:cache_config_info` (strings) as StartupFacts."""
    f = StartupFacts()
    f.num_gpu_blocks = _num(labels, "num_gpu_blocks", int)
    f.block_size = _num(labels, "block_size", int)
    f.gpu_memory_utilization = _num(labels, "gpu_memory_utilization")
    f.kv_cache_tokens = _num(labels, "kv_cache_size_tokens", int)
    f.max_concurrency_reported = _num(labels, "kv_cache_max_concurrency")
    dtype = labels.get("cache_dtype")
    if dtype and dtype != "None":
        f.kv_cache_dtype = dtype
    pc = labels.get("enable_prefix_caching")
    if pc in ("True", "False"):
        f.prefix_caching = pc == "True"
    kv_bytes = _num(labels, "kv_cache_memory_bytes", int)
    if kv_bytes:
        f.kv_cache_gib = kv_bytes / 2**30
    if f.kv_cache_tokens is None and f.num_gpu_blocks and f.block_size:
        f.kv_cache_tokens = f.num_gpu_blocks * f.block_size
    return f


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
    except ValueError:
        return None
    return None
