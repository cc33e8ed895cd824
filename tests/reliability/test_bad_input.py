"""Bad input never gives a traceback: scenario files (fuzzed), CLI arguments, snapshot files.

Scenario files are fuzzed two ways with hypothesis:
- structure and values: documents built from the schema's own sections and fields, with
  unknown keys, wrong types, boundary and out-of-range values, written out as TOML;
- text: a valid scenario cut, spliced and sprinkled with random characters.
Every file that is refused must be refused with `ScenarioError`, one problem per line, each
naming the file, a line of it and a field (or "TOML syntax"); through the command line that
is exit 2 with every line `kvtui: FILE:LINE: …`. Every file that is accepted must give a ramp
and a search that end (a valid scenario must not hang the run).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import typing
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from kvtui.cli.entry import main as cli_main
from kvtui.core.search import MAX_CONFIRM_ROUNDS, make_search, ramp_levels
from kvtui.errors import ScenarioError, UsageError
from kvtui.io.scenario import load_scenario
from kvtui.io.scenario.schema import (
    APIS,
    ARRIVALS,
    DISTS,
    ENGINES,
    LOAD_SHAPES,
    SEARCHES,
    SLO_LATENCY_KEYS,
    Cost,
    Mode,
    Quality,
    Ramp,
    Server,
    Workload,
)
from kvtui.io.snapshot.file import load_snapshot

# KVTUI_FUZZ_EXAMPLES=5000 for a longer hunt; CI runs the default.
FUZZ = settings(max_examples=int(os.environ.get("KVTUI_FUZZ_EXAMPLES", "300")), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# --------------------------------------------------------------------------- TOML out


_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE.match(k) else json.dumps(k, ensure_ascii=False).replace("\x7f", "\\u007f")


def _val(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, list):
        return "[" + ", ".join(_val(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_val(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def to_toml(doc: dict) -> str:
    """Top-level values, then one [table] per dict, then [[array]] tables for lists of dicts."""
    lines = [f"{_key(k)} = {_val(v)}" for k, v in doc.items()
             if not isinstance(v, dict) and not (isinstance(v, list) and v and all(isinstance(x, dict) for x in v))]
    for k, v in doc.items():
        if isinstance(v, dict):
            lines += ["", f"[{_key(k)}]"] + [f"{_key(a)} = {_val(b)}" for a, b in v.items()]
    for k, v in doc.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for t in v:
                lines += ["", f"[[{_key(k)}]]"] + [f"{_key(a)} = {_val(b)}" for a, b in t.items()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- strategies

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_ident = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10)
_ints = st.one_of(st.integers(-5, 70000), st.sampled_from([0, -1, 1, 2**31, 2**63 - 1, -(2**63)]))
_floats = st.one_of(st.floats(-10, 1e6, allow_nan=False), st.sampled_from([0.0, -0.0, 1e-9, 1e300, math.inf, -math.inf, math.nan]))
_scalar = st.one_of(st.booleans(), _ints, _floats, _text)
_anyval = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_ident, inner, max_size=3)),
                       max_leaves=6)

# Values that are near-valid for particular fields (choices, grammars, boundaries).
_WORDS = {
    "engine": list(ENGINES) + ["vlm", "", "SIM"],
    "api": list(APIS) + ["chats"],
    "load": list(LOAD_SHAPES) + ["qps"],
    "search": list(SEARCHES) + ["binary"],
    "arrival": list(ARRIVALS) + ["gamma"],
    "step": ["double", "x2", "x1", "x0", "x0.5", "x1.01", "+1", "+0", "+0.5", "+0.001", "1,2,3", "3,1,2", "4", "0", "0,0",
             "1,,2", "triple", "", " double "],
    "host": ["127.0.0.1", "::1", "0.0.0.0", "localhost", "10.0.0.1", "not-an-ip", "", "::"],
    "kv_cache_dtype": ["auto", "fp8", "fp8_e5m2", "fp4", ""],
    "dtype": ["auto", "bfloat16", "float16", "float64"],
    "quantization": ["", "awq", "fp8", "gptq"],
    "model": ["llama-3.1-8b", "tiny-llama", "no-such-model", ""],
    "gpu": ["H200", "L4", "H100", "no-such-gpu"],
    "url": ["http://127.0.0.1:9", "", "not a url"],
}


def _field_value(name: str, hint) -> st.SearchStrategy:
    origin = typing.get_origin(hint)
    if name in _WORDS:
        plausible = st.sampled_from(_WORDS[name])
    elif hint is bool or hint == (bool | None):
        plausible = st.booleans()
    elif hint is int:
        plausible = _ints
    elif hint is float:
        plausible = _floats
    elif hint is str:
        plausible = _text
    elif origin is list:
        plausible = st.lists(st.one_of(_text, st.sampled_from(["--knee", "6", "--no-such-flag", "--api-key", "x"])), max_size=4)
    elif origin is dict:
        plausible = st.dictionaries(st.sampled_from(["A", "HF_TOKEN", "PATH", "X_API_KEY", "lower"]), st.one_of(_text, _ints, st.booleans()), max_size=3)
    elif name in ("prompt_tokens", "output_tokens"):
        plausible = st.one_of(_ints, st.fixed_dictionaries({}, optional={
            "dist": st.sampled_from(list(DISTS) + ["gamma"]), "value": _ints, "min": _ints, "max": _ints,
            "mean": _floats, "std": _floats, "bogus": _ints}))
    else:
        plausible = _anyval
    return st.one_of(plausible, plausible, plausible, _anyval)  # mostly near-valid, sometimes anything


def _table(cls) -> st.SearchStrategy:
    hints = typing.get_type_hints(cls)
    fields = {f.name: _field_value(f.name, hints[f.name]) for f in dataclasses.fields(cls)}
    return st.fixed_dictionaries({}, optional={**fields, "unknown_key": _anyval, "mxa": _ints})


_slo = st.fixed_dictionaries({}, optional={
    **{k: _floats for k in SLO_LATENCY_KEYS[::3]}, "max_error_rate": _floats, "min_goodput": _floats,
    "max_preemptions_per_request": _floats,
    "ttft_p97_ms": _floats, "tpot_p95_ms": st.one_of(_floats, _anyval)})
_mode = st.one_of(_table(Mode).map(lambda d: d if "name" in d or not d else d),
                  st.fixed_dictionaries({"name": st.one_of(st.sampled_from(["a", "b", "fp8-kv", "bad name", ""]), _anyval)},
                                        optional={"kv_cache_dtype": _field_value("kv_cache_dtype", str), "extra_args": _field_value("extra_args", list[str])}))

documents = st.fixed_dictionaries({}, optional={
    "name": st.one_of(_text, _anyval),
    "seed": st.one_of(_ints, _anyval),
    "server": st.one_of(_table(Server), _table(Server), _anyval),
    "workload": st.one_of(_table(Workload), _table(Workload), _anyval),
    "ramp": st.one_of(_table(Ramp), _table(Ramp), _anyval),
    "slo": st.one_of(_slo, _anyval),
    "cost": _table(Cost),
    "quality": _table(Quality),
    "modes": st.one_of(st.lists(_mode, min_size=1, max_size=3), _anyval),
    "rmap": _anyval,
})


# --------------------------------------------------------------------------- the properties


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def _check_problems(path: Path, text: str, problems: list[str]) -> None:
    n_lines = max(1, len(text.splitlines()))
    assert problems
    pat = re.compile(rf"^{re.escape(str(path))}:(\d+): (.+?): (.+)$", re.S)
    for p in problems:
        assert "\n" not in p, p
        m = pat.match(p)
        assert m, f"no file:line: field: message in {p!r}"
        line, field = int(m.group(1)), m.group(2)
        assert 1 <= line <= n_lines, p
        assert field == "TOML syntax" or re.match(r"^[^\s:]+$", field), p


def _accepted(sc) -> None:
    """A valid scenario must give a ramp and a search that end, whatever its knee."""
    closed = sc.ramp.load == "concurrency"
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    try:
        levels = ramp_levels(sc.ramp, closed)
        assert levels and all(math.isfinite(x) for x in levels)
        # The fast search brackets the knee (x2 up, halves down, bisects): tens of steps. The
        # linear one walks the levels the user asked for, then confirms.
        bound = 200 if sc.ramp.search != "linear" else len(levels) + 2 * MAX_CONFIRM_ROUNDS + 5  # auto, seeded: as fast
        for knee in (sc.ramp.start - 1, (sc.ramp.start + sc.ramp.max) / 2, sc.ramp.max + 1):
            search = make_search(sc.ramp, closed, guess=None)
            for _ in range(bound):
                load = search.next()
                if load is None:
                    break
                assert sc.ramp.start <= load <= sc.ramp.max or math.isclose(load, sc.ramp.start), (load, sc.ramp)
                search.record(load, load <= knee)
            else:
                raise AssertionError(f"the search did not end in {bound} steps: {sc.ramp}")
    except _Hang:
        raise AssertionError(f"ramp/search hung on {sc.ramp}") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _cli(path: Path, text: str) -> None:
    """The refused file through the command line: exit 2, one `kvtui: FILE:LINE: …` line per problem."""
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        rc = cli_main(["run", str(path), "--headless", "--out", str(path.with_suffix(".json"))])
    assert rc == 2, (rc, err.getvalue())
    lines = err.getvalue().strip().splitlines()
    assert lines and all(l.startswith(f"kvtui: {path}:") for l in lines), err.getvalue()
    assert "Traceback" not in err.getvalue() + out.getvalue()


def _check_file(path: Path, text: str, cli: bool) -> None:
    path.write_text(text, encoding="utf-8")
    try:
        sc = load_scenario(path)
    except ScenarioError as e:
        _check_problems(path, text, e.problems)
        if cli:
            _cli(path, text)
        return
    _accepted(sc)


@FUZZ
@given(doc=documents, cli=st.integers(0, 9))
@example(doc={"ramp": {"load": "rate", "step": "x1"}}, cli=0)
@example(doc={"ramp": {"load": "rate", "step": "+0"}}, cli=0)
@example(doc={"ramp": {"step": "0,0"}}, cli=0)
@example(doc={"ramp": {"load": "rate", "step": "+0.001", "start": 0.001, "max": 1e6}}, cli=0)
@example(doc={"ramp": {"load": "rate", "step": "x1.0001", "start": 0.001, "max": 1e6}}, cli=0)
@example(doc={"ramp": {"start": 1e-9, "max": 1e300, "load": "rate"}}, cli=0)
@example(doc={"workload": {"prompt_tokens": {"dist": "normal", "mean": 1e300, "std": 1}}}, cli=0)
@example(doc={"server": {"max_model_len": 2**63 - 1}, "workload": {"prompt_tokens": 2**62, "output_tokens": 2**62}}, cli=0)
@example(doc={"slo": {"ttft_p95_ms": math.nan}}, cli=0)
@example(doc={"name": "'''", "rmap": []}, cli=0)
@example(doc={"name": [{}]}, cli=0)
@example(doc={"ramp": {"start": math.nan}}, cli=0)
@example(doc={"ramp": {"max": math.inf}}, cli=0)
def test_fuzzed_scenario_structure_and_values(tmp_path_factory, doc, cli):
    d = tmp_path_factory.mktemp("fz")
    _check_file(d / "s.toml", to_toml(doc), cli == 0)


VALID = """name = "ok"
[server]
engine = "sim"
max_model_len = 2048
extra_args = ["--knee", "6"]

