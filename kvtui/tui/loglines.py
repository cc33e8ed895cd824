"""Which server log lines the log pane highlights: vLLM's startup facts, warnings, errors."""

from __future__ import annotations

import re

# Log lines worth a highlight: vLLM's startup facts and milestones (and the simulator's copies).
_FACT_LINE = re.compile(
    r"(Model loading took|model weights took|Available KV cache memory|KV cache size|Maximum concurrency|"
    r"CUDA graph|Graph capturing|torch\.compile|Compil(ed|ing)|init engine|Starting vLLM API server|"
    r"Application startup complete|Using .*backend|vLLM API server version|SIMULATED vLLM|kv_cache_dtype|"
    r"Loading weights|Loading safetensors)", re.I)
_WARN_LINE = re.compile(r"\b(WARNING|WARN)\b")
_ERR_LINE = re.compile(r"\b(ERROR|CRITICAL|Traceback|Exception|Error:)\b")


def classify_log_line(line: str) -> str:
    """'error', 'warning', 'fact' (a vLLM startup line worth highlighting) or ''."""
    if _ERR_LINE.search(line):
        return "error"
    if _WARN_LINE.search(line):
        return "warning"
    if _FACT_LINE.search(line):
        return "fact"
    return ""
