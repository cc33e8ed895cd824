"""Model and GPU catalogues, the memory formula, and `kvtui estimate`."""

from __future__ import annotations

import json
import math

import pytest

from kvtui.cli.entry import main
from kvtui.errors import UsageError
from kvtui.simulator.model.catalog import bundled_models, gpu_names, load_gpu, load_model
from kvtui.simulator.model.estimator import estimate_memory, resolve_settings
from kvtui.simulator.model.roofline import weight_bytes


def test_llama_8b_is_the_calibration_shape():
    m = load_model("llama-3.1-8b")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.intermediate, m.vocab) == (32, 4096, 32, 8, 128, 14336, 128256)
    assert not m.tie_embeddings
    assert m.kv_bytes_per_token(2) == 128 * 1024  # 32 x 8 x 128 x 2 x 2 B, the README's figure
    assert m.kv_bytes_per_token(1) == 64 * 1024


@pytest.mark.parametrize(
    "name,total_b,active_b",
    [
        ("llama-3.1-8b", 8.03, None),
        ("llama-3.1-70b", 70.55, None),
        ("qwen2.5-7b", 7.62, None),
        ("qwen2.5-32b", 32.76, None),
        ("mixtral-8x7b", 46.70, 12.88),
        ("deepseek-v2-lite", 15.71, None),
        ("deepseek-v3", 671.0, 37.5),
    ],
)
def test_parameter_counts_match_published_sizes(name, total_b, active_b):
    m = load_model(name)
    assert m.total_params / 1e9 == pytest.approx(total_b, rel=0.01)
    if active_b:
        assert m.active_params / 1e9 == pytest.approx(active_b, rel=0.02)
        assert m.active_params < m.total_params


def test_mla_caches_the_latent():
    m = load_model("deepseek-v2-lite")
    assert m.is_mla and m.is_moe
    assert m.kv_bytes_per_token(2) == 27 * (512 + 64) * 2
    # all experts resident: weights are the total, not the active parameters
    assert weight_bytes(m, "bf16") == pytest.approx(m.total_params * 2, rel=0.001)


def test_lookups_are_case_insensitive_and_errors_list_the_names():
    assert load_model("LLaMA-3.1-8B").name == "llama-3.1-8b"
    assert load_model("meta-llama/Llama-3.1-8B-Instruct").name == "llama-3.1-8b"
    assert load_gpu("h200").name == "H200"
    assert load_gpu("nvidia a100-sxm4-80gb").name == "A100-80G"
    assert load_gpu("rtx 4090").name == "RTX-4090"
    with pytest.raises(UsageError) as e:
        load_model("gpt-9")
    assert all(n in str(e.value) for n in bundled_models())
    with pytest.raises(UsageError) as e:
        load_gpu("V100")
    assert all(n in str(e.value) for n in gpu_names())
    assert {"H100", "H200", "A100-80G", "L40S", "L4", "B200", "RTX-4090"} <= set(gpu_names())


def test_config_json_file_and_folder(tmp_path):
    cfg = {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
           "intermediate_size": 8192, "vocab_size": 128256, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
           "max_position_embeddings": 131072}
    d = tmp_path / "llama-3.2-1b"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    m = load_model(str(d))
    assert m.name == "llama-3.2-1b" and m.head_dim == 64 and m.tie_embeddings
    assert m.total_params / 1e9 == pytest.approx(1.24, rel=0.01)  # Llama-3.2-1B
    assert load_model(str(d / "config.json")).total_params == m.total_params
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UsageError):
        load_model(str(tmp_path / "bad.json"))
    (tmp_path / "empty.json").write_text("{}")
    with pytest.raises(UsageError):
        load_model(str(tmp_path / "empty.json"))


def test_weight_formats_shrink_the_weights():
    m = load_model("llama-3.1-8b")
    bf16, fp8, int8, int4 = (weight_bytes(m, f) for f in ("bf16", "fp8", "int8", "int4"))
    c = m.counts()
    kept = (c["embed"] + c["lm_head"] + c["norms"]) * 2  # stays bf16 in every format
    assert fp8 == pytest.approx(kept + c["linear"], rel=0.001)
    assert int4 - kept == pytest.approx(c["linear"] * (0.5 + 2.5 / 128), rel=0.001)  # group scales
    assert bf16 > int8 > fp8 > int4
    assert (int4 - kept) / (bf16 - kept) == pytest.approx(0.26, abs=0.01)  # "about quartered"


