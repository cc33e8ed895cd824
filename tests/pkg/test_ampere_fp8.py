"""fp8 on Ampere (issue 49): vLLM runs FP8 weights weight-only there (W8A16 through FP8 Marlin,
no FP8 tensor cores) and stores an fp8 KV cache. `kvtui init` offers those modes, named so; the
estimator and the simulator predict them as weight-only (half the weight bytes, 16-bit matmuls
with a dequant); Ada (L4, sm89) keeps its FP8 compute."""

from __future__ import annotations

import pytest

from kvtui.cli.entry import main
from kvtui.io.scenario import load_scenario

from pkg_helpers import A100, FakeGpuBox, model_dir

AMPERE_MODES = ["bf16", "fp8-kv", "fp8-w8a16", "fp8-w8a16+kv"]


def init(tmp_path, *args, name="out"):
    out = tmp_path / f"{name}.toml"
    assert main(["init", *args, "--out", str(out)]) == 0
    return load_scenario(out), out.read_text()


@pytest.mark.parametrize("gpu, modes", [("A100", AMPERE_MODES), ("A10", AMPERE_MODES),
                                        ("L4", ["bf16", "fp8-kv", "fp8-w", "fp8-w+kv"])])
def test_init_offers_fp8_on_ampere_as_weight_only_and_fp8_compute_on_ada(tmp_path, gpu, modes):
    sc, text = init(tmp_path, "llama-3.1-8b", "--gpu", gpu)
    assert [m.name for m in sc.modes] == modes
    assert [(m.kv_cache_dtype, m.quantization) for m in sc.modes] == [("auto", ""), ("fp8", ""), ("auto", "fp8"),
                                                                      ("fp8", "fp8")]
    for m in modes:  # each has its predicted line in the header
        assert any(line.startswith(f"#   {m} ") for line in text.splitlines()), m
    weight_only = "# fp8 weights, weight-only here (W8A16, FP8 Marlin: no FP8 tensor cores)"
    if gpu == "L4":  # Ada, sm89: FP8 tensor cores
        assert weight_only not in text and "FP8 GEMMs" in text and "W8A16" not in text
    else:
        assert weight_only in text and "the matmuls stay 16-bit" in text
        assert "has no FP8 tensor cores (compute capability 8.9): fp8 weights run weight-only (W8A16" in text


def test_init_on_a_real_ampere_card_and_an_fp8_checkpoint(tmp_path, monkeypatch):
    """NVML's A10 (8.6) and A100 (8.0): the same Ampere modes; an FP8 checkpoint there is its own
    weights weight-only, not refused."""
    FakeGpuBox(monkeypatch, [{"name": "NVIDIA A10", "total": 22.49, "free": 22.49, "cc": (8, 6), "procs": {}}])
    sc, text = init(tmp_path, str(model_dir(tmp_path / "dense")))
    assert [m.name for m in sc.modes] == AMPERE_MODES and "compute capability 8.6" in text
    FakeGpuBox(monkeypatch, [A100()])
    fp8 = model_dir(tmp_path / "fp8ckpt", quantization_config={"quant_method": "fp8", "activation_scheme": "dynamic"})
    sc, text = init(tmp_path, str(fp8), name="fp8")
    assert [(m.name, m.quantization, m.kv_cache_dtype) for m in sc.modes] == [
        ("fp8-w8a16", "fp8", "auto"), ("fp8-w8a16+kv", "fp8", "fp8")]
    assert "the checkpoint's own fp8 weights (the baseline here); fp8 weights, weight-only here (W8A16" in text


def test_the_prediction_models_weight_only_fp8_and_labels_it():
    """Weight-only on the A100: half the weight bytes read, matmuls no faster than bf16 (a dequant
    on top), so decode gains and a compute-bound prefill does not; on the L4 (Ada) FP8 GEMMs are
    faster. The estimator's notes and the simulator's startup warnings say weight-only."""
    from kvtui.io.scenario.schema import Mode, Server
    from kvtui.simulator.engine.scheduler import SchedulerSim
    from kvtui.simulator.model import catalog
    from kvtui.simulator.model.estimator import estimate_memory
    from kvtui.simulator.model.roofline import Roofline, load_calibration

    model, cal = catalog.load_model("llama-3.1-8b"), load_calibration()

    def ratios(gpu: str) -> tuple[float, float, float]:
        g = catalog.load_gpu(gpu)
        b, f = Roofline(model, g, "bf16", 2, cal), Roofline(model, g, "fp8", 2, cal)
        decode = f.time(64, 64, 64, 64 * 1024, 64 * 1024, False) / b.time(64, 64, 64, 64 * 1024, 64 * 1024, False)
        prefill = f.time(8192, 4, 4, 0, 4 * 2048 * 2048 / 2, True) / b.time(8192, 4, 4, 0, 4 * 2048 * 2048 / 2, True)
        return f.w_static / b.w_static, decode, prefill

    for gpu in ("A100", "A10"):
        w, decode, prefill = ratios(gpu)
        assert 0.5 <= w < 0.6 and decode < 0.9 and prefill >= 1.0, (gpu, w, decode, prefill)
    w, decode, prefill = ratios("L4")
    assert 0.5 <= w < 0.6 and decode < 0.9 and prefill < 0.8  # FP8 tensor cores: prefill gains too

    est = estimate_memory(model, catalog.load_gpu("A100"), "fp8", 1)
    assert any("weight-only (W8A16, FP8 Marlin)" in n for n in est.notes)
    assert not any("W8A16" in n for n in estimate_memory(model, catalog.load_gpu("L4"), "fp8", 1).notes)
    server = Server(engine="sim", gpu="A100", max_model_len=4096)
    sim = SchedulerSim(model, catalog.load_gpu("A100"), Mode(name="fp8-w8a16", quantization="fp8"), server)
    assert any("weight-only on A100-80G (W8A16, FP8 Marlin)" in w for w in sim.facts().warnings)
    sim = SchedulerSim(model, catalog.load_gpu("L4"), Mode(name="fp8-w", quantization="fp8"), server)
    assert not any("W8A16" in w for w in sim.facts().warnings)
