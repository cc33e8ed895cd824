"""The scenario's GPU carries into every simulated path, and a GPU kvtui assumed is said on stdout,
with the simulated what-if first; `kvtui whatif` answers the README's example as written."""

from __future__ import annotations

import json

from kvtui.cli.entry import main
from kvtui.io.scenario import load_scenario
from kvtui.simulator.model.catalog import MODELS_DIR

from pkg_helpers import FakeGpuBox


def _model(tmp_path):
    m = tmp_path / "m8b"
    m.mkdir()
    (m / "config.json").write_text((MODELS_DIR / "llama-3.1-8b.json").read_text())
    return m


def test_a_what_if_gpu_is_the_gpu_every_simulated_path_uses(tmp_path, capsys, monkeypatch):
    FakeGpuBox(monkeypatch, [])
    out = tmp_path / "s.toml"
    assert main(["init", str(_model(tmp_path)), "--gpu", "H100", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert load_scenario(out).server.gpu == "H100"
    assert said.index("--engine sim --fast") < said.index("on a machine with an H100")  # the what-if first
    assert main(["run", str(out), "--engine", "sim", "--fast", "--headless", "--out", str(tmp_path / "r.json"),
                 "--mode", "bf16"]) == 0
    ran = capsys.readouterr().out
    assert "GPU H100 (SIMULATED)" in ran and "H200" not in ran.split("\n")[0]


def test_an_assumed_gpu_is_said_on_stdout_with_the_what_if_first(tmp_path, capsys, monkeypatch):
    FakeGpuBox(monkeypatch, [])
    out = tmp_path / "s.toml"
    assert main(["init", str(_model(tmp_path)), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "GPU H200: assumed" in said
    assert said.index("simulate it:") < said.index("on a machine with an H200")
    assert "kvtui: run it:" not in said  # no real run offered first that would then fail pre-flight


def test_the_readme_whatif_runs_as_written(tmp_path, capsys):
    out = tmp_path / "w.json"
    rc = main(["whatif", "docs/results/h200-v2.json", "--set", "workload.prompt_tokens=8192", "--out", str(out)])
    said = capsys.readouterr().out
    assert rc == 0, said
    assert "max_model_len raised to 8448" in said and "not predicted" not in said
    doc = json.loads(out.read_text())
    assert all(p.get("covered") for p in doc["modes"].values())


def test_nothing_predicted_is_exit_1(tmp_path, capsys):
    rc = main(["whatif", "docs/results/h200-v2.json", "--set", "workload.prompt_tokens=200000"])
    assert rc == 1 and "the model's limit" in capsys.readouterr().out


def test_whatif_on_another_gpu_simulates_that_gpu(tmp_path, capsys):
    # `--set server.gpu=H100` on a vLLM snapshot: the GPU the run measured is the environment's, so
    # the change was read and ignored (the what-if answered on the H200). Now the H100 answers, said.
    out = tmp_path / "w.json"
    assert main(["whatif", "docs/results/h200-v2.json", "--set", "server.gpu=H100", "--mode", "bf16",
                 "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "SIMULATED on H100" in said and "the run measured an H200" in said
    doc = json.loads(out.read_text())
    assert doc["gpu"] == "H100" and doc["modes"]["bf16"]["gpu"] == "H100"
    assert main(["whatif", "docs/results/h200-v2.json", "--mode", "bf16"]) == 0
    same = capsys.readouterr().out
    knee = lambda text: next(line.split()[1] for line in text.splitlines() if line.startswith("bf16 "))  # noqa: E731
    assert knee(said) != knee(same)  # another GPU, another answer


def test_whatif_predicts_fp8_on_ampere_as_weight_only_and_says_so(capsys):
    # An A100 has no FP8 tensor cores: vLLM runs fp8 weights weight-only (W8A16) and stores an fp8
    # KV cache there, so both are predicted, the weights' form named.
    rc = main(["whatif", "docs/results/h200-v2.json", "--set", "server.gpu=A100", "--mode", "fp8-w",
               "--mode", "fp8-kv"])
    said = capsys.readouterr()
    assert rc == 0 and "SIMULATED on A100-80G" in said.out
    assert "fp8-w: fp8 weights weight-only on A100-80G (W8A16, FP8 Marlin)" in said.out
    assert "fp8-kv: fp8 weights" not in said.out and "has no FP8" not in said.out


def test_whatif_names_the_limit_in_words_and_a_knee_at_the_ramps_max(capsys):
    assert main(["whatif", "docs/results/h200-v2.json", "--set", "server.gpu_memory_utilization=0.3",
                 "--mode", "bf16"]) == 0
    assert "KV wall" in capsys.readouterr().out  # not "kv_wall"
    assert main(["whatif", "docs/results/h200-v2.json", "--set", "workload.output_tokens=1024", "--mode", "bf16"]) == 0
    assert "none up to ramp.max 256" in capsys.readouterr().out


def test_whatif_refuses_an_unknown_gpu_in_one_line(capsys):
    assert main(["whatif", "docs/results/h200-v2.json", "--set", "server.gpu=T4"]) == 2
    assert "--set server.gpu=T4: unknown GPU 'T4'" in capsys.readouterr().err


def test_the_setup_screens_init_says_an_assumed_gpu_too(tmp_path, monkeypatch):
    from kvtui import paths
    from kvtui.init import init_into_user_dir

    FakeGpuBox(monkeypatch, [])
    monkeypatch.setenv(paths.ENV_HOME, str(tmp_path / "home"))
    made, what = init_into_user_dir(str(_model(tmp_path)))
    assert made is not None and made.exists()
    assert "GPU H200 assumed (no GPU seen here)" in what and "--engine sim --fast" in what


def test_a_bundled_shape_says_it_is_simulated_and_on_which_gpu(tmp_path, capsys, monkeypatch):
    FakeGpuBox(monkeypatch, [])
    out = tmp_path / "s.toml"
    assert main(["init", "llama-3.1-8b", "--gpu", "L4", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "GPU L4 (SIMULATED" in said and "--fast --headless" in said and "kvtui: run it:" not in said
    assert load_scenario(out).server.engine == "sim" and load_scenario(out).server.gpu == "L4"