@pytest.mark.parametrize("quantization", ["awq_marlin", "awq", "gptq_marlin"])
def test_awq_marlin_mode_is_int4_weights_near_the_h200_measurement(quantization):
    """The H200 re-run's awq-int4+fp8-kv mode (--quantization awq_marlin --dtype bfloat16
    --kv-cache-dtype fp8, AWQ group 128): vLLM 0.26 measured 5.49 GiB of weights and 1,949,744 KV
    tokens (docs/results/h200-v2-d.json). The simulator maps it to int4 weights + fp8 KV and lands
    at 5.38 GiB (-2 %: the int4 format is a prior, not fitted) and within 0.2 % on the KV tokens."""
    from kvtui.io.scenario.schema import Mode, Server
    from kvtui.simulator.engine.scheduler import SchedulerSim
    from kvtui.simulator.model.roofline import load_calibration

    mode = Mode("awq-int4+fp8-kv", dtype="bfloat16", kv_cache_dtype="fp8", quantization=quantization)
    assert mode.weights == "int4"
    m, g = load_model("llama-3.1-8b"), load_gpu("H200")
    server = Server(max_model_len=8192, gpu_memory_utilization=0.9, enable_prefix_caching=False)
    sched = SchedulerSim(m, g, mode, server, calibration=load_calibration())
    assert (sched.weights_fmt, sched.kv_bytes) == ("int4", 1)
    assert sched.est.weights_gib == pytest.approx(5.49, rel=0.03)
    assert sched.est.kv_tokens == pytest.approx(1_949_744, rel=0.005)


