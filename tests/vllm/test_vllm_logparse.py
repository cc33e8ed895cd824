"""The startup log parser on every real log we have (H200 0.26.0, CPU 0.32.0) and older spellings."""

from __future__ import annotations

import pytest

from kvtui.runtime.engines.base import StartupFacts
from kvtui.runtime.engines.vllm.logparse import (
    API_SERVER,
    CUDA_GRAPHS,
    ENGINE_INIT,
    LOADING_WEIGHTS,
    PHASES,
    PROFILING_KV,
    READY,
    STARTING,
    TORCH_COMPILE,
    UNCALIBRATED_FP8,
    StartupLogParser,
    clean_line,
    facts_from_cache_config,
    facts_from_metrics_text,
    parse_log,
)

from vllmtest_helpers import read_log

GPU_ALL_PHASES = [STARTING, ENGINE_INIT, LOADING_WEIGHTS, TORCH_COMPILE, PROFILING_KV, CUDA_GRAPHS, API_SERVER, READY]
CPU_PHASES = [STARTING, ENGINE_INIT, LOADING_WEIGHTS, TORCH_COMPILE, PROFILING_KV, API_SERVER, READY]

# name: (weights GiB, load s, KV GiB, KV tokens, max concurrency, CUDA graph GiB, compile s, init s, kv dtype, quant, warned)
H200 = {
    "bf16": (15.0, 2.145137, 109.49, 896_912, 109.49, 0.98, 17.26, 41.10, "auto", None, False),
    "kv-fp8": (15.0, 2.320280, 109.49, 1_793_840, 218.97, 0.97, 25.19, 56.12, "fp8", None, True),
    "w-fp8": (8.51, 3.391146, 115.95, 949_840, 115.95, 0.90, 38.79, 65.42, "auto", "fp8", False),
    "w-fp8-kv-fp8": (8.51, 2.378935, 115.95, 1_899_696, 231.90, 0.90, 38.93, 64.82, "fp8", "fp8", True),
}


@pytest.mark.parametrize("name", sorted(H200))
def test_h200_startup_logs(name):
    w, load_s, kv_gib, tokens, conc, graphs, compile_s, init_s, kv_dtype, quant, warned = H200[name]
    p = parse_log(read_log(f"h200-0.26.0-startup-{name}.log"))
    f = p.facts
    assert f.weights_gib == w
    assert f.load_s == load_s
    assert f.kv_cache_gib == kv_gib
    assert f.kv_cache_tokens == tokens
    assert f.max_concurrency_reported == conc
    assert f.max_concurrency_len == 8192
    assert f.cuda_graph_gib == graphs
    assert f.compile_s == compile_s
    assert f.init_engine_s == init_s
    assert f.kv_cache_dtype == kv_dtype
    assert f.device == "GPU"
    assert f.attention_backend == "FLASH_ATTN"
    assert f.max_num_batched_tokens == 8192
    assert f.prefix_caching is True
    assert f.gpu_total_gib == 139.8
    assert f.gpu_memory_utilization == 0.9
    assert f.activation_peak_gib == (1.1 if w == 15.0 else 1.13)
    assert f.phases == GPU_ALL_PHASES
    assert (UNCALIBRATED_FP8 in f.warnings) is warned
    assert p.version == "0.26.0"
    assert p.max_model_len == 8192
    assert p.extra["quantization"] == quant
    assert p.extra["load_format"] == "dummy"
    assert p.extra["flash_attn_version"] == 3
    assert p.extra["cudagraph_capture_sizes"][:4] == [1, 2, 4, 8]
    assert p.extra["cudagraph_capture_sizes"][-1] == 512
    assert p.extra["non_torch_gib"] == 0.22


def test_h200_fp8_kv_doubles_tokens_and_fp8_weights_free_kv():
    t = {n: parse_log(read_log(f"h200-0.26.0-startup-{n}.log")).facts for n in H200}
    # twice the tokens, give or take one block of 16 (the pool is cut into whole blocks)
    assert abs(t["kv-fp8"].kv_cache_tokens - 2 * t["bf16"].kv_cache_tokens) <= 16
    assert abs(t["w-fp8-kv-fp8"].kv_cache_tokens - 2 * t["w-fp8"].kv_cache_tokens) <= 16
    assert round(t["bf16"].weights_gib - t["w-fp8"].weights_gib, 2) == 6.49


