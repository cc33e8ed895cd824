"""The simulator's startup lines, in vLLM's own spelling, so the same log parser reads both."""

from __future__ import annotations

from typing import Any

from kvtui import __version__

SIM_VERSION = f"kvtui-sim {__version__}"


def print_startup(facts: Any, model_name: str, gpu: str, max_model_len: int, log=print) -> None:
    """Startup lines in vLLM's own spelling, so the same log parser reads the simulator."""
    log(f"INFO kvtui-sim: SIMULATED vLLM ({SIM_VERSION}) model={model_name} gpu={gpu} (no real GPU is used)")
    if facts.weights_gib is not None:
        log(f"INFO [gpu_model_runner.py] Model loading took {facts.weights_gib:.4f} GiB memory and 0.000000 seconds")
    if facts.kv_cache_gib is not None:
        log(f"INFO [gpu_worker.py] Available KV cache memory: {facts.kv_cache_gib:.2f} GiB")
    if facts.kv_cache_tokens is not None:
        log(f"INFO [kv_cache_utils.py] GPU KV cache size: {facts.kv_cache_tokens:,} tokens")
        log(
            f"INFO [kv_cache_utils.py] Maximum concurrency for {max_model_len:,} tokens per request: "
            f"{facts.kv_cache_tokens / max_model_len:.2f}x"
        )
    if facts.cuda_graph_gib is not None:
        log(f"INFO [gpu_model_runner.py] Graph capturing finished in 0 secs, took {facts.cuda_graph_gib:.2f} GiB")
    log("INFO:     Application startup complete.")
