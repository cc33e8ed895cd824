"""The scenario's GPU carries into every simulated path, and a GPU kvtui assumed is said on stdout,
with the simulated what-if first; `kvtui whatif` answers the README's example as written."""

from __future__ import annotations

import json

from kvtui.cli import main
from kvtui.engines.sim.catalog import MODELS_DIR
from kvtui.scenario import load_scenario

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