# name: (KV GiB, KV tokens, max concurrency, init s, load s, kv dtype, kv bytes flag)
CPU = {
    "kv-50MB": (0.05, 24_320, 11.88, 9.56, 0.03, "auto", 50_000_000),
    "kv-auto": (2.0, 1_048_576, 512.00, 31.43, 0.03, "auto", None),
    "kv-fp8-50MB": (0.05, 48_768, 23.81, 9.87, 0.03, "fp8", 50_000_000),
    "kv-fp8": (2.0, 2_097_152, 1024.00, 26.20, 0.01, "fp8", None),
}


@pytest.mark.parametrize("name", sorted(CPU))
def test_cpu_startup_logs(name):
    kv_gib, tokens, conc, init_s, load_s, kv_dtype, kv_bytes = CPU[name]
    p = parse_log(read_log(f"cpu-0.32.0-startup-{name}.log"))
    f = p.facts
    assert f.kv_cache_gib == kv_gib
    assert f.kv_cache_tokens == tokens
    assert f.max_concurrency_reported == conc
    assert f.max_concurrency_len == 2048
    assert f.init_engine_s == init_s
    assert f.load_s == load_s
    assert f.kv_cache_dtype == kv_dtype
    assert f.device == "CPU"
    assert f.prefix_caching is True
    # The CPU build says nothing of weight memory, CUDA graphs or GPU totals: None, never 0.
    assert f.weights_gib is None and f.cuda_graph_gib is None and f.gpu_total_gib is None
    assert f.phases == CPU_PHASES
    assert (UNCALIBRATED_FP8 in f.warnings) is (kv_dtype == "fp8")
    assert p.version == "0.32.0"
    assert p.max_model_len == 2048
    assert p.extra.get("kv_cache_memory_bytes") == kv_bytes
    assert p.extra["cudagraph_mode"] == "NONE"
    assert p.extra["dtype"] == "bfloat16"


def test_cpu_fp8_kv_doubles_tokens():
    auto = parse_log(read_log("cpu-0.32.0-startup-kv-50MB.log")).facts
    fp8 = parse_log(read_log("cpu-0.32.0-startup-kv-fp8-50MB.log")).facts
    assert fp8.kv_cache_tokens == 48_768 and auto.kv_cache_tokens == 24_320
    assert 1.99 < fp8.kv_cache_tokens / auto.kv_cache_tokens < 2.01


def test_captured_tiny_model_log():
    """A start of this project's own tiny model, captured on this machine."""
    p = parse_log(read_log("cpu-0.32.0-startup-tiny-captured.log"))
    f = p.facts
    assert (f.kv_cache_tokens, f.max_concurrency_reported, f.max_concurrency_len) == (24_320, 11.88, 2048)
    assert f.kv_cache_gib == 0.05
    assert f.init_engine_s == 51.11
    assert f.load_s == 0.02
    assert p.extra["non_default_args"]["api_key"] == "***"  # vLLM masks it itself, too
    assert f.phases == CPU_PHASES


def test_incremental_feed_reports_each_phase_once_in_order():
    p = StartupLogParser()
    assert p.phase == STARTING
    seen = []
    for line in read_log("h200-0.26.0-startup-bf16.log").splitlines():
        before = p.facts.kv_cache_tokens
        new = p.feed(line)
        if new:
            seen.append(new)
            assert p.phase == new
        if before is None and p.facts.kv_cache_tokens is not None:
            # the KV size is known while the phase is "profiling / KV cache", before CUDA graphs
            assert p.phase == PROFILING_KV
            assert not p.ready
    assert seen == GPU_ALL_PHASES[1:]
    assert p.ready


def test_phase_never_moves_back():
    p = StartupLogParser()
    p.feed("(EngineCore pid=1) INFO 11-29 08:17:43 [kv_cache_utils.py:2177] GPU KV cache size: 896,912 tokens")
    assert p.phase == PROFILING_KV
    assert p.feed("(EngineCore pid=1) INFO 11-29 08:17:21 [model_runner.py:284] Loading model from scratch...") is None
    assert p.phase == PROFILING_KV
    assert p.mark_phase(READY) == READY
    assert p.mark_phase(API_SERVER) is None
    assert p.facts.phases == [STARTING, PROFILING_KV, READY]
    with pytest.raises(ValueError):
        p.mark_phase("compiling kernels")
    assert set(p.facts.phases) <= set(PHASES)