[[modes]]
name = "a"
kv_cache_dtype = "fp8"

[workload]
prompt_tokens = {dist = "uniform", min = 16, max = 64}
output_tokens = 16

[ramp]
start = 1
max = 16
step = "double"

[slo]
tpot_p95_ms = 35
"""


@st.composite
def _mutated(draw) -> str:
    text = VALID
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["cut", "insert", "dup", "swap", "truncate"]))
        i = draw(st.integers(0, len(text)))
        if op == "cut":
            text = text[:i] + text[i + draw(st.integers(1, 20)):]
        elif op == "insert":
            text = text[:i] + draw(st.one_of(_text, st.sampled_from(["[", "]", "=", "\"", "\n", "[[modes]]\n", "{", "#", "'''", "\\"]))) + text[i:]
        elif op == "truncate":
            text = text[:i]
        else:
            lines = text.splitlines()
            if len(lines) > 1:
                a, b = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
                if op == "dup":
                    lines.insert(b, lines[a])
                else:
                    lines[a], lines[b] = lines[b], lines[a]
                text = "\n".join(lines) + "\n"
    return text


@FUZZ
@given(text=_mutated(), cli=st.integers(0, 9))
def test_fuzzed_scenario_text(tmp_path_factory, text, cli):
    d = tmp_path_factory.mktemp("fzt")
    _check_file(d / "s.toml", text, cli == 0)


def test_not_utf8_and_binary_files(tmp_path):
    for name, data in (("latin1.toml", "name = \"caf\xe9\"\n".encode("latin-1")), ("bin.toml", bytes(range(256))),
                       ("bom.toml", b"\xef\xbb\xbfname = \"x\"\n"), ("empty.toml", b"")):
        p = tmp_path / name
        p.write_bytes(data)
        try:
            load_scenario(p)
        except ScenarioError as e:
            assert all(x.startswith(f"{p}") for x in e.problems), e.problems
    d = tmp_path / "dir.toml"
    d.mkdir()
    with pytest.raises(ScenarioError) as e:
        load_scenario(d)
    assert e.value.problems[0].startswith(f"{d}: cannot read")


# --------------------------------------------------------------------------- CLI arguments


def _kvtui(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvtui", *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def good_scenario(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("cli") / "ok.toml"
    p.write_text(VALID)
    return p


BAD_ARGS = [
    (["run", "--bogus"], "unrecognized arguments: --bogus"),
    (["run", "{ok}", "--headless", "--set", "rampmax"], "--set rampmax: expected section.key=value"),
    (["run", "{ok}", "--headless", "--set", "ramp.max=0"], "ramp.max"),
    (["run", "{ok}", "--headless", "--set", "ramp.nope=3"], "ramp.nope: unknown key"),
    (["run", "{ok}", "--headless", "--set", "name.x=3"], "name is not a table"),
    (["run", "{ok}", "--headless", "--set", "modes.7.name=x"], "no list element"),
    (["run", "{ok}", "--headless", "--mode", "nope"], "--mode nope: no such mode"),
    (["run", "{ok}", "--headless", "--engine", "gpu"], "argument --engine: invalid choice: 'gpu'"),
    (["run", "{ok}", "--headless", "--fast", "--engine", "external"], "server.url"),
    (["run", "{ok}", "--headless", "--resume", "{missing}"], "no such snapshot file"),
    (["run", "{missing}", "--headless"], "no such scenario file"),
    (["sim", "serve", "--port", "eighty"], "argument --port: invalid int value: 'eighty'"),
    (["sim", "serve", "--gpu", "no-such-gpu", "--port", "1"], "no-such-gpu"),
    (["estimate", "--model", "llama-3.1-8b", "--gpu", "nope"], "nope"),
    (["estimate", "--model", "no-such-model", "--gpu", "H200"], "no-such-model"),
    (["export", "{missing}", "--format", "md"], "no such snapshot file"),
    (["export", "{ok}", "--format", "md"], "not a complete JSON snapshot"),
    (["replay", "{missing}"], "no such snapshot file"),
    (["diff", "{missing}"], "the following arguments are required"),
    (["web", "--host", "0.0.0.0"], "--host 0.0.0.0 is not loopback"),
    (["web", "--port", "99999"], "--port 99999: not a TCP port"),
    (["nosuchcommand.toml"], "no such scenario file"),
    (["run", "{ok}", "--theme", "no-such-theme"], "no-such-theme"),
]


@pytest.mark.parametrize("args,words", BAD_ARGS, ids=[" ".join(a) for a, _ in BAD_ARGS])
def test_bad_cli_arguments_exit_2_with_one_line(args, words, good_scenario, tmp_path):
    argv = [a.format(ok=good_scenario, missing=tmp_path / "missing.json") for a in args]
    r = _kvtui(*argv)
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-1500:])
    lines = r.stderr.strip().splitlines()
    assert lines and lines[0].startswith("kvtui"), r.stderr
    assert len(lines) <= 2 and "Traceback" not in r.stderr, r.stderr
    assert words in r.stderr, r.stderr


# --------------------------------------------------------------------------- snapshot files


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    """A real finished two-mode snapshot (the simulator's knee model, offline: seconds)."""
    d = tmp_path_factory.mktemp("snap")
    p = d / "s.toml"
    p.write_text(VALID.replace('[[modes]]\nname = "a"', '[[modes]]\nname = "base"\n\n[[modes]]\nname = "a"'))
    r = _kvtui("run", p, "--headless", "--fast", "--out", d / "run.json", "--set", 'server.extra_args=[]', "--set", "server.gpu=\"L4\"")
    assert r.returncode == 0, r.stderr
    return d / "run.json"


def _export(path: Path) -> subprocess.CompletedProcess:
    return _kvtui("export", path, "--format", "md", "--out", "-")


@pytest.mark.parametrize("schema", ["kvtui.snapshot/0", "kvtui.snapshot/2", "kvtui.snapshot/1.5-dev"])
def test_other_schema_versions_warn_and_show_what_is_readable(snapshot, tmp_path, schema):
    doc = json.loads(snapshot.read_text())
    doc["schema"] = schema
    doc["modes"][0]["new_field_from_the_future"] = {"x": [1, 2]}
    if schema.endswith("/0"):  # an older writer: fields added since are missing
        for m in doc["modes"]:
            m.pop("series", None)
            m.pop("knee_limited_by", None)
            for s in m["steps"]:
                s.pop("goodput", None)
                s.pop("checks", None)
        doc.pop("comparison", None)
    p = tmp_path / "other.json"
    p.write_text(json.dumps(doc))
    loaded = load_snapshot(p)
    assert any(schema in w and "showing what is readable" in w for w in loaded["load_warnings"])
    r = _export(p)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    for m in doc["modes"]:
        assert m["name"] in r.stdout  # every mode made it into the report


def test_truncated_snapshots_show_what_is_readable(snapshot, tmp_path):
    """A snapshot cut short (an interrupted copy): every whole step before the cut is shown, unchanged,
    with a warning; cut before the first mode, one clear line and exit 2."""
    text = snapshot.read_text()
    full = load_snapshot(snapshot)
    whole = [(m["name"], s["index"]) for m in full["modes"] for s in m["steps"]]
    first_mode = text.index('"modes": [')
    for cut in (1, 10, first_mode // 2, first_mode + 12):
        p = tmp_path / f"cut{cut}.json"
        p.write_text(text[:cut])
        with pytest.raises(UsageError) as e:
            load_snapshot(p)
        assert str(e.value).startswith(f"{p}:") and "truncated?" in str(e.value)
        r = _export(p)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    seen = set()
    for frac in (0.3, 0.45, 0.6, 0.75, 0.9, 0.99):
        cut = int(len(text) * frac)
        p = tmp_path / f"cut{cut}.json"
        p.write_text(text[:cut])
        doc = load_snapshot(p)
        assert any("is truncated" in w and "showing what was readable" in w for w in doc["load_warnings"])
        got = [(m["name"], s["index"]) for m in doc["modes"] for s in m["steps"]]
        assert got == whole[: len(got)]  # a prefix of the run's steps
        for m in doc["modes"]:
            orig = next(x for x in full["modes"] if x["name"] == m["name"])
            for s in m["steps"]:
                assert s == orig["steps"][s["index"]]  # each one whole and unchanged
        assert doc["modes"][-1]["complete"] is False or got == whole
        seen.add(len(got))
        r = _export(p)
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
        for m in doc["modes"]:
            assert m["name"] in r.stdout
    assert len(seen) >= 2  # the cuts really fell in different places


def test_truncated_snapshot_with_its_journal_is_rebuilt(snapshot, tmp_path):
    """A snapshot cut mid-write while the journal is still beside it: rebuilt from the journal, with a warning."""
    import shutil

    from reliability_helpers import KNEE

    sp = tmp_path / "k.toml"
    sp.write_text(KNEE)
    out = tmp_path / "r.json"
    r = _kvtui("run", sp, "--headless", "--fast", "--out", out, "--set", "ramp.max=4", "--mode", "first")
    assert r.returncode == 0, r.stderr
    # Rebuild the run's journal (what a crash leaves) from the final snapshot's content.
    doc = json.loads(out.read_text())
    journal = tmp_path / "r.json.journal"
    with journal.open("w") as f:
        f.write(json.dumps({"event": "header", "t": 0, "data": {k: v for k, v in doc.items() if k != "modes"}}) + "\n")
        for m in doc["modes"]:
            f.write(json.dumps({"event": "mode", "t": 0, "data": {**m, "steps": []}}) + "\n")
            for s in m["steps"]:
                f.write(json.dumps({"event": "step", "t": 0, "data": {"mode": m["name"], "step": s}}) + "\n")
        f.write('{"event": "step", "t": 0, "data": {"mode": "first", "st')  # the line a crash cut
    out.write_text(out.read_text()[: len(out.read_text()) // 2])
    back = load_snapshot(out)
    assert any("damaged" in w and "rebuilt from its journal" in w for w in back["load_warnings"])
    assert [len(m["steps"]) for m in back["modes"]] == [len(m["steps"]) for m in doc["modes"]]
    r = _export(out)
    assert r.returncode == 0 and "first" in r.stdout, r.stderr
    shutil.rmtree(tmp_path / "unused", ignore_errors=True)


@pytest.mark.parametrize("text,words", [
    ("[]", "top level is not an object"),
    ('{"schema": 3}', "not a kvtui snapshot"),
    ('{"schema": "kvtui.snapshot/1"}', "field \"modes\" missing"),
    ('{"schema": "kvtui.snapshot/1", "modes": {}}', "field \"modes\" missing or not a list"),
    ('{"schema": "kvtui.snapshot/1", "modes": [3]}', "modes[0] is not a mode object"),
    ('{"schema": "kvtui.snapshot/1", "modes": [{"steps": 3}]}', "modes[0] is not a mode object"),
    ("\xff\xfe not utf-8", "cannot read"),
])
def test_malformed_snapshot_files(tmp_path, text, words):
    p = tmp_path / "bad.json"
    p.write_bytes(text.encode("latin-1"))
    with pytest.raises(UsageError) as e:
        load_snapshot(p)
    assert words in str(e.value)
    r = _export(p)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
