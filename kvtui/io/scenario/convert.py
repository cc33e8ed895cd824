"""TOML values into the scenario's dataclasses, every problem collected with its field's path
(the loader adds the file and line): types, lengths, the [slo] table. Used by kvtui.io.scenario.loader."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import typing
from typing import Any

from kvtui.io.scenario.locate import LineIndex
from kvtui.io.scenario.schema import (
    DISTS,
    RANGES,
    SLO_KEY,
    SLO_LATENCY_KEYS,
    Length,
    Mode,
    Slo,
    out_of_range,
)

_TOP_KEYS = ("name", "description", "seed", "server", "modes", "workload", "ramp", "slo", "cost", "quality")


class _Problems:
    def __init__(self, source: str, index: LineIndex | None):
        self.source = source
        self.index = index
        self.items: list[str] = []

    def add(self, path: tuple, message: str, line: int | None = None) -> None:
        dotted = _dotted(path)
        given = self.index.override(path) if self.index is not None else None
        if line is None:
            line = self.index.line(path) if self.index else 0
        where = f"{self.source}:{line}" if line else self.source
        if given is not None:  # the value came from the command line: said there
            where = f"{self.source}: --set {given}"
        self.items.append(f"{where}: {dotted}: {message}" if dotted else f"{where}: {message}")


def _dotted(path: tuple) -> str:
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out


def _suggest(key: str, valid: typing.Iterable[str]) -> str:
    near = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return f" (did you mean '{near[0]}'?)" if near else ""


def _type_name(v: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a table"}.get(
        type(v), type(v).__name__
    )


def _convert(value: Any, hint: Any, path: tuple, probs: _Problems) -> Any:
    """Check `value` against a field's type hint; return the converted value or None."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)) and type(None) in args:
        inner = [a for a in args if a is not type(None)][0]
        return _convert(value, inner, path, probs)
    if hint is bool:
        if isinstance(value, bool):
            return value
        probs.add(path, f"must be true or false, got {_type_name(value)} {value!r}")
        return None
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        probs.add(path, f"must be an integer, got {_type_name(value)} {value!r}")
        return None
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):  # TOML has inf and nan; no scenario value means them
                probs.add(path, f"must be a finite number, got {value!r}")
                return None
            return float(value)
        probs.add(path, f"must be a number, got {_type_name(value)} {value!r}")
        return None
    if hint is str:
        if isinstance(value, str):
            return value
        probs.add(path, f"must be a string, got {_type_name(value)} {value!r}")
        return None
    if origin is list and args and args[0] is int:
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            probs.add(path, f"must be a list of integers, got {value!r}")
            return None
        return list(value)
    if origin is list:
        if isinstance(value, str):  # "a b c" is a common way to write extra args
            value = value.split()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            probs.add(path, f"must be a list of strings, got {value!r}")
            return None
        return list(value)
    if origin is dict:
        if not isinstance(value, dict):
            probs.add(path, f"must be a table of names to strings, got {_type_name(value)}")
            return None
        out = {}
        for k, v in value.items():
            if isinstance(v, (str, int, float)) and not isinstance(v, bool):
                out[str(k)] = str(v)
            else:
                probs.add(path + (k,), f"must be a string, got {_type_name(v)}")
        return out
    if hint is Length:
        return _length(value, path, probs)
    raise TypeError(f"no converter for {hint}")  # a schema bug, not user input