def test_feeds_into_a_given_facts_object():
    facts = StartupFacts(weights_gib=1.0)
    p = StartupLogParser(facts)
    p.feed("INFO 03-14 09:13:08 [kv_cache_utils.py:566] GPU KV cache size: 447,088 tokens")
    assert facts.kv_cache_tokens == 447_088 and facts.weights_gib == 1.0


# Real lines printed by older vLLM releases (v0 engine and early V1), as users posted them.
OLDER = """\
INFO 12-22 10:55:30 model_runner.py:1097] Loading model weights took 8.5107 GB
INFO 12-22 10:55:34 worker.py:241] Memory profiling takes 0.69 seconds
INFO 12-22 10:55:34 worker.py:241] the current vLLM instance can use total_gpu_memory (79.25GiB) x gpu_memory_utilization (0.15) = 11.89GiB
INFO 12-22 10:55:34 worker.py:241] model weights take 8.51GiB; non_torch_memory takes 0.26GiB; PyTorch activation peak memory takes 0.94GiB; the rest of the memory reserved for KV Cache is 2.18GiB.
INFO 12-22 10:55:35 gpu_executor.py:76] # GPU blocks: 715, # CPU blocks: 1310
INFO 12-22 10:55:35 gpu_executor.py:80] Maximum concurrency for 2048 tokens per request: 5.59x
INFO 12-22 10:55:38 model_runner.py:1413] Capturing cudagraphs for decoding. This may lead to unexpected consequences if the model is not static.
INFO 12-22 10:55:50 model_runner.py:1527] Graph capturing finished in 12 secs, took 0.53 GiB
INFO 12-22 10:55:50 llm_engine.py:431] init engine (profile, create kv cache, warmup model) took 19.95 seconds
INFO 12-22 10:55:51 api_server.py:640] Starting vLLM API server on http://0.0.0.0:8000
INFO:     Application startup complete.
"""

EARLY_V1 = """\
INFO 03-14 09:12:42 [cuda.py:215] Using Flash Attention backend on V1 engine.
INFO 03-14 09:12:55 [gpu_model_runner.py:1289] Model loading took 14.9888 GiB and 13.204526 seconds
INFO 03-14 09:13:05 [backends.py:420] Dynamo bytecode transform time: 5.12 s
INFO 03-14 09:13:07 [monitor.py:33] torch.compile takes 17.26 s in total
INFO 03-14 09:13:08 [kv_cache_utils.py:566] GPU KV cache size: 447,088 tokens
INFO 03-14 09:13:08 [kv_cache_utils.py:570] Maximum concurrency for 32,768 tokens per request: 13.64x
INFO 03-14 09:13:30 [gpu_model_runner.py:1624] Graph capturing finished in 22 secs, took 0.61 GiB
INFO 03-14 09:13:30 [core.py:138] init engine (profile, create kv cache, warmup model) took 35.41 seconds
"""


def test_older_v0_spellings():
    p = parse_log(OLDER)
    f = p.facts
    assert f.weights_gib == 8.5107
    assert f.gpu_total_gib == 79.25 and f.gpu_memory_utilization == 0.15
    assert f.activation_peak_gib == 0.94
    assert f.kv_cache_gib == 2.18
    assert f.num_gpu_blocks == 715
    assert (f.max_concurrency_reported, f.max_concurrency_len) == (5.59, 2048)
    assert f.cuda_graph_gib == 0.53
    assert f.init_engine_s == 19.95
    assert f.device == "GPU"
    assert f.phases == [STARTING, LOADING_WEIGHTS, PROFILING_KV, CUDA_GRAPHS, API_SERVER, READY]


def test_early_v1_spellings():
    f = parse_log(EARLY_V1).facts
    assert (f.weights_gib, f.load_s) == (14.9888, 13.204526)
    assert f.compile_s == 17.26
    assert f.kv_cache_tokens == 447_088
    assert (f.max_concurrency_reported, f.max_concurrency_len) == (13.64, 32_768)
    assert f.cuda_graph_gib == 0.61
    assert f.init_engine_s == 35.41
    assert f.attention_backend == "Flash Attention"


def test_failure_lines_still_give_the_memory_facts():
    f = parse_log(
        "(EngineCore pid=9) ERROR 11-29 10:00:00 [core.py:1] ValueError: Free memory on device (10.5/79.1 GiB) "
        "on startup is less than desired GPU memory utilization (0.9, 71.2 GiB). Decrease GPU memory utilization."
    ).facts
    assert (f.gpu_total_gib, f.gpu_memory_utilization) == (79.1, 0.9)


