"""The lines of vLLM's startup log that kvtui reads: the startup phases in order and what marks
each, and the patterns of every fact (versions, weights, KV cache, CUDA graphs, settings) in the
spellings of the GPU build (0.26.0 and older) and the CPU build (0.32.0). Read by logparse.py."""

from __future__ import annotations

import re

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