def test_the_formula_adds_up():
    m, g = load_model("qwen2.5-32b"), load_gpu("H100")
    s = resolve_settings(m, g, max_model_len=8192)
    e = estimate_memory(m, g, "fp8", "fp8", s, prompt_tokens=1000, output_tokens=200)
    assert e.kv_cache_gib == pytest.approx(e.budget_gib - e.weights_gib - e.activation_gib - e.non_torch_gib)
    assert e.budget_gib == pytest.approx(g.usable_gib * 0.9)
    assert e.num_gpu_blocks == int(e.kv_cache_gib * 2**30 // (16 * m.kv_bytes_per_token(1)))
    assert e.kv_tokens == 16 * e.num_gpu_blocks
    assert e.blocks_per_request == math.ceil(1200 / 16)
    assert e.kv_bound_concurrency == e.num_gpu_blocks // e.blocks_per_request
    assert e.max_concurrency_reported == pytest.approx(e.kv_tokens / 8192)
    assert e.fits


def test_does_not_fit_says_why():
    m, g = load_model("llama-3.1-70b"), load_gpu("L4")
    e = estimate_memory(m, g, "bf16", "auto", resolve_settings(m, g, max_model_len=8192))
    assert not e.fits and e.kv_tokens == 0 and "No available memory" in e.problem
    small = resolve_settings(m, load_gpu("H200"), max_model_len=131072, gpu_memory_utilization=0.55)
    e = estimate_memory(m, load_gpu("H200"), "fp8", "auto", small)
    assert not e.fits and "max seq len" in e.problem


def test_tensor_parallel_splits_weights_and_kv_heads():
    m, g = load_model("llama-3.1-70b"), load_gpu("H200")
    one = estimate_memory(m, g, "bf16", "auto", resolve_settings(m, g, max_model_len=8192))
    four = estimate_memory(m, g, "bf16", "auto", resolve_settings(m, g, max_model_len=8192, tp=4))
    assert four.weights_gib == pytest.approx(one.weights_gib / 4, rel=0.02)
    assert four.kv_bytes_per_token == one.kv_bytes_per_token // 4
    assert four.kv_tokens > 4 * one.kv_tokens  # 4x less KV per token, more room per GPU


def test_defaults_follow_vllm_per_gpu():
    m = load_model("llama-3.1-8b")
    big = resolve_settings(m, load_gpu("H200"))
    small = resolve_settings(m, load_gpu("L40S"))
    assert (big.max_num_seqs, big.max_num_batched_tokens, big.block_size, big.prefix_caching) == (1024, 8192, 16, True)
    assert (small.max_num_seqs, small.max_num_batched_tokens) == (256, 2048)
    assert resolve_settings(m, load_gpu("A100-80G")).max_num_seqs == 256


# --- the command ------------------------------------------------------------------------------
def test_estimate_prints_each_term(capsys):
    assert main(["estimate", "--model", "llama-3.1-8b", "--gpu", "H200"]) == 0
    out = capsys.readouterr().out
    for term in ("GPU memory", "gpu_memory_utilization", "- weights", "- activation peak", "- non-torch memory",
                 "= KV cache", "KV bytes per token", "= GPU KV blocks", "= KV tokens", "max concurrency", "CUDA graphs",
                 "CUDA context", "NVML"):
        assert term in out, term
    tokens = int(next(line for line in out.splitlines() if "= KV tokens" in line).split()[3].replace(",", ""))
    assert tokens == pytest.approx(896_912, rel=0.05)  # vLLM 0.26 on the H200


def test_estimate_concurrency_and_json(capsys):
    assert main(["estimate", "--model", "llama-3.1-8b", "--gpu", "h200", "--kv-dtype", "fp8", "--weights", "fp8",
                 "--prompt", "2048", "--output", "256", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kv_cache_dtype"] == "fp8" and d["weights"] == "fp8"
    assert d["blocks_per_request"] == 144
    assert d["kv_bound_concurrency"] == d["num_gpu_blocks"] // 144
    assert d["kv_tokens"] == pytest.approx(1_899_696, rel=0.05)
    assert [t["term"] for t in d["terms"]][-1] == "= KV cache"


def test_awq_config_defaults_to_int4(capsys):
    assert main(["estimate", "--model", "llama-3.1-8b-awq", "--gpu", "L40S", "--context", "4096"]) == 0
    out = capsys.readouterr().out
    assert "weights (int4" in out and "KV-bound concurrency @ 4096" in out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--model", "llama-9", "--gpu", "H200"], "unknown model"),
        (["--model", "llama-3.1-8b", "--gpu", "V100"], "unknown GPU"),
        (["--model", "llama-3.1-8b", "--gpu", "H200", "--context", "100", "--prompt", "10"], "not both"),
        (["--model", "llama-3.1-8b", "--gpu", "H200", "--context", "100000"], "max_model_len"),
        (["--model", "llama-3.1-8b", "--gpu", "H200", "--gpu-memory-utilization", "1.5"], "utilization"),
    ],
)
def test_estimate_usage_errors_are_one_line_exit_2(capsys, argv, needle):
    assert main(["estimate", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_estimate_bad_choice_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["estimate", "--model", "llama-3.1-8b", "--gpu", "H200", "--weights", "int3"])
    assert e.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_estimate_verdict_first_side_by_side_and_exit_1_when_it_does_not_fit(capsys):
    """Issue 20: the verdict on the first line, bf16/fp8 side by side, exit 1 when it does not fit,
    no negative KV cache, and an alias said out loud (A100 is read as A100-80G)."""
    assert main(["estimate", "--model", "llama-3.1-70b", "--gpu", "A100"]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("DOES NOT FIT: llama-3.1-70b on A100-80G")
    assert "--gpu A100 read as A100-80G" in lines[1]
    kv = next(line for line in lines if "= KV cache" in line)
    assert "none" in kv and "short by" in kv and "-" not in kv.split("=", 1)[1].split("short")[0]
    assert "bf16 / fp8 side by side" in out and "fp8" in out.split("side by side")[1]
    assert main(["estimate", "--model", "llama-3.1-8b", "--gpu", "H200", "--context", "2304"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("FITS: llama-3.1-8b on H200") and "read as" not in out
    table = out.split("side by side:")[1].splitlines()
    rows = [r.split() for r in table if r.startswith(("bf16", "fp8"))]
    conc = {(r[0], r[1]): int(r[4].replace(",", "")) for r in rows}
    assert conc[("bf16", "fp8")] >= 2 * conc[("bf16", "auto")] - 1  # fp8 KV: twice the tokens per byte
