"""The per-replica figures of a telemetry row as series columns (kvtui.tui.replicas_panel draws them).

A row's `replicas` (kvtui.runtime.telemetry.replicas.replica_view) is a list of {name, up, kv_usage,
running, waiting, preemptions}; each becomes `replica:NAME:KEY` columns of the mode's series,
so a replay's step cursor cuts them like every other column.
"""

from __future__ import annotations

from typing import Any

# The per-replica keys of a telemetry row (kvtui.runtime.telemetry.replicas.replica_view), as series columns.
FIELDS = ("kv_usage", "running", "waiting", "preemptions", "up")
MAX_REPLICAS = 16  # a snapshot naming thousands is refused past this (the panel shows 9 lines)


def column(name: str, key: str) -> str:
    return f"replica:{name}:{key}"


def series_values(row: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The series columns of one telemetry row's `replicas`; new names are appended to `names`."""
    vals: dict[str, Any] = {}
    for x in row.get("replicas") or []:
        if not isinstance(x, dict) or not isinstance(x.get("name"), str):
            continue
        name = x["name"][:24]
        if name not in names:
            if len(names) >= MAX_REPLICAS:
                continue
            names.append(name)
        for key in FIELDS[:-1]:
            vals[column(name, key)] = x.get(key)
        vals[column(name, "up")] = 1.0 if x.get("up") else 0.0
    return vals
