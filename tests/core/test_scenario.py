"""Scenario validation: every problem names file, line and field; exit code 2; never a traceback."""

import subprocess
import sys

import pytest

from kvtui import SCENARIOS_DIR
from kvtui.errors import ScenarioError
from kvtui.io.scenario import load_scenario


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def problems(tmp_path, text, overrides=()):
    p = write(tmp_path, "s.toml", text)
    with pytest.raises(ScenarioError) as e:
        load_scenario(p, overrides)
    return [x.replace(str(p), "s.toml") for x in e.value.problems]


def test_defaults_for_everything_but_the_model(tmp_path):
    sc = load_scenario(write(tmp_path, "s.toml", '[server]\nmodel = "x"\n'))
    assert sc.server.host == "127.0.0.1" and sc.server.engine == "sim"
    assert [m.name for m in sc.modes] == ["baseline"]
    assert sc.slo.latency == {"ttft_p95_ms": 2000.0, "tpot_p95_ms": 50.0}
    assert sc.ramp.search == "auto" and sc.workload.api == "completions"  # issue 21: seeded where predicted
    assert sc.name == "s"


def test_unknown_keys_suggest_the_nearest(tmp_path):
    got = problems(tmp_path, "[ramp]\nmxa = 3\n\n[[modes]]\nname = \"a\"\nkv_cahce_dtype = \"fp8\"\n")
    assert "s.toml:2: ramp.mxa: unknown key (did you mean 'max'?)" in got
    assert "s.toml:6: modes[0].kv_cahce_dtype: unknown key (did you mean 'kv_cache_dtype'?)" in got


def test_unknown_section_and_slo_key(tmp_path):
    got = problems(tmp_path, "[rmap]\nmax = 3\n[slo]\nttft_p97_ms = 10\n")
    assert got[0].startswith("s.toml:1: rmap: unknown key (did you mean 'ramp'?)")
    assert "s.toml:4: slo.ttft_p97_ms: unknown key (did you mean 'ttft_p99_ms'?)" in got


@pytest.mark.parametrize("text,expect", [
    ("[ramp]\nstart = \"a\"\n", "s.toml:2: ramp.start: must be a number, got a string 'a'"),
    ("[ramp]\nstart = 8\nmax = 4\n", "s.toml:3: ramp.max: must be ≥ ramp.start (8), got 4"),
    ("[ramp]\nstep = \"triple\"\n", "s.toml:2: ramp.step: must be 'double', 'xN', '+N' or a list 'a,b,c', got 'triple'"),
    ("[server]\nengine = \"vlm\"\n", "s.toml:2: server.engine: must be one of sim, vllm, external, got 'vlm' (did you mean 'vllm'?)"),
    ("[server]\nengine = \"external\"\n", "s.toml:1: server.url: the external engine needs the server's URL"),
    ("[server]\ngpu_memory_utilization = 1.5\n", "s.toml:2: server.gpu_memory_utilization: must be in (0, 1], got 1.5"),
    ("[server]\nmax_model_len = 1000\n[workload]\nprompt_tokens = 900\noutput_tokens = 200\n",
     "s.toml:4: workload.prompt_tokens: prompt + output tokens can reach 1100 (× 1 turns) > server.max_model_len 1000"),
    ("[workload]\nprompt_tokens = {dist = \"uniform\", min = 10}\n", "s.toml:2: workload.prompt_tokens: a uniform length needs min and max"),
    ("[workload]\nprompt_tokens = {dist = \"gamma\", mean = 3, std = 1}\n", "s.toml:2: workload.prompt_tokens.dist: must be one of fixed, uniform, normal, lognormal"),
    ("[workload]\napi = \"chats\"\n", "s.toml:2: workload.api: must be one of completions, chat, got 'chats' (did you mean 'chat'?)"),
    ("[slo]\nttft_p95_ms = -1\n", "s.toml:2: slo.ttft_p95_ms: must be > 0 ms, got -1"),
    ("[slo]\nmax_error_rate = 2\n", "s.toml:2: slo.max_error_rate: must be a share between 0 and 1, got 2"),
    ("[slo]\nmax_preemptions_per_request = -0.5\n", "s.toml:2: slo.max_preemptions_per_request: must be ≥ 0 (0: no preemption at all), got -0.5"),
    ("[slo]\nmax_preemption = 0\n", "s.toml:2: slo.max_preemption: unknown key (did you mean 'max_preemptions_per_request'?)"),
    ("[[modes]]\nname = \"a\"\n[[modes]]\nname = \"a\"\n", "s.toml:4: modes[1].name: duplicate mode name 'a'"),
    ("[[modes]]\ndtype = \"auto\"\n", "s.toml:1: modes[0]: a mode needs a name"),
    ("[[modes]]\nname = \"a\"\nkv_cache_dtype = \"fp4\"\n", "s.toml:3: modes[0].kv_cache_dtype: must be one of auto, fp8"),
    ("[server]\nextra_args = [1, 2]\n", "s.toml:2: server.extra_args: must be a list of strings"),
    ("[server]\nenv = { A = true }\n", "s.toml:2: server.env.A: must be a string, got a boolean"),
    ("[server]\nhost = \"not-an-ip\"\n", "s.toml:2: server.host: must be an IP address"),
    ("modes = 3\n", "s.toml:1: modes: must be a non-empty list of [[modes]] tables"),
    ("[ramp]\nmax = = 3\n", "s.toml:2: TOML syntax: "),
    ("[workload]\nturns = 0\n", "s.toml:2: workload.turns: must be ≥ 1"),
])
def test_error_paths(tmp_path, text, expect):
    got = problems(tmp_path, text)
    assert any(g.startswith(expect) for g in got), got


