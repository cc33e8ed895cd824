"""Hostile or careless input, issue 18: one line and exit 2 (never a traceback), nothing started,
nothing written outside runs/, no terminal escape printed, no interpreter hijack by default.

Most cases run the real command in-process (`kvtui.cli.entry.main`) and check its stderr; runs that
must start a server use the real headless command with the simulator.
"""

from __future__ import annotations

import copy
import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtui.cli.entry import main as cli_main
from kvtui.cli.run import default_out, file_stem
from kvtui.io.snapshot.file import load_snapshot
from kvtui.runtime.procs import reaper

from reliability_helpers import headless

DATA = Path(__file__).resolve().parents[1] / "report" / "data"


def _cli(argv: list[str]) -> tuple[int, str, str]:
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        try:
            rc = cli_main(argv)
        except SystemExit as e:  # argparse
            rc = int(e.code or 0)
    return rc, out.getvalue(), err.getvalue()


def _one_line_exit_2(argv: list[str], needle: str = "") -> str:
    before = reaper.registered()
    rc, out, err = _cli(argv)
    assert rc == 2, (argv, rc, out, err)
    lines = err.strip().splitlines()
    assert lines and all(ln.startswith("kvtui: ") for ln in lines), err
    assert "Traceback" not in err + out
    assert needle in err, (needle, err)
    assert reaper.registered() == before  # nothing started
    return err


BASE = """name = "h"
[server]
engine = "sim"
max_model_len = 2048
[[modes]]
name = "a"
[workload]
prompt_tokens = 16
output_tokens = 4
[ramp]
start = 1
max = 1
"""


# ------------------------------------------------------------------ paths


@pytest.mark.parametrize("name", ["../../../../tmp/x", "/etc/passwd", "..", "a/../../b", "-rf", "x\x1b]0;t\x07", ""])
def test_a_scenario_name_never_leaves_runs(name):
    p = default_out(name)
    assert p.parent == Path("runs")
    assert "/" not in p.name and not p.name.startswith((".", "-"))
    assert file_stem(name) == file_stem(file_stem(name))


def test_a_traversing_name_writes_inside_runs_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outside = tmp_path / "outside"
    sp = tmp_path / "s.toml"
    sp.write_text(BASE.replace('name = "h"', 'name = "../outside/x"'))
    rc, out, err = _cli(["run", str(sp), "--headless", "--fast"])
    assert rc == 0, err
    assert not outside.exists()
    written = list((tmp_path / "runs").glob("*.json"))
    assert written and all(p.parent == tmp_path / "runs" for p in written)


@pytest.mark.parametrize("kind", ["fifo", "devzero", "dir", "huge"])
@pytest.mark.parametrize("cmd", ["run", "export", "replay", "resume", "import", "diff"])
def test_special_files_are_refused_in_one_line(tmp_path, kind, cmd):
    if kind == "fifo":
        path = tmp_path / "f"
        os.mkfifo(path)
    elif kind == "devzero":
        path = Path("/dev/zero")
    elif kind == "dir":
        path = tmp_path
    else:
        path = tmp_path / "huge.json"
        with open(path, "wb") as f:  # sparse: a size beyond the cap costs no disk
            f.truncate(3 << 30)
    if kind == "huge" and cmd == "run":
        path = tmp_path / "huge.toml"
        with open(path, "wb") as f:
            f.truncate(5 << 20)
    argv = {"run": ["run", str(path), "--headless"], "export": ["export", str(path), "--format", "csv", "--out", "-"],
            "replay": ["replay", str(path)], "resume": ["run", "--headless", "--fast", "--resume", str(path)],
            "import": ["import", str(path), "--out", str(tmp_path / "i.json")],
            "diff": ["diff", str(path), str(path)]}[cmd]
    _one_line_exit_2(argv, str(path))


# ------------------------------------------------------------------ the environment: trust model


@pytest.mark.parametrize("var", ["PYTHONPATH", "PYTHONSTARTUP", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONHOME", "LD_AUDIT",
                                 "PYTHONWARNINGS", "PATH", "DYLD_INSERT_LIBRARIES"])
@pytest.mark.parametrize("where", ["server", "mode"])
def test_interpreter_hijacking_env_is_refused_unless_allowed(tmp_path, var, where):
    table = "[server.env]" if where == "server" else "[modes.env]"
    sp = tmp_path / "s.toml"
    sp.write_text(BASE + f'{table}\n{var} = "{tmp_path}/evil"\n' if where == "server" else
                  BASE.replace('[[modes]]\nname = "a"\n', f'[[modes]]\nname = "a"\n[modes.env]\n{var} = "{tmp_path}/evil"\n'))
    err = _one_line_exit_2(["run", str(sp), "--headless", "--fast", "--out", str(tmp_path / "o.json")], "--allow-env")
    assert f"{sp}:" in err and f".env.{var}: " in err
    assert not (tmp_path / "o.json").exists()
    rc, out, err = _cli(["run", str(sp), "--headless", "--fast", "--allow-env", "--out", str(tmp_path / "o.json")])
    assert rc == 0, err
    assert "server environment (" in err and f"{var}=" in err  # shown before the start


