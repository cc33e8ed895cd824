"""The knee scenario, made by one factory (tests/conftest.py hands it out as fixtures).

The simulator's knee model (`kvtui sim serve --knee N`) makes an engine step take `tpot_ms`
with up to N running requests and `slowdown` times that above, so a TPOT target between the
two puts the max concurrency at the SLO exactly at N. Tests ask for the variant they need:

    knee_toml("three modes", knee=6, slowdown=2, modes=[{"name": "baseline"}], slo={"tpot_p95_ms": 30})
"""

from __future__ import annotations

import json
from typing import Any


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {type(v).__name__}")


def _table(header: str, d: dict[str, Any]) -> list[str]:
    lines = [header] if header else []
    subtables = []
    for k, v in d.items():
        if isinstance(v, dict):
            subtables.append((k, v))
        else:
            lines.append(f"{k} = {_value(v)}")
    name = header.strip("[]")
    for k, v in subtables:
        lines += _table(f"[{name}.{k}]", v)
    return lines


def to_toml(doc: dict[str, Any]) -> str:
    """A scenario dict as TOML: top-level keys, then tables, arrays of tables ([[modes]]) in order."""
    lines = [f"{k} = {_value(v)}" for k, v in doc.items() if not isinstance(v, (dict, list)) or
             (isinstance(v, list) and not any(isinstance(x, dict) for x in v))]
    for k, v in doc.items():
        if isinstance(v, dict):
            lines += _table(f"[{k}]", v)
        elif isinstance(v, list) and any(isinstance(x, dict) for x in v):
            for item in v:
                lines += _table(f"[[{k}]]", item)
    return "\n".join(lines) + "\n"


def knee_toml(name: str = "knee", *, knee: int = 6, tpot_ms: float = 20, slowdown: float | None = 3,
              server: dict[str, Any] | None = None, modes: list[dict[str, Any]] | None = None,
              workload: dict[str, Any] | None = None, ramp: dict[str, Any] | None = None,
              slo: dict[str, Any] | None = None, **rest: Any) -> str:
    """The knee scenario's TOML; each section's keys are merged over the defaults."""
    knee_args = ["--knee", str(knee), "--knee-tpot-ms", f"{tpot_ms:g}"]
    if slowdown is not None:
        knee_args += ["--knee-slowdown", f"{slowdown:g}"]
    top = {k: v for k, v in rest.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in rest.items() if isinstance(v, dict)}
    doc: dict[str, Any] = {"name": name, **top}
    doc["server"] = {"engine": "sim", "max_model_len": 2048, **(server or {}), "extra_args": knee_args}
    if modes:
        doc["modes"] = modes
    doc["workload"] = {"prompt_tokens": 64, "output_tokens": 16, **(workload or {})}
    doc["ramp"] = {"start": 1, "max": 16, "step": "double", **(ramp or {})}
    doc["slo"] = dict(slo or {"tpot_p95_ms": 30})
    doc.update(tables)
    return to_toml(doc)
