"""Every numeric scenario field has a sane range (kvtui/io/scenario/schema.py RANGES).

Property: each field at its bounds is not refused for its range; beyond them (just past,
far past, 1e300) the run is refused with exit 2, one `FILE:LINE: field: …` line naming it,
and nothing started: no server registered, no snapshot, no journal.
"""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stderr, redirect_stdout

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtui.cli.entry import main as cli_main
from kvtui.errors import ScenarioError
from kvtui.io.scenario import load_scenario
from kvtui.io.scenario.schema import RANGES
from kvtui.runtime.procs import reaper

KEYS = sorted(RANGES)
INT_FIELDS = {"seed", "max_model_len", "kv_cache_memory_bytes", "max_num_seqs", "max_num_batched_tokens",
              "tensor_parallel_size", "port", "turns", "burst_size", "window_requests", "min_samples",
              "max_error_burst", "processes", "max_processes", "devices", "gpus", "prompts", "prompt_tokens", "max_tokens", "items", "max_context",
              "concurrency"}


def _toml_value(v) -> str:
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    return json.dumps(v)


def scenario_text(key: tuple[str, str], value) -> tuple[str, str]:
    """A small valid scenario with `value` written into the field `key`; and the field's dotted name."""
    section, name = key
    tables = {"server": {"engine": "sim", "max_model_len": 4096}, "workload": {"prompt_tokens": 64, "output_tokens": 16},
              "ramp": {"start": 1, "max": 4}, "slo": {"tpot_p95_ms": 50}}
    top: dict = {"name": "ranges"}
    dotted = f"{section}.{name}" if section else name
    if not section:
        top[name] = value
    elif section == "slo" and name == "latency":
        tables["slo"] = {"ttft_p95_ms": value}
        dotted = "slo.ttft_p95_ms"
    elif section == "length":
        dist = {"value": {"dist": "fixed"}, "min": {"dist": "uniform", "max": int(1e7)}, "max": {"dist": "uniform", "min": 1},
                "mean": {"dist": "normal", "std": 1}, "std": {"dist": "normal", "mean": 10}}[name]
        tables["workload"]["prompt_tokens"] = {**dist, name: value}
        dotted = f"workload.prompt_tokens.{name}"
    else:
        tables.setdefault(section, {})[name] = value
    lines = [f"{k} = {_toml_value(v)}" for k, v in top.items()]
    for t, body in tables.items():
        lines.append(f"[{t}]")
        for k, v in body.items():
            if isinstance(v, dict):
                v_text = "{" + ", ".join(f"{a} = {_toml_value(b)}" for a, b in v.items()) + "}"
                lines.append(f"{k} = {v_text}")
            else:
                lines.append(f"{k} = {_toml_value(v)}")
    lines.append("[[modes]]\nname = \"a\"")
    return "\n".join(lines) + "\n", dotted


def _cast(key, v):
    return int(v) if key[1] in INT_FIELDS and math.isfinite(v) and float(v).is_integer() else v


@st.composite
def beyond(draw):
    key = draw(st.sampled_from(KEYS))
    lo, hi, strict = RANGES[key]
    side = draw(st.sampled_from(["low", "high"]))
    if side == "low" and key[0] == "length":
        side = "high"  # a negative length is refused by its own check; the range is about the top
    if side == "low":
        v = lo if strict else lo - draw(st.sampled_from([1, 1000, 1e300]))
        if key[1] in INT_FIELDS and not strict:
            v = lo - draw(st.sampled_from([1, 7, 10**6]))
    else:
        v = hi + draw(st.sampled_from([1, hi, 1e300])) if hi < 1e300 else 1e308
        if key[1] in INT_FIELDS:
            v = int(hi) + draw(st.sampled_from([1, 10, 10**9]))
    return key, _cast(key, v)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=beyond())
def test_every_numeric_field_beyond_its_bounds_is_refused_before_anything_starts(tmp_path, case):
    key, value = case
    text, dotted = scenario_text(key, value)
    p = tmp_path / "s.toml"
    p.write_text(text)
    out = tmp_path / "never.json"
    err, so = io.StringIO(), io.StringIO()
    before = reaper.registered()
    with redirect_stderr(err), redirect_stdout(so):
        rc = cli_main(["run", str(p), "--headless", "--out", str(out)])
    lines = err.getvalue().splitlines()
    assert rc == 2, (key, value, err.getvalue())
    assert any(ln.startswith(f"kvtui: {p}:") and f": {dotted}: " in ln for ln in lines), (key, value, lines)
    assert all(ln.startswith(f"kvtui: {p}") for ln in lines), lines  # one line per problem, no traceback
    assert "Traceback" not in err.getvalue()
    assert reaper.registered() == before
    assert not out.exists() and not out.with_name(out.name + ".journal").exists()


@settings(max_examples=len(KEYS) * 2, deadline=None)
@given(key=st.sampled_from(KEYS), end=st.sampled_from(["lo", "hi"]))
def test_every_numeric_field_at_its_bounds_is_not_refused_for_its_range(tmp_path_factory, key, end):
    lo, hi, strict = RANGES[key]
    if end == "lo" and strict:
        return  # the low end itself is excluded
    v = _cast(key, float(lo if end == "lo" else hi) if key[1] not in INT_FIELDS else int(lo if end == "lo" else hi))
    if key[0] == "length" and v == 0:
        v = 1
    text, dotted = scenario_text(key, v)
    p = tmp_path_factory.mktemp("b") / "s.toml"
    p.write_text(text)
    try:
        load_scenario(p)
    except ScenarioError as e:
        # Other rules may refuse the combination (max < start, prompt > context …), never the range.
        assert not any(f": {dotted}: must be" in x and "≤" in x and f"≤ {hi:g}," in x for x in e.problems), e.problems


def test_every_numeric_field_of_the_schema_has_a_range():
    """The mechanism, not a list: a numeric field added to the schema without a range fails here."""
    import dataclasses
    import typing

    from kvtui.io.scenario import schema

    missing = []
    for section, cls in (("", schema.Scenario), ("server", schema.Server), ("workload", schema.Workload),
                         ("ramp", schema.Ramp), ("cost", schema.Cost), ("quality", schema.Quality), ("length", schema.Length)):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if hints[f.name] in (int, float) and (section, f.name) not in RANGES:
                missing.append(f"{section}.{f.name}" if section else f.name)
    assert missing == []
