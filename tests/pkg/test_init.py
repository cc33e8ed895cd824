"""`kvtui init`: on every bundled model shape and on real model directories (dense, MoE, AWQ, GPTQ,
FP8, MLA), the scenario it writes loads with the scenario loader, has the modes that make sense for
that checkpoint on that GPU, and carries the estimator's prediction per mode."""

from __future__ import annotations

import json

import pytest

from kvtui.cli.entry import main
from kvtui.io.scenario import load_scenario
from kvtui.simulator.model.catalog import MODELS_DIR, bundled_models

from pkg_helpers import A100, H200, FakeGpuBox, model_dir


def init(tmp_path, *args):
    out = tmp_path / "out.toml"
    rc = main(["init", *args, "--out", str(out)])
    return rc, out


@pytest.mark.parametrize("shape", bundled_models())
def test_every_bundled_shape_gives_a_scenario_the_loader_accepts(tmp_path, shape):
    rc, out = init(tmp_path, shape, "--gpu", "H200")
    assert rc == 0
    sc = load_scenario(out)
    assert sc.server.engine == "sim" and sc.server.model == shape and sc.server.gpu == "H200"
    text = out.read_text()
    assert "KV-bound prediction per mode on H200" in text
    for m in sc.modes:  # a prediction line (or why it does not fit) for every mode, in the header
        assert any(line.startswith(f"#   {m.name} ") for line in text.splitlines()), m.name
    cfg = json.loads((MODELS_DIR / f"{shape}.json").read_text())
    assert sc.server.max_model_len <= cfg["max_position_embeddings"]


def test_a_dense_model_directory_on_an_h200(tmp_path, monkeypatch):
    """The real-model case: a directory with config.json and no weights → dummy weights, the four modes."""
    FakeGpuBox(monkeypatch, [H200()])
    m = model_dir(tmp_path / "Llama-3.1-8B-Instruct", max_position_embeddings=131072)
    rc, out = init(tmp_path, str(m))
    assert rc == 0
    sc = load_scenario(out)
    assert sc.server.engine == "vllm" and sc.server.model == str(m.resolve()) and sc.server.load_format == "dummy"
    assert [x.name for x in sc.modes] == ["bf16", "fp8-kv", "fp8-w", "fp8-w+kv"]
    assert [(x.kv_cache_dtype, x.quantization) for x in sc.modes] == [("auto", ""), ("fp8", ""), ("auto", "fp8"), ("fp8", "fp8")]
    assert sc.server.max_model_len == 131072  # fits on an H200: the config's
    text = out.read_text()
    assert "# GPU: NVIDIA H200 (NVML, 139.8 GiB, compute capability 9.0)" in text
    assert "max_model_len = 131072         # from config.json (max_position_embeddings 131072)" in text
    kv = {ln.split()[1]: ln for ln in text.splitlines() if ln.startswith("#   ") and "-> KV-bound concurrency" in ln}
    assert set(kv) == {"bf16", "fp8-kv", "fp8-w", "fp8-w+kv"}
    assert sc.slo.latency == {"ttft_p95_ms": 2000.0, "tpot_p95_ms": 50.0} and "# Defaults for an interactive chat" in text


def test_a_moe_directory_and_a_pre_hopper_gpu(tmp_path, monkeypatch):
    """Mixtral's config.json on an A100 (8.0): no FP8 tensor cores there, so the fp8 weights are
    weight-only (W8A16, FP8 Marlin) and named so; the header says why."""
    FakeGpuBox(monkeypatch, [A100()])
    m = tmp_path / "mixtral"
    m.mkdir()
    (m / "config.json").write_text((MODELS_DIR / "mixtral-8x7b.json").read_text())
    (m / "model-00001-of-00019.safetensors").write_bytes(b"")  # weights present: no dummy
    rc, out = init(tmp_path, str(m), "--tp", "2")
    assert rc == 0
    sc = load_scenario(out)
    assert [x.name for x in sc.modes] == ["bf16", "fp8-kv", "fp8-w8a16", "fp8-w8a16+kv"]
    assert sc.server.load_format == "" and sc.server.tensor_parallel_size == 2
    text = out.read_text()
    assert "MoE 8 experts, 2 active" in text and "A100-80G x2 (per GPU)" in text
    assert "A100-80G has no FP8 tensor cores (compute capability 8.9): fp8 weights run weight-only (W8A16" in text