def test_missing_dataset_names_the_path(tmp_path):
    got = problems(tmp_path, "[workload]\ndataset = \"nope.jsonl\"\n")
    assert got[0].startswith("s.toml:2: workload.dataset: no such file:")


def test_overrides_apply_and_are_validated(tmp_path):
    p = write(tmp_path, "s.toml", "[ramp]\nmax = 64\n")
    sc = load_scenario(p, ["ramp.max=32", "slo.ttft_p99_ms=900", "workload.api=chat"])
    assert sc.ramp.max == 32 and sc.slo.latency == {"ttft_p99_ms": 900.0} and sc.workload.api == "chat"
    with pytest.raises(ScenarioError) as e:
        load_scenario(p, ["ramp.max=0"])
    assert "ramp.max" in e.value.problems[0]
    with pytest.raises(ScenarioError) as e:
        load_scenario(p, ["rampmax"])
    assert "expected section.key=value" in e.value.problems[0]


def test_non_loopback_host_warns(tmp_path):
    sc = load_scenario(write(tmp_path, "s.toml", "[server]\nhost = \"0.0.0.0\"\n"))
    assert any("not loopback" in w for w in sc.warnings)


def test_cli_bad_scenario_exits_2_with_one_line_per_problem(tmp_path):
    p = write(tmp_path, "bad.toml", "[ramp]\nmxa = 3\n")
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", str(p), "--headless"], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == f"kvtui: {p}:2: ramp.mxa: unknown key (did you mean 'max'?)"
    assert "Traceback" not in r.stderr


def test_cli_bad_arguments_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", "--bogus"], capture_output=True, text=True)
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", str(tmp_path / "missing.toml"), "--headless"], capture_output=True, text=True)
    assert r.returncode == 2 and "no such scenario file" in r.stderr


def test_a_snapshots_scenario_reads_back_with_targets_left_unset(tmp_path):
    """A snapshot stores the dataclass, unset targets as null (the preemption target since
    2026-11-30); reading it back (bench/sim_vs_h200.py does) must not call null a bad number."""
    import dataclasses
    import json

    from kvtui.explore.run import Run
    from kvtui.io.scenario import scenario_from_snapshot
    from kvtui.io.snapshot.file import load_snapshot

    sc = load_scenario(SCENARIOS_DIR / "h200-llama8b-kvbound.toml", ['server.engine="sim"', 'server.model="llama-3.1-8b"'])
    out = tmp_path / "s.json"
    Run(sc, out, modes=["bf16"], fast=True).run()
    stored = load_snapshot(out)["scenario"]
    assert stored["slo"]["max_preemptions_per_request"] is None
    back = scenario_from_snapshot(json.loads(json.dumps(stored)))
    assert back.slo.max_preemptions_per_request is None
    assert dataclasses.asdict(back.slo) == dataclasses.asdict(sc.slo)
    assert [m.name for m in back.modes] == [m.name for m in sc.modes]
