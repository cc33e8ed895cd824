"""The expected value of a token-length distribution (kvtui.io.scenario.schema.Length), computed once.

The KV-bound guess (explore), the simulator's typical request (simulator/engine) and the
dashboard's prediction all ask "how long is a request, on average"; they ask here.
"""

from __future__ import annotations

from typing import Any


def expected(length: Any) -> float:
    """The mean of a Length: its value (fixed), the middle of its range (uniform), its mean otherwise."""
    if length.dist == "fixed":
        return float(length.value)
    if length.dist == "uniform":
        return (length.min + length.max) / 2
    return float(length.mean)


def mean_request_tokens(workload: Any) -> float:
    """A request's mean prompt + output tokens over all its turns."""
    return (expected(workload.prompt_tokens) + expected(workload.output_tokens)) * workload.turns