def test_an_awq_directory(tmp_path, monkeypatch):
    FakeGpuBox(monkeypatch, [H200()])
    m = tmp_path / "awq"
    m.mkdir()
    (m / "config.json").write_text((MODELS_DIR / "llama-3.1-8b-awq.json").read_text())
    rc, out = init(tmp_path, str(m))
    sc = load_scenario(out)
    assert [(x.name, x.quantization, x.kv_cache_dtype, x.dtype) for x in sc.modes] == [
        ("awq-int4", "awq_marlin", "auto", "bfloat16"), ("awq-int4+fp8-kv", "awq_marlin", "fp8", "bfloat16")]
    text = out.read_text()
    assert "checkpoint quantization: awq" in text and "need the unquantized checkpoint" in text
    assert "weights   5.38 GiB" in text  # int4 weights, from the estimator


@pytest.mark.parametrize("quant, want", [
    ({"quant_method": "gptq", "bits": 4, "group_size": 128}, [("gptq-int4", "gptq_marlin"), ("gptq-int4+fp8-kv", "gptq_marlin")]),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, [("fp8-w", "fp8"), ("fp8-w+kv", "fp8")]),
])
def test_gptq_and_fp8_checkpoints(tmp_path, monkeypatch, quant, want):
    FakeGpuBox(monkeypatch, [H200()])
    rc, out = init(tmp_path, str(model_dir(tmp_path / "q", quantization_config=quant)))
    assert [(x.name, x.quantization) for x in load_scenario(out).modes] == want


def test_an_mla_model_and_a_lowered_max_model_len(tmp_path):
    """DeepSeek-V2-Lite (MLA) on an L4: its 163,840 positions do not fit in the KV cache: lowered, and said."""
    rc, out = init(tmp_path, "deepseek-v2-lite", "--gpu", "L4")
    sc = load_scenario(out)
    text = out.read_text()
    assert ", MLA" in text and "KV latent 512+64" in text
    assert sc.server.max_model_len < 163840 and "config.json says 163840, lowered" in text
    assert sc.workload.prompt_tokens.value + sc.workload.output_tokens.value <= sc.server.max_model_len
    # bf16 weights (29 GiB) leave no KV cache on a 24 GB L4: those modes are left out, and said so
    assert [m.name for m in sc.modes] == ["fp8-w", "fp8-w+kv"] and "mode bf16 left out: it does not fit on L4" in text


def test_a_model_id_from_the_local_hugging_face_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    snap = cache / "models--meta-llama--Llama-3.1-8B" / "snapshots" / "abc123"
    model_dir(snap)
    (cache / "models--meta-llama--Llama-3.1-8B" / "refs").mkdir()
    (cache / "models--meta-llama--Llama-3.1-8B" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    rc, out = init(tmp_path, "meta-llama/Llama-3.1-8B", "--gpu", "H100")
    sc = load_scenario(out)
    assert rc == 0 and sc.server.model == "meta-llama/Llama-3.1-8B"
    assert f"server.model='\"{snap}\"'" in out.read_text()  # the what-if gives the simulator the cached config


def test_refusals_are_one_line_exit_2_and_write_nothing(tmp_path, capsys):
    rc, out = init(tmp_path, str(tmp_path / "nope"))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"{tmp_path / 'nope'} does not exist" in err[0] and not out.exists()
    rc, out = init(tmp_path, "some-org/not-cached-model")
    err = capsys.readouterr().err
    assert rc == 2 and "not in the local Hugging Face cache" in err and "huggingface-cli download" in err
    out.write_text("mine\n")
    rc, _ = init(tmp_path, "llama-3.1-8b")
    assert rc == 2 and "exists: --force" in capsys.readouterr().err and out.read_text() == "mine\n"
    assert main(["init", "llama-3.1-8b", "--out", str(out), "--force"]) == 0 and load_scenario(out).name == "llama-3.1-8b-h200"
    assert not list(tmp_path.glob(".out.toml.*"))  # no temporary file left


def test_default_location_is_the_user_dir_and_runs_by_name(tmp_path, monkeypatch, capsys):
    """Written into <user dir>/scenarios/, it is listed by `kvtui scenarios` and runs by its name."""
    monkeypatch.setenv("KVTUI_HOME", str(tmp_path / "home"))
    assert main(["init", "llama-3.1-8b", "--gpu", "L4", "--prompt", "512", "--output", "64"]) == 0
    out = capsys.readouterr().out
    path = tmp_path / "home" / "scenarios" / "llama-3.1-8b-l4.toml"
    assert f"wrote {path}" in out and "kvtui run llama-3.1-8b-l4 --fast --headless" in out
    assert main(["scenarios"]) == 0
    assert str(path) in capsys.readouterr().out
    rc = main(["run", "llama-3.1-8b-l4", "--headless", "--fast", "--mode", "bf16", "--set", "ramp.max=8",
               "--out", str(tmp_path / "r.json")])
    assert rc == 0 and (tmp_path / "r.json").exists()