def test_a_sitecustomize_on_pythonpath_never_runs_in_the_server(tmp_path, runs):
    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "PWNED"
    (evil / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    sp = tmp_path / "s.toml"
    sp.write_text(BASE + f'[server.env]\nPYTHONPATH = "{evil}"\n')
    h = headless(tmp_path, sp)
    runs.append(h)
    assert h.wait() == 2
    assert "PYTHONPATH changes which code the server runs" in h.stderr()
    assert not marker.exists()
    assert h.leftovers() == []


@pytest.mark.parametrize("snippet,needle", [
    ('[server.env]\n"A=B" = "x"\n', "server.env.A=B: not an environment variable name"),
    ('[server.env]\n"" = "x"\n', "server.env.: not an environment variable name"),
    ('[server.env]\nA = "x\\u0000y"\n', "server.env.A: must not contain a NUL"),
    ('[server]\nextra_args = ["--seed", "1\\u0000"]\n', "server.extra_args: argument 2 contains a NUL"),
    ('[server]\nmodel = "m\\u0000"\n', "server.model: must not contain control characters"),
    ('[[modes]]\nname = "--help"\n', "modes[1].name: must be a short name"),
    ('[[modes]]\nname = "-x"\n', "modes[1].name: must be a short name"),
    ('[[modes]]\nname = "a\\u001b[2J"\n', "modes[1].name: must be a short name"),
    ('name = "x\\u001b]0;pwn\\u0007"\n', "name: must not contain control characters"),
])
def test_strings_that_would_break_the_launch_are_refused_at_load(tmp_path, snippet, needle):
    sp = tmp_path / "s.toml"
    text = BASE
    if snippet.startswith("[server.env]"):
        text = BASE + snippet
    elif snippet.startswith("[server]"):
        text = BASE.replace('[server]\nengine = "sim"\n', snippet + 'engine = "sim"\n')
    elif snippet.startswith("[[modes]]"):
        text = BASE + snippet
    else:
        text = snippet + BASE.replace('name = "h"\n', "")
    sp.write_text(text)
    err = _one_line_exit_2(["run", str(sp), "--headless", "--fast", "--out", str(tmp_path / "o.json")])
    assert needle in err, err


def test_deeply_nested_toml_is_one_line(tmp_path):
    sp = tmp_path / "s.toml"
    sp.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    _one_line_exit_2(["run", str(sp), "--headless"], str(sp))


@pytest.mark.parametrize("row,needle", [
    ('{"prompt": 5}', '"prompt" must be a string'),
    ('{"messages": [1]}', '"messages" must be'),
    ('{"prompt_ids": ["a"]}', '"prompt_ids" must be'),
    ('[1, 2]', 'each line needs'),
    ('{"prompt": "x", "output_tokens": true}', "output_tokens must be a positive integer"),
    ('not json', "not JSON"),
])
def test_a_malformed_dataset_is_refused_before_any_server_starts(tmp_path, row, needle):
    ds = tmp_path / "d.jsonl"
    ds.write_text('{"prompt": "fine"}\n' + row + "\n")
    sp = tmp_path / "s.toml"
    sp.write_text(BASE.replace("[workload]\n", f'[workload]\ndataset = "{ds}"\n'))
    err = _one_line_exit_2(["run", str(sp), "--headless", "--out", str(tmp_path / "o.json")], needle)
    assert f"{ds}:2:" in err


# ------------------------------------------------------------------ terminal escapes

ESC_NAME = "evil\x1b]0;PWNED\x07\x1b[2J\x9b31m"


def _escaped_snapshot(tmp_path) -> Path:
    doc = json.loads((DATA / "three_modes.json").read_text()) if (DATA / "three_modes.json").exists() else None
    if doc is None:
        sp = tmp_path / "s.toml"
        sp.write_text(BASE)
        out = tmp_path / "base.json"
        rc, _, err = _cli(["run", str(sp), "--headless", "--fast", "--out", str(out)])
        assert rc == 0, err
        doc = json.loads(out.read_text())
    doc["scenario"]["name"] = ESC_NAME
    doc["scenario"]["description"] = ESC_NAME
    for m in doc["modes"]:
        m["name"] = m["name"] + "\x1b[2J"
    p = tmp_path / "esc.json"
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize("argv", [["export", "{p}", "--format", "md", "--out", "-"], ["export", "{p}", "--format", "csv", "--out", "-"],
                                  ["diff", "{p}", "{p}"], ["diff", "{p}", "{p}", "--format", "md"]])
def test_escape_sequences_from_a_snapshot_never_reach_the_terminal(tmp_path, argv):
    p = _escaped_snapshot(tmp_path)
    rc, out, err = _cli([a.format(p=p) for a in argv])
    assert rc == 0, err
    assert "\x1b" not in out + err and "\x07" not in out + err and "\x9b" not in out + err
    assert "\\x1b" in out  # shown, visibly


def test_headless_output_has_no_escape_sequences(tmp_path):
    """An escape in a scenario's description is refused at load (issue 30: descriptions were let
    through), and the refusal shows it escaped, never raw."""
    sp = tmp_path / "s.toml"
    sp.write_text(BASE.replace('name = "h"', 'description = "d\\u001b[2J"'))
    rc, out, err = _cli(["run", str(sp), "--headless", "--fast", "--out", str(tmp_path / "o.json")])
    assert rc == 2 and "description: must not contain control characters" in err, err
    assert "\x1b" not in out + err


# ------------------------------------------------------------------ malformed snapshots: property


def _valid_snapshot(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("v")
    sp = d / "s.toml"
    sp.write_text(BASE.replace("max = 1", "max = 4"))
    out = d / "v.json"
    rc, _, err = _cli(["run", str(sp), "--headless", "--fast", "--out", str(out)])
    assert rc == 0, err
    return json.loads(out.read_text())


_VALID: dict = {}

_junk = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True), st.text(max_size=5),
                  st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def _paths(x, prefix=()):
    yield prefix
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x[:3]):
            yield from _paths(v, prefix + (i,))


