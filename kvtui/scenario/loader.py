"""Build a `Scenario` from TOML, naming the file, line and field of every problem.

    load_scenario("scenarios/h200.toml", overrides=["ramp.max=64"])

Every problem is collected (not just the first) and raised as one `ScenarioError`
(exit code 2). Unknown keys get the nearest valid key as a suggestion.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import math
import re
import sys
import typing
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from kvtui.errors import ScenarioError
from kvtui.scenario.locate import LineIndex
from kvtui.scenario.schema import (
    APIS,
    ARRIVALS,
    DISTS,
    ENGINES,
    LOAD_SHAPES,
    QUALITY_TASKS,
    SEARCHES,
    SLO_KEY,
    SLO_LATENCY_KEYS,
    RANGES,
    Cost,
    Length,
    Mode,
    Quality,
    Ramp,
    Scenario,
    Server,
    Slo,
    Workload,
    hijacks,
    out_of_range,
)

_STEP = re.compile(r"^(double|x\d+(\.\d+)?|\+\d+(\.\d+)?|\d+(\.\d+)?(\s*,\s*\d+(\.\d+)?)*)$")
KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")
MAX_LOAD = 1_000_000  # beyond any server: a typo, and the search would take 40+ steps to get there
MIN_RATE = 0.001  # req/s: one request in 17 minutes
MAX_LEVELS = 10_000  # loads a ramp may list (each is a step of seconds to minutes)
_TOP_KEYS = ("name", "description", "seed", "server", "modes", "workload", "ramp", "slo", "cost", "quality")


class _Problems:
    def __init__(self, source: str, index: LineIndex | None):
        self.source = source
        self.index = index
        self.items: list[str] = []

    def add(self, path: tuple, message: str, line: int | None = None) -> None:
        dotted = _dotted(path)
        if line is None:
            line = self.index.line(path) if self.index else 0
        where = f"{self.source}:{line}" if line else self.source
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
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a table"}.get(
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


def _build(cls: type, table: Any, path: tuple, probs: _Problems, skip: tuple = ()) -> Any:
    """Fill dataclass `cls` from `table`, reporting unknown keys and bad types."""
    if not isinstance(table, dict):
        probs.add(path, f"must be a table, got {_type_name(table)}")
        return cls() if cls is not Mode else None
    hints = typing.get_type_hints(cls)
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


def _check_quality(sc: Scenario, probs: _Problems) -> None:
    """[quality]: known task names, task files that exist, counts and lengths in range."""
    q = sc.quality
    for t in q.tasks:
        if t not in QUALITY_TASKS:
            probs.add(("quality", "tasks"), f"unknown task {t!r}" + _suggest(t, list(QUALITY_TASKS)))
    for key, lo, hi in (("items", 0, 10_000), ("concurrency", 1, 256), ("max_context", 0, 10_000_000),
                        ("prompts", 0, 10_000), ("prompt_tokens", 1, 10_000_000), ("max_tokens", 1, 100_000)):
        v = getattr(q, key)
        if not lo <= v <= hi:
            probs.add(("quality", key), f"must be from {lo:,} to {hi:,}, got {v!r}")
    if not 0 <= q.tolerance_pt <= 100:
        probs.add(("quality", "tolerance_pt"), f"must be from 0 to 100 percentage points, got {q.tolerance_pt:g}")
    for n in q.lengths:
        if not 64 <= n <= 10_000_000:
            probs.add(("quality", "lengths"), f"each length must be from 64 tokens up, got {n}")
        elif sc.server.max_model_len and n > sc.server.max_model_len:
            probs.add(("quality", "lengths"), f"{n} is above server.max_model_len ({sc.server.max_model_len})")
    base = Path(sc.source).parent if sc.source else Path(".")
    for i, f in enumerate(q.task_files):
        path = Path(f) if Path(f).is_absolute() else base / f
        if not path.is_file():
            probs.add(("quality", "task_files"), f"{f!r}: no such task file")
        else:
            q.task_files[i] = str(path)


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


def _ranges(sc: Scenario, probs: _Problems) -> None:
    """Every numeric field within its sane range (schema.RANGES), unless a check named it already."""
    named = set(probs.items)
    for (section, key), _ in RANGES.items():
        if section in ("slo", "length"):
            continue  # checked where they are read (_slo, _length)
        holder = sc if not section else getattr(sc, section)
        v = getattr(holder, key)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        why = out_of_range((section, key), v)
        dotted = f"{section}.{key}" if section else key
        if why and not any(f": {dotted}: " in item for item in named):
            probs.add((section, key) if section else (key,), why)


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _check_strings(sc: Scenario, probs: _Problems) -> None:
    """What reaches a command line or an environment: no NUL (exec refuses it), env names that are names."""
    s = sc.server
    holders = [(("server",), s.env, s.extra_args)] + [(("modes", i), m.env, m.extra_args) for i, m in enumerate(sc.modes)]
    for path, env, args in holders:
        for k, v in env.items():
            if not _ENV_NAME.match(k):
                probs.add(path + ("env", k), f"not an environment variable name (letters, digits, _; not empty, no '='): {k!r}")
            elif "\0" in v:
                probs.add(path + ("env", k), "must not contain a NUL character")
        for j, a in enumerate(args):
            if "\0" in a:
                probs.add(path + ("extra_args",), f"argument {j + 1} contains a NUL character")
    for path, value in [(("server", "model"), s.model), (("server", "served_model_name"), s.served_model_name),
                        (("server", "host"), s.host), (("server", "gpu"), s.gpu), (("server", "url"), s.url),
                        (("server", "metrics_url"), s.metrics_url), (("workload", "dataset"), sc.workload.dataset),
                        (("name",), sc.name)] + [(("modes", i, "model"), m.model) for i, m in enumerate(sc.modes)] \
            + [(("modes", i, key), getattr(m, key)) for i, m in enumerate(sc.modes) for key in ("dtype", "kv_cache_dtype", "quantization")]:
        if value and _CONTROL.search(value):
            probs.add(path, f"must not contain control characters (NUL, escape sequences), got {value!r}")


def _check(sc: Scenario, probs: _Problems) -> None:
    s, w, r = sc.server, sc.workload, sc.ramp
    if s.engine not in ENGINES:
        probs.add(("server", "engine"), f"must be one of {', '.join(ENGINES)}, got {s.engine!r}" + _suggest(s.engine, ENGINES))
    if s.engine == "external" and not s.url:
        probs.add(("server", "url"), "the external engine needs the server's URL, e.g. url = \"http://127.0.0.1:8000\"")
    if s.engine == "vllm" and not (s.model or all(m.model for m in sc.modes)):
        probs.add(("server", "model"), "the vllm engine needs a model (a Hugging Face name or a local directory)")
    if s.max_model_len < 16:
        probs.add(("server", "max_model_len"), f"must be ≥ 16 tokens, got {s.max_model_len}")
    if not 0 < s.gpu_memory_utilization <= 1:
        probs.add(("server", "gpu_memory_utilization"), f"must be in (0, 1], got {s.gpu_memory_utilization:g}")
    for key in ("kv_cache_memory_bytes", "max_num_seqs", "max_num_batched_tokens", "port"):
        if getattr(s, key) < 0:
            probs.add(("server", key), "must be ≥ 0")
    if s.tensor_parallel_size < 1:
        probs.add(("server", "tensor_parallel_size"), "must be ≥ 1")
    if not 0 <= s.port <= 65535:
        probs.add(("server", "port"), "must be a TCP port (0 for a free one)")
    if s.startup_timeout_s <= 0:
        probs.add(("server", "startup_timeout_s"), "must be > 0")
    try:
        if not ipaddress.ip_address(s.host).is_loopback:
            sc.warnings.append(
                f"server.host = {s.host!r} is not loopback: the server will be reachable from the network"
            )
    except ValueError:
        if s.host != "localhost":
            probs.add(("server", "host"), f"must be an IP address (default 127.0.0.1), got {s.host!r}")
    names = set()
    for i, m in enumerate(sc.modes):
        if not m.name or not re.match(r"^[A-Za-z0-9_.+][A-Za-z0-9_.+\-]*$", m.name) or len(m.name) > 64:
            # Not starting with '-': a mode name becomes a command-line value (`--mode NAME`, the
            # simulator's --mode), where `--help` would be read as an option.
            probs.add(("modes", i, "name"), f"must be a short name of letters, digits, _ . + - (not starting with -), got {m.name!r}")
        if m.name in names:
            probs.add(("modes", i, "name"), f"duplicate mode name {m.name!r}")
        names.add(m.name)
        if m.kv_cache_dtype not in KV_DTYPES:
            probs.add(("modes", i, "kv_cache_dtype"), f"must be one of {', '.join(KV_DTYPES)}, got {m.kv_cache_dtype!r}")
    _check_strings(sc, probs)
    if w.api not in APIS:
        probs.add(("workload", "api"), f"must be one of {', '.join(APIS)}, got {w.api!r}" + _suggest(w.api, APIS))
    if not 0 <= w.shared_prefix < 1:
        probs.add(("workload", "shared_prefix"), f"must be a share in [0, 1), got {w.shared_prefix:g}")
    if w.temperature < 0:
        probs.add(("workload", "temperature"), "must be ≥ 0")
    if w.turns < 1:
        probs.add(("workload", "turns"), "must be ≥ 1")
    if not 0 <= w.jitter < 1:
        probs.add(("workload", "jitter"), "must be a share in [0, 1)")
    if w.dataset:
        ds = Path(w.dataset)
        if not ds.is_absolute() and sc.source:
            ds = Path(sc.source).parent / ds
        if not ds.is_file():
            probs.add(("workload", "dataset"), f"no such file: {ds}")
        else:
            w.dataset = str(ds)
            from kvtui.errors import UsageError
            from kvtui.load.workload import Dataset

            try:  # every row now, not after the server started (two tracebacks)
                Dataset(w.dataset)
            except UsageError as e:
                probs.add(("workload", "dataset"), str(e))
    # ISL + OSL must fit in the context, for every turn of a conversation.
    need = (w.prompt_tokens.upper + w.output_tokens.upper) * w.turns
    if not w.dataset and need > s.max_model_len:
        where = ("workload", "prompt_tokens")
        if probs.index is not None and not probs.index.line(where) and probs.index.line(("server", "max_model_len")):
            # The file sets only the context length: point there, the workload is the default one.
            where = ("server", "max_model_len")
        probs.add(
            where,
            f"prompt + output tokens can reach {need} (× {w.turns} turns) > server.max_model_len {s.max_model_len}",
        )
    if r.load not in LOAD_SHAPES:
        probs.add(("ramp", "load"), f"must be one of {', '.join(LOAD_SHAPES)}, got {r.load!r}" + _suggest(r.load, LOAD_SHAPES))
    if r.search not in SEARCHES:
        probs.add(("ramp", "search"), f"must be one of {', '.join(SEARCHES)}, got {r.search!r}")
    if r.arrival not in ARRIVALS:
        probs.add(("ramp", "arrival"), f"must be one of {', '.join(ARRIVALS)}, got {r.arrival!r}")
    if r.start <= 0:
        probs.add(("ramp", "start"), f"must be > 0, got {r.start:g}")
    if r.max < r.start:
        probs.add(("ramp", "max"), f"must be ≥ ramp.start ({r.start:g}), got {r.max:g}")
    if r.load == "concurrency" and (r.start != int(r.start) or r.max != int(r.max)):
        probs.add(("ramp", "start"), "concurrency steps are whole numbers of requests")
    rule = r.step.strip()
    if not _STEP.match(rule):
        probs.add(("ramp", "step"), f"must be 'double', 'xN', '+N' or a list 'a,b,c', got {r.step!r}")
    elif rule.startswith("x") and float(rule[1:]) <= 1:
        probs.add(("ramp", "step"), f"a geometric step must grow (xN with N > 1), got {r.step!r}")
    elif rule.startswith("+") and float(rule[1:]) <= 0:
        probs.add(("ramp", "step"), f"a linear step must be > 0, got {r.step!r}")
    elif rule[0] in "x+" and 0 < r.start <= r.max:
        n = float(rule[1:])
        closed = r.load == "concurrency"  # closed loop: at least one more request per level
        levels = (r.max - r.start) / (max(n, 1.0) if closed else n) if rule[0] == "+" else math.log(r.max / r.start) / math.log(n)
        if closed:
            levels = min(levels, r.max - r.start)
        if levels > MAX_LEVELS:
            probs.add(("ramp", "step"), f"{r.step!r} from {r.start:g} to {r.max:g} makes {levels:,.0f} levels (at most {MAX_LEVELS:,})")
    if r.max > MAX_LOAD:
        probs.add(("ramp", "max"), f"must be ≤ {MAX_LOAD:,} (requests in flight or req/s), got {r.max:g}")
    if r.load == "rate" and 0 < r.start < MIN_RATE:
        probs.add(("ramp", "start"), f"a request rate must be ≥ {MIN_RATE:g} req/s, got {r.start:g}")
    if r.window_s <= 0 and r.window_requests <= 0:
        probs.add(("ramp", "window_s"), "a measurement window needs window_s > 0 or window_requests > 0")
    for key in ("warmup_s", "request_timeout_s", "drain_timeout_s"):
        if getattr(r, key) < 0:
            probs.add(("ramp", key), "must be ≥ 0")
    if r.processes < 1:
        probs.add(("ramp", "processes"), "must be ≥ 1")
    if r.min_samples < 1:
        probs.add(("ramp", "min_samples"), "must be ≥ 1")
    if sc.cost.gpu_hourly_usd < 0:
        probs.add(("cost", "gpu_hourly_usd"), "must be ≥ 0")
    _ranges(sc, probs)


def parse_override(text: str) -> tuple[tuple, Any]:
    """`section.key=value` → (path, value); value parsed as TOML, else taken as a string."""
    if "=" not in text:
        raise ScenarioError([f"--set {text}: expected section.key=value"])
    key, raw = text.split("=", 1)
    path = tuple(p.strip() for p in key.strip().split("."))
    if not all(path):
        raise ScenarioError([f"--set {text}: empty key"])
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return path, value


def _apply_override(doc: dict, path: tuple, value: Any) -> None:
    node: Any = doc
    for i, part in enumerate(path[:-1]):
        if isinstance(node, list):
            try:
                node = node[int(part)]
            except (ValueError, IndexError):
                raise ScenarioError([f"--set {_dotted(path)}: no list element {part!r}"])
            continue
        node = node.setdefault(part, {})
        if not isinstance(node, (dict, list)):
            raise ScenarioError([f"--set {_dotted(path)}: {_dotted(path[: i + 1])} is not a table"])
    if not isinstance(node, dict):
        raise ScenarioError([f"--set {_dotted(path)}: {_dotted(path[:-1])} is not a table"])
    node[path[-1]] = value


def _check_env_trust(sc: Scenario, probs: _Problems) -> None:
    for path, env in [(("server",), sc.server.env)] + [(("modes", i), m.env) for i, m in enumerate(sc.modes)]:
        for k in env:
            if hijacks(k):
                probs.add(path + ("env", k), f"{k} changes which code the server runs: refused unless --allow-env "
                                             "(a scenario is data; see docs/FAULTS.md, trust model)")


def scenario_from_dict(doc: dict, source: str = "<scenario>", index: LineIndex | None = None,
                       allow_env: bool = True) -> Scenario:
    probs = _Problems(source, index)
    for key in doc:
        if key not in _TOP_KEYS:
            probs.add((key,), "unknown key" + _suggest(key, _TOP_KEYS))
    sc = Scenario(source=source)
    for key, kind in (("name", str), ("description", str), ("seed", int)):
        if key in doc:
            v = _convert(doc[key], kind, (key,), probs)
            if v is not None:
                setattr(sc, key, v)
    if "server" in doc:
        sc.server = _build(Server, doc["server"], ("server",), probs) or Server()
    if "modes" in doc:
        raw = doc["modes"]
        if not isinstance(raw, list) or not raw:
            probs.add(("modes",), "must be a non-empty list of [[modes]] tables")
        else:
            modes = []
            for i, t in enumerate(raw):
                if isinstance(t, dict) and "name" not in t:
                    probs.add(("modes", i), "a mode needs a name")
                    continue
                m = _build(Mode, t, ("modes", i), probs)
                if m is not None:
                    modes.append(m)
            sc.modes = modes or sc.modes
    if "workload" in doc:
        sc.workload = _build(Workload, doc["workload"], ("workload",), probs) or Workload()
    if "ramp" in doc:
        sc.ramp = _build(Ramp, doc["ramp"], ("ramp",), probs) or Ramp()
    if "slo" in doc:
        sc.slo = _slo(doc["slo"], ("slo",), probs)
    if "cost" in doc:
        sc.cost = _build(Cost, doc["cost"], ("cost",), probs) or Cost()
    if "quality" in doc:
        sc.quality = _build(Quality, doc["quality"], ("quality",), probs) or Quality()
        _check_quality(sc, probs)
    if not probs.items:
        _check(sc, probs)
        if not allow_env:
            _check_env_trust(sc, probs)
    if probs.items:
        raise ScenarioError(probs.items)
    if sc.name == "scenario" and not source.startswith("<"):
        sc.name = Path(source).stem
    return sc


def load_scenario(path: str | Path | None, overrides: typing.Sequence[str] = (), allow_env: bool = False) -> Scenario:
    """Read, override (`--set`) and validate a scenario file; None gives the defaults.

    `allow_env`: let server.env / modes.env set variables that change which code the server
    runs (PYTHONPATH, LD_PRELOAD, … schema.hijacks); refused by default.
    """
    if path is None:
        doc: dict = {}
        text = ""
        source = "<defaults>"
    else:
        from kvtui.paths import find_scenario

        p = Path(path)
        source = str(path)
        if not p.exists():
            # a bare name (`h200-llama8b`) or a checkout-style `scenarios/NAME.toml`: the shipped or user file
            found = find_scenario(p)
            if found is not None:
                p, source = found, str(found)
        if not p.exists() and not p.is_symlink():
            raise ScenarioError([f"{source}: no such scenario file (`kvtui scenarios` lists the shipped and your own)"])
        from kvtui.errors import UsageError
        from kvtui.safeio import SCENARIO_CAP, read_bytes_file

        try:
            text = read_bytes_file(p, "scenario", SCENARIO_CAP).decode("utf-8")
        except UsageError as e:
            raise ScenarioError([str(e)])
        except UnicodeDecodeError as e:
            raise ScenarioError([f"{source}: cannot read: {e}"])
        try:
            doc = tomllib.loads(text)
        except RecursionError:
            raise ScenarioError([f"{source}: TOML nested too deeply to be a scenario"])
        except tomllib.TOMLDecodeError as e:
            m = re.search(r"at line (\d+)", str(e))
            line = m.group(1) if m else str(max(1, len(text.splitlines())))  # "at end of document": the last line
            raise ScenarioError([f"{source}:{line}: TOML syntax: {str(e).split(' (at')[0]}"])
    for item in overrides:
        opath, value = parse_override(item)
        _apply_override(doc, opath, value)
    index = LineIndex(text) if text else None
    return scenario_from_dict(doc, source, index, allow_env=allow_env)


def scenario_from_snapshot(d: dict, source: str = "<snapshot>") -> Scenario:
    """The scenario a snapshot was run with (its `scenario` key), back as a `Scenario`.

    Snapshots store the dataclasses as written (`slo.latency` nested, redacted secrets,
    `source`/`warnings`); this turns that back into the file form and validates it.
    """
    doc = {k: v for k, v in d.items() if k in _TOP_KEYS}
    slo = dict(doc.get("slo") or {})
    # None is "no target" in the dataclass; the file form has no way to say it but leaving the key out.
    doc["slo"] = {k: v for k, v in {**(slo.pop("latency", None) or {}), **slo}.items() if v is not None}
    server = dict(doc.get("server") or {})
    server.pop("api_key", None)  # "<redacted>": never a real key
    server["env"] = {k: v for k, v in (server.get("env") or {}).items() if v != "<redacted>"}
    doc["server"] = {k: v for k, v in server.items() if v is not None}
    return scenario_from_dict(doc, source)
