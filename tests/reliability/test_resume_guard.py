"""--resume never gives a wrong answer (issue #30, class 2).

- A resumed snapshot measured under another workload, SLO, model or engine (or another way of
  measuring a step) is refused, naming the field: its kept verdicts were judged under that.
- A resumed snapshot whose figures no run can give (negative counts, an error rate above 1, a
  NaN latency, a load of 0) is refused, naming the mode, step and field.
- `--resume OUT` of a `--parallel` run killed before its join finds its lanes' snapshots.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtui.cli.entry import main
from kvtui.errors import UsageError
from kvtui.explore.resume_guard import check_resumable, mode_problem
from kvtui.io.snapshot.file import load_snapshot

SCENARIO = """
name = "guard"
[server]
engine = "sim"
[[modes]]
name = "first"
[[modes]]
name = "second"
kv_cache_dtype = "fp8"
[workload]
prompt_tokens = 64
output_tokens = 16
[ramp]
start = 1
max = 8
warmup_s = 0.2
window_s = 1
[slo]
tpot_p95_ms = 35
"""


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("guard")
    sc = d / "s.toml"
    sc.write_text(SCENARIO)
    out = d / "base.json"
    rc, o, e = cli("run", sc, "--headless", "--fast", "--out", out)
    assert rc == 0, o + e
    return sc, out


# (--set override, the field the refusal must name)
CHANGES = [
    ("workload.prompt_tokens=128", "workload.prompt_tokens"),
    ("workload.output_tokens=32", "workload.output_tokens"),
    ("workload.temperature=0.7", "workload.temperature"),
    ("workload.seed=7", "workload.seed"),
    ("slo.tpot_p95_ms=5", "slo.latency.tpot_p95_ms"),
    ("slo.ttft_p95_ms=100", "slo.latency"),
    ("slo.max_error_rate=0.5", "slo.max_error_rate"),
    ("server.model=llama-3.1-70b", "server.model"),
    ("server.time_scale=2", "server.time_scale"),
    ("ramp.window_s=3", "ramp.window_s"),
    ("ramp.min_samples=5", "ramp.min_samples"),
]


@settings(max_examples=len(CHANGES) * 2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change=st.sampled_from(CHANGES))
def test_a_resume_under_another_measurement_is_refused_naming_the_field(base, tmp_path_factory, change) -> None:
    sc, snap = base
    override, field = change
    out = tmp_path_factory.mktemp("r") / "r.json"
    rc, o, e = cli("run", sc, "--headless", "--fast", "--resume", snap, "--out", out, "--set", override)
    lines = e.strip().splitlines()
    assert rc == 2 and len(lines) == 1, o + e
    assert f"--resume {snap}: {field}" in lines[0], lines[0]
    assert not out.exists() and not out.with_name(out.name + ".journal").exists()  # nothing ran


def test_a_resume_under_the_same_measurement_keeps_its_modes(base, tmp_path) -> None:
    """Where the search goes may change (ramp.max): the kept steps' verdicts still hold."""
    sc, snap = base
    out = tmp_path / "r.json"
    rc, o, e = cli("run", sc, "--headless", "--fast", "--resume", snap, "--out", out, "--set", "ramp.max=16")
    assert rc == 0, o + e
    doc = load_snapshot(out)
    assert doc["resumed_from"]["modes"] == ["first", "second"]


BAD_FIGURES = [
    ("requests", -1), ("errors", -3), ("preemptions", -1), ("running_max", -2), ("waiting_max", math.nan),
    ("error_rate", 1.7), ("error_rate", -0.1), ("goodput", 2.0), ("kv_cache_usage_max", 57.0),
    ("kv_cache_usage_mean", math.nan), ("prefix_cache_hit_rate", -0.5), ("output_tok_s", -100.0),
    ("request_s", math.inf), ("load", 0), ("load", -4), ("concurrency", math.nan), ("passed", "yes"),
    ("ttft_ms.p95", -5.0), ("tpot_ms.p95", math.nan), ("e2e_ms.mean", -1.0), ("itl_ms.n", -1),
    ("samples.ttft", -7), ("server_tokens.generation", -1), ("window_s", -1.0),
]


def _set(step: dict, dotted: str, value) -> None:
    *path, last = dotted.split(".")
    for k in path:
        step = step.setdefault(k, {})
    step[last] = value


@settings(max_examples=len(BAD_FIGURES) * 3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=st.sampled_from(BAD_FIGURES), where=st.integers(0, 1))
def test_impossible_figures_in_a_resumed_snapshot_are_refused(base, bad, where) -> None:
    sc, snap = base
    doc = load_snapshot(snap)
    from kvtui.io.scenario import load_scenario

    field, value = bad
    doc = copy.deepcopy(doc)
    mode = doc["modes"][where]
    _set(mode["steps"][-1], field, value)
    with pytest.raises(UsageError) as e:
        check_resumable(load_scenario(sc).to_dict(), [doc])
    msg = str(e.value)
    assert f"mode {mode['name']!r}" in msg and field.split(".")[0] in msg and "impossible" in msg


