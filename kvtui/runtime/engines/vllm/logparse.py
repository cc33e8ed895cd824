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

from kvtui.runtime.engines.base import StartupFacts
from kvtui.runtime.engines.vllm.cache_facts import facts_from_cache_config, facts_from_metrics_text  # noqa: F401
from kvtui.runtime.engines.vllm.logpatterns import (  # noqa: F401 - logparse's names, as callers import them
    _CONFIG_KEYS,
    _PHASE_RULES,
    API_SERVER,
    CUDA_GRAPHS,
    ENGINE_INIT,
    LOADING_WEIGHTS,
    PHASES,
    PROFILING_KV,
    RE_ACTUAL_USAGE,
    RE_ATTN,
    RE_BLOCKS_V0,
    RE_CHUNKED,
    RE_COMPILE,
    RE_DESIRED_UTIL,
    RE_ENGINE_CONFIG,
    RE_FA_VERSION,
    RE_FP8_KV_NOTE,
    RE_FP8_SCALE,
    RE_FREE_ON_DEVICE,
    RE_GRAPHS,
    RE_INIT_ENGINE,
    RE_KV_GIB_CPU,
    RE_KV_GIB_GPU,
    RE_KV_IN_USE,
    RE_KV_REST_V0,
    RE_KV_TOKENS,
    RE_LOAD_S,
    RE_MAX_CONC,
    RE_MAX_MODEL_LEN,
    RE_NON_DEFAULT,
    RE_PROFILE_V0,
    RE_TOTAL_V0,
    RE_VERSION,
    RE_WEIGHTS,
    RE_WEIGHTS_V0,
    READY,
    STARTING,
    TORCH_COMPILE,
    UNCALIBRATED_FP8,
    _float,
    _int,
    clean_line,
)

# torch.compile's cache (vllm/compilation/backends.py, decorators.py; the same words in 0.26 and 0.32)
RE_COMPILE_CACHE_DIR = re.compile(r"Using cache directory: (?P<d>\S+) for vLLM's torch\.compile")
RE_COMPILE_CACHE_LOAD = re.compile(r"Directly load (?:the compiled graph|AOT compilation)")
RE_COMPILE_GRAPH = re.compile(r"Compiling a graph for ")


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

    def _compile_cache(self, line: str) -> bool:
        """torch.compile's cache: loaded from it (hit) or compiled (miss; the launcher tells a cold
        root from a warm one, kvtui.runtime.engines.vllm.compile_cache)."""
        f = self.facts
        m = RE_COMPILE_CACHE_DIR.search(line)
        if m:
            f.compile_cache_dir = m.group("d")
            return True
        if RE_COMPILE_CACHE_LOAD.search(line):
            f.compile_cache = "hit" if f.compile_cache in (None, "hit") else f.compile_cache
            return True
        if RE_COMPILE_GRAPH.search(line):
            f.compile_cache = "miss"  # one graph compiled: the start paid for a compile
            return True
        return False

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
            f.weights_gib = _gib(m.group("gib"))
            if m.group("s"):
                f.load_s = _float(m.group("s"))
            return
        m = RE_WEIGHTS_V0.search(line)
        if m:
            f.weights_gib = _gib(m.group("gib"))
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
        if self._compile_cache(line):
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


def _gib(value: str) -> float:
    """vLLM's "GB" in old lines is GiB too (divides by 2**30)."""
    return _float(value)


def parse_log(lines: Iterable[str] | str) -> StartupLogParser:
    """Parse a whole log (text or lines) at once."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    return StartupLogParser().feed_many(lines)