def test_progress_bar_redraws_keep_the_last_state():
    raw = "Capturing CUDA graphs (FULL):   0%|   | 0/51\rCapturing CUDA graphs (FULL): 100%|###| 51/51 [00:01<00:00]\r\n"
    assert clean_line(raw) == "Capturing CUDA graphs (FULL): 100%|###| 51/51 [00:01<00:00]"
    assert clean_line("\x1b[32mINFO\x1b[0m ok\n") == "INFO ok"
    p = StartupLogParser()
    p.feed("(EngineCore pid=1) INFO 11-29 08:17:43 [gpu_worker.py:560] Available KV cache memory: 109.49 GiB")
    assert p.feed(raw) == CUDA_GRAPHS


def test_max_num_seqs_and_prefix_caching_from_non_default_args():
    p = parse_log(
        "(APIServer pid=1) INFO 11-29 07:42:43 [api_utils.py:286] non-default args: {'model': '/m', "
        "'max_num_seqs': 64, 'max_num_batched_tokens': 4096, 'enable_prefix_caching': False, "
        "'gpu_memory_utilization': 0.8, 'kv_cache_dtype': 'fp8_e5m2'}"
    )
    f = p.facts
    assert (f.max_num_seqs, f.max_num_batched_tokens, f.prefix_caching) == (64, 4096, False)
    assert (f.gpu_memory_utilization, f.kv_cache_dtype) == (0.8, "fp8_e5m2")


def test_cache_config_info_cpu_scrape():
    f = facts_from_metrics_text(read_log("cpu-0.32.0-metrics-idle.txt"))
    assert f is not None
    assert (f.num_gpu_blocks, f.block_size, f.kv_cache_tokens) == (190, 128, 24_320)
    assert f.max_concurrency_reported == 11.875
    assert f.kv_cache_gib == pytest.approx(50_000_000 / 2**30)
    assert (f.kv_cache_dtype, f.prefix_caching, f.gpu_memory_utilization) == ("auto", True, 0.92)


def test_cache_config_info_h200_and_the_log_wins_on_merge():
    text = read_log("h200-0.26.0-cache-config-info.txt")
    from prometheus_client.parser import text_string_to_metric_families

    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    bf16, fp8 = (facts_from_cache_config(dict(s.labels)) for s in samples)
    assert (bf16.kv_cache_tokens, bf16.num_gpu_blocks, bf16.block_size) == (896_912, 56_057, 16)
    assert (fp8.kv_cache_tokens, fp8.num_gpu_blocks, fp8.kv_cache_dtype) == (1_793_840, 112_115, "fp8")
    assert bf16.kv_cache_gib is None  # "None" in the label: not reported
    log = parse_log(read_log("h200-0.26.0-startup-bf16.log")).facts
    merged = log.merge(bf16)
    assert merged.max_concurrency_reported == 109.49  # the log's rounded figure stays
    assert merged.num_gpu_blocks == 56_057 and merged.block_size == 16  # filled from /metrics


def test_metrics_text_without_cache_config():
    assert facts_from_metrics_text("# TYPE x gauge\nx 1\n") is None
    assert facts_from_metrics_text("garbage {{{") is None


def test_h200_launch_by_kvtui_itself():
    """vLLM 0.26.0 on an H200 started by VllmEngine (python3 -m vllm.entrypoints.cli.main serve), fp8 KV."""
    p = parse_log(read_log("h200-0.26.0-kvtui-launch-kv-fp8.log"))
    f = p.facts
    assert (f.weights_gib, f.kv_cache_gib, f.kv_cache_tokens) == (15.0, 109.49, 1_793_840)
    assert (f.max_concurrency_reported, f.max_concurrency_len) == (218.97, 8192)
    assert (f.cuda_graph_gib, f.compile_s, f.init_engine_s, f.load_s) == (0.97, 20.83, 45.88, 2.483012)
    assert f.phases == GPU_ALL_PHASES
    assert f.warnings == [UNCALIBRATED_FP8]
    # vLLM 0.26 prints the API key in its "non-default args": kvtui's log sink got it redacted
    assert p.extra["non_default_args"]["api_key"] == ["<redacted>"]