def test_impossible_figures_refused_through_the_cli_from_a_file(base, tmp_path) -> None:
    sc, snap = base
    d = json.loads(snap.read_text())
    d["modes"][0]["steps"][0]["error_rate"] = 3.5
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    rc, o, e = cli("run", sc, "--headless", "--fast", "--resume", bad, "--out", tmp_path / "r.json")
    assert rc == 2 and "error_rate = 3.5" in e and len(e.strip().splitlines()) == 1, o + e


def test_every_stored_figure_of_a_real_run_is_in_range(base) -> None:
    """The guard refuses nothing a real run writes (its ranges are the measurement's own)."""
    for m in load_snapshot(base[1])["modes"]:
        assert mode_problem(m) is None


def test_resume_of_a_parallel_run_killed_before_its_join_finds_its_lanes(base, tmp_path) -> None:
    """What a killed `--parallel` run leaves: OUT.lanes/NN-MODE.json (or a lane's journal), no OUT.
    `--resume OUT` keeps the lanes' finished modes."""
    sc, _ = base
    out = tmp_path / "par.json"
    lanes = tmp_path / "par.lanes"
    lanes.mkdir()
    for i, mode in enumerate(["first", "second"]):
        rc, o, e = cli("run", sc, "--headless", "--fast", "--mode", mode, "--out", lanes / f"0{i}-{mode}.json")
        assert rc == 0, o + e
    assert not out.exists()
    again = tmp_path / "again.json"
    rc, o, e = cli("run", sc, "--headless", "--fast", "--resume", out, "--out", again)
    assert rc == 0, o + e
    assert "lane snapshot(s)" in e
    doc = load_snapshot(again)
    assert sorted(doc["resumed_from"]["modes"]) == ["first", "second"]


# -- figures that contradict each other, counts that are no counts, another engine --------------

def _guard(sc: Path, doc: dict) -> str:
    from kvtui.io.scenario import load_scenario

    with pytest.raises(UsageError) as e:
        check_resumable(load_scenario(sc).to_dict(), [doc])
    return str(e.value)


@pytest.mark.parametrize("field, value", [("requests", 2.5), ("requests", 1e308), ("errors", 0.5),
                                          ("samples.ttft", 2**60), ("running_max", 1.5)])
def test_a_count_that_is_no_whole_number_is_refused(base, field, value) -> None:
    sc, snap = base
    doc = copy.deepcopy(load_snapshot(snap))
    _set(doc["modes"][0]["steps"][0], field, value)
    assert "whole number" in _guard(sc, doc)


def test_a_pass_its_own_figures_fail_under_this_slo_is_refused(base) -> None:
    """The scenario copy inside a snapshot can be edited to match while its steps were judged under
    another SLO: each kept PASS is checked against its own stored figures (and its checks list,
    which could be edited too, is not what is read)."""
    sc, snap = base
    doc = copy.deepcopy(load_snapshot(snap))
    step = next(s for s in doc["modes"][0]["steps"] if s["passed"] is True)
    step["tpot_ms"]["p95"] = 99.0
    msg = _guard(sc, doc)
    assert "passed = true, but its tpot_ms.p95 = 99.0 does not meet tpot_p95_ms ≤ 35" in msg


def test_an_answer_that_is_no_passed_load_is_refused(base) -> None:
    sc, snap = base
    doc = copy.deepcopy(load_snapshot(snap))
    doc["modes"][0]["best_concurrency"] = 1000.0
    assert "best_concurrency = 1000.0, but no step passed at that load" in _guard(sc, doc)


@pytest.mark.parametrize("engine, simulated", [("vllm", False), ("external", False), ("sim", False)])
def test_a_mode_measured_by_another_engine_is_refused(base, engine, simulated) -> None:
    sc, snap = base
    doc = copy.deepcopy(load_snapshot(snap))
    doc["modes"][0]["engine"], doc["modes"][0]["simulated"] = engine, simulated
    msg = _guard(sc, doc)
    assert "another engine" in msg and ("engine = " in msg or "simulated = False" in msg), msg


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999", "1" + "0" * 30, "1" + "0" * 5000])
def test_numbers_kvtui_never_writes_refuse_the_resumed_file_in_one_line(base, tmp_path, literal) -> None:
    sc, snap = base
    text = snap.read_text().replace('"requests": ', f'"requests": {literal}, "was": ', 1)
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    rc, o, e = cli("run", sc, "--headless", "--fast", "--resume", bad, "--out", tmp_path / "r.json")
    assert rc == 2 and len(e.strip().splitlines()) == 1 and str(bad) in e and "Traceback" not in e, o + e


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_resumed_snapshots_records_that_are_no_file_are_refused_up_front(base, tmp_path, kind) -> None:
    """A FIFO where the resumed snapshot's records are once hung the resume (and SIGTERM with it)."""
    import os
    import shutil
    import stat

    sc, snap = base
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(snap, d / "base.json")
    rec = d / load_snapshot(snap)["records"]
    if kind == "fifo":
        os.mkfifo(rec)
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("a device node needs root (CI runs as root)")
        os.mknod(rec, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # what /dev/zero is, made here
    else:
        rec.mkdir()
    rc, o, e = cli("run", sc, "--headless", "--fast", "--resume", d / "base.json", "--out", tmp_path / "r.json")
    assert rc == 2 and "its records" in e and "not a regular file" in e and len(e.strip().splitlines()) == 1, o + e
    assert not (tmp_path / "r.json.journal").exists()
