"""A dummy-weights model directory of a bundled shape: the fields vLLM's model class reads, a tokenizer sized to
the vocabulary whose special ids are the config's, and what kvtui's estimator and `kvtui init` read back."""

from __future__ import annotations

import json

import pytest

from kvtui.runtime.engines.vllm.shapedummy import build, main
from kvtui.simulator.model.catalog import load_model


def test_deepseek_v2_lite_directory_has_mla_moe_and_vllm_fields(tmp_path):
    d = build("deepseek-v2-lite", tmp_path / "dsv2")
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["DeepseekV2ForCausalLM"]
    # what vLLM's DeepseekV2 reads beyond the estimator's shape (the router and the YaRN rope)
    for k in ("topk_method", "n_group", "topk_group", "routed_scaling_factor", "scoring_func", "rope_scaling",
              "rms_norm_eps", "rope_theta"):
        assert k in cfg, k
    assert not any(k.startswith("_") for k in cfg)
    tok = json.loads((d / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    assert len(vocab) == cfg["vocab_size"] == 102400
    specials = {t["id"]: t["content"] for t in tok["added_tokens"]}
    assert vocab[specials[cfg["bos_token_id"]]] == cfg["bos_token_id"]
    assert vocab[specials[cfg["eos_token_id"]]] == cfg["eos_token_id"]
    assert not list(d.glob("*.safetensors"))  # served with --load-format dummy
    spec = load_model(str(d))
    assert spec.is_mla and spec.is_moe and (spec.num_experts, spec.experts_per_tok) == (64, 6)
    assert spec.kv_bytes_per_token(2) == 27 * (512 + 64) * 2  # the latent KV per token in bf16


def test_qwen3_moe_shape_and_fewer_layers(tmp_path):
    d = build("qwen3-30b-a3b", tmp_path / "q", layers=12)
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_moe" and cfg["num_hidden_layers"] == 12 and cfg["max_window_layers"] == 12
    assert cfg["decoder_sparse_step"] == 1 and cfg["mlp_only_layers"] == []
    spec = load_model(str(d))
    assert spec.is_moe and not spec.is_mla and (spec.num_experts, spec.experts_per_tok) == (128, 8)
    assert json.loads((d / "kvtui-shapedummy.json").read_text())["layers"] == 12
    full = load_model("qwen3-30b-a3b")
    assert 29e9 < full.total_params < 32e9  # Qwen3-30B-A3B: 30.5 B


def test_a_stale_weight_file_is_removed(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"x")
    build("llama-3.1-8b", d)
    assert not (d / "model.safetensors").exists()


@pytest.mark.parametrize("argv", [["no-such-shape", "X"], ["deepseek-v2-lite", "X", "--layers", "99"]])
def test_bad_input_is_refused_with_exit_2(tmp_path, capsys, argv):
    argv = [a.replace("X", str(tmp_path / "out")) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("shapedummy: ") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "config.json").exists()