def _length(value: Any, path: tuple, probs: _Problems) -> Length | None:
    if isinstance(value, bool):
        probs.add(path, "must be a token count or a table like {dist = \"uniform\", min = 512, max = 2048}")
        return None
    if isinstance(value, int):
        if value < 1:
            probs.add(path, f"must be ≥ 1 token, got {value}")
            return None
        why = out_of_range(("length", "value"), value)
        if why:
            probs.add(path, why)
            return None
        return Length(dist="fixed", value=value, min=value, max=value)
    if not isinstance(value, dict):
        probs.add(path, f"must be a token count or a distribution table, got {_type_name(value)} {value!r}")
        return None
    valid = {"dist", "value", "min", "max", "mean", "std"}
    for k in value:
        if k not in valid:
            probs.add(path + (k,), "unknown key" + _suggest(k, valid))
    dist = value.get("dist", "fixed")
    if dist not in DISTS:
        probs.add(path + ("dist",), f"must be one of {', '.join(DISTS)}, got {dist!r}" + _suggest(str(dist), DISTS))
        return None
    nums = {}
    for k in ("value", "min", "max", "mean", "std"):
        if k in value:
            v = value[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                probs.add(path + (k,), f"must be a non-negative number, got {v!r}")
                return None
            why = out_of_range(("length", k), v)
            if why:
                probs.add(path + (k,), why)
                return None
            nums[k] = v
    ln = Length(dist=dist)
    if dist == "fixed":
        if "value" not in nums or int(nums["value"]) < 1:
            probs.add(path + ("value",), "a fixed length needs value ≥ 1")
            return None
        ln.value = ln.min = ln.max = int(nums["value"])
    elif dist == "uniform":
        if "min" not in nums or "max" not in nums:
            probs.add(path, "a uniform length needs min and max")
            return None
        ln.min, ln.max = int(nums["min"]), int(nums["max"])
    else:
        if "mean" not in nums or "std" not in nums:
            probs.add(path, f"a {dist} length needs mean and std")
            return None
        ln.mean, ln.std = float(nums["mean"]), float(nums["std"])
        ln.min = int(nums.get("min", 1))
        ln.max = int(nums.get("max", 0))
        if ln.mean <= 0:
            probs.add(path + ("mean",), "must be > 0")
            return None
    if ln.min < 1:
        probs.add(path + ("min",), "must be ≥ 1")
        return None
    if ln.max and ln.max < ln.min:
        probs.add(path + ("max",), f"must be ≥ min ({ln.min}), got {ln.max}")
        return None
    return ln


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _build(cls: type, table: Any, path: tuple, probs: _Problems, skip: tuple = ()) -> Any:
    """Fill dataclass `cls` from `table`, reporting unknown keys and bad types."""
    if not isinstance(table, dict):
        probs.add(path, f"must be a table, got {_type_name(table)}")
        return cls() if cls is not Mode else None
    hints = _hints(cls)  # once per class: 10,000 modes took 6 s of get_type_hints
    names = [f.name for f in dataclasses.fields(cls) if f.name not in skip]
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        if key not in names:
            probs.add(path + (key,), "unknown key" + _suggest(key, names))
            continue
        conv = _convert(value, hints[key], path + (key,), probs)
        if conv is not None:
            kwargs[key] = conv
    try:
        return cls(**kwargs)
    except TypeError as e:  # a required field is missing
        probs.add(path, str(e).split(") ")[-1])
        return None


def _slo(table: Any, path: tuple, probs: _Problems) -> Slo:
    slo = Slo()
    if not isinstance(table, dict):
        probs.add(path, f"must be a table, got {_type_name(table)}")
        return slo
    latency: dict[str, float] = {}
    valid = SLO_LATENCY_KEYS + ("max_error_rate", "min_goodput", "max_preemptions_per_request")
    for key, value in table.items():
        p = path + (key,)
        if key in ("max_error_rate", "min_goodput", "max_preemptions_per_request") or SLO_KEY.match(key):
            v = _convert(value, float, p, probs)
            rk = ("slo", "latency" if SLO_KEY.match(key) else key)
            # Above the sane range (the low ends have their own messages below).
            shares = key in ("max_error_rate", "min_goodput")  # checked as shares below
            why = out_of_range(rk, v) if v is not None and v > RANGES[rk][1] and not shares else None
            if why:
                probs.add(p, why)
                continue
        if key in ("max_error_rate", "min_goodput"):
            if v is not None:
                if not 0 <= v <= 1:
                    probs.add(p, f"must be a share between 0 and 1, got {v:g}")
                else:
                    setattr(slo, key, v)
        elif key == "max_preemptions_per_request":
            if v is not None:
                if v < 0:
                    probs.add(p, f"must be ≥ 0 (0: no preemption at all), got {v:g}")
                else:
                    slo.max_preemptions_per_request = v
        elif SLO_KEY.match(key):
            if v is not None:
                if v <= 0:
                    probs.add(p, f"must be > 0 ms, got {v:g}")
                else:
                    latency[key] = v
        else:
            probs.add(p, "unknown key" + _suggest(key, valid))
    if latency:
        slo.latency = latency
    return slo