@settings(max_examples=int(os.environ.get("KVTUI_FUZZ_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_malformed_snapshots_are_one_line_in_export_diff_and_replay_checks(tmp_path_factory, data):
    if not _VALID:
        _VALID.update(_valid_snapshot(tmp_path_factory))
    doc = copy.deepcopy(_VALID)
    paths = [p for p in _paths(doc) if p]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        node = doc
        try:
            for k in path[:-1]:
                node = node[k]
            if data.draw(st.booleans()):
                node[path[-1]] = data.draw(_junk)
            elif isinstance(node, dict):
                node.pop(path[-1], None)
        except (KeyError, IndexError, TypeError):
            pass
    d = tmp_path_factory.mktemp("m")
    p = d / "m.json"
    p.write_text(json.dumps(doc, default=str))
    for argv in (["export", str(p), "--format", "md", "--out", "-"], ["export", str(p), "--format", "csv", "--out", "-"],
                 ["diff", str(p), str(p)]):
        rc, out, err = _cli(argv)
        assert rc in (0, 2), (argv, rc, err)
        assert "Traceback" not in err
        if rc == 2:
            lines = err.strip().splitlines()
            assert len(lines) >= 1 and all(ln.startswith("kvtui: ") for ln in lines), err
    # What replay checks before Textual starts: either renderable or one clear error.
    from kvtui.errors import UsageError
    from kvtui.report.wellformed import require_renderable

    try:
        require_renderable(load_snapshot(p), str(p))
    except UsageError as e:
        assert str(p) in str(e) and "\n" not in str(e)


@pytest.mark.parametrize("args,cause", [(["--gpu", "NOPE"], "unknown GPU 'NOPE'"),
                                        (["--max-model-len", "x"], "argument --max-model-len: invalid int value")])
def test_a_sim_start_failure_names_its_cause(tmp_path, runs, args, cause):
    sp = tmp_path / "s.toml"
    sp.write_text(BASE.replace('engine = "sim"', f'engine = "sim"\nextra_args = {json.dumps(args)}'))
    h = headless(tmp_path, sp)
    runs.append(h)
    assert h.wait() == 1
    err = [ln for ln in h.stdout().splitlines() if ln.startswith("kvtui: error: mode a: ")]  # crashed: or bad_flag:
    assert err and cause in err[0], h.stdout()


_bench_junk = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True, allow_infinity=True),
                        st.text(max_size=4), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@settings(max_examples=int(os.environ.get("KVTUI_FUZZ_EXAMPLES", "100")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_wrong_typed_bench_files_in_import_are_one_line(tmp_path_factory, data):
    src = sorted(DATA.glob("*_c*.json"))[0]
    doc = json.loads(src.read_text())
    keys = sorted(doc)
    for _ in range(data.draw(st.integers(1, 4))):
        doc[data.draw(st.sampled_from(keys))] = data.draw(_bench_junk)
    d = tmp_path_factory.mktemp("b")
    p = d / "bench_c8.json"
    p.write_text(json.dumps(doc))
    rc, out, err = _cli(["import", str(p), "--out", str(d / "o.json")])
    assert rc in (0, 2), err
    assert "Traceback" not in err
    if rc == 2:
        assert err.strip() and all(ln.startswith("kvtui: ") for ln in err.strip().splitlines()), err
