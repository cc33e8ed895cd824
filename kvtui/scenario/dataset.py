"""A scenario's dataset file (`[workload] dataset`): JSON Lines of prompts, read and checked row by
row when the scenario loads, so a bad row is a scenario error before any server starts. The load
generator (kvtui.load.workload.PromptFactory) sends its rows."""

from __future__ import annotations

import json
from typing import Any

from kvtui.errors import UsageError


class Dataset:
    """JSON Lines prompts: {"prompt": str} | {"messages": [...]} | {"prompt_ids": [int]}, optional "output_tokens"."""

    def __init__(self, path: str):
        self.path = path
        self.rows: list[dict[str, Any]] = []
        from kvtui.safeio import DATASET_CAP, read_text_file

        text = read_text_file(path, "dataset", DATASET_CAP)  # regular file, capped; not UTF-8: one line
        for no, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UsageError(f"{path}:{no}: not JSON: {e.msg}")
            if not isinstance(row, dict) or not any(k in row for k in ("prompt", "messages", "prompt_ids")):
                raise UsageError(f"{path}:{no}: each line needs \"prompt\", \"messages\" or \"prompt_ids\"")
            why = _row_problem(row)
            if why:
                raise UsageError(f"{path}:{no}: {why}")
            ot = row.get("output_tokens")
            if ot is not None and (not isinstance(ot, int) or ot < 1):
                raise UsageError(f"{path}:{no}: output_tokens must be a positive integer")
            self.rows.append(row)
        if not self.rows:
            raise UsageError(f"{path}: dataset is empty")


def _row_problem(row: dict[str, Any]) -> str | None:
    """Why a dataset row cannot be sent as it is (checked when the scenario loads, before any server)."""
    if "prompt" in row and not isinstance(row["prompt"], str):
        return f"\"prompt\" must be a string, got {type(row['prompt']).__name__}"
    if "messages" in row:
        m = row["messages"]
        if not isinstance(m, list) or not m or not all(
                isinstance(x, dict) and isinstance(x.get("role"), str) and isinstance(x.get("content"), str)
                for x in m):
            return "\"messages\" must be a non-empty list of {\"role\": str, \"content\": str}"
    if "prompt_ids" in row:
        ids = row["prompt_ids"]
        if not isinstance(ids, list) or not ids or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            return "\"prompt_ids\" must be a non-empty list of token ids (integers ≥ 0)"
    ot = row.get("output_tokens")
    if isinstance(ot, bool):
        return "output_tokens must be a positive integer"
    return None
