"""Why did vLLM not start, or die? One kind and one clear message from the log tail.

Kinds (EngineError.kind):
  oom_kv       not enough memory for the weights + a KV cache that holds max_model_len
  bad_flag     the command line was refused (argparse, config validation)
  bad_model    the model directory / name is missing or is not a model vLLM can read
  unsupported  dtype, quantization or KV dtype not supported by this build / device
  port_taken   the port is already in use
  crashed      the process exited (or /health answered 503) for another reason
  timeout      not ready within startup_timeout_s

The specific kinds are searched in every line of the tail, in the order above: an engine
that fails for lack of memory also prints a generic "Engine core initialization failed",
which must not hide the real cause.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import Any, Iterable

from kvtui.errors import EngineError

OOM_KV = "oom_kv"
BAD_FLAG = "bad_flag"
BAD_MODEL = "bad_model"
UNSUPPORTED = "unsupported"
PORT_TAKEN = "port_taken"
CRASHED = "crashed"
TIMEOUT = "timeout"
KINDS = (OOM_KV, BAD_FLAG, BAD_MODEL, UNSUPPORTED, PORT_TAKEN, CRASHED, TIMEOUT)

_ERRORISH = re.compile(r"Error\b|Exception\b|\bERROR\b|error:|Traceback|\bFATAL\b|\bfailed\b", re.I)

# (kind, pattern, needs an error-looking line, hint)
_RULES: list[tuple[str, re.Pattern[str], bool, str]] = [
    (
        # pydantic's "1 validation error for ModelConfig" says nothing; the reason is on the
        # "Value error, …" line under it (the H200 run of a 70B-shape config of 4,096 positions).
        BAD_FLAG,
        re.compile(r"Value error, User-specified max_model_len \(\d+\) is greater than the derived max_model_len"),
        False,
        "lower server.max_model_len to the model's context length, or give the model a larger "
        "max_position_embeddings (a dummy model dir: tinymodel --max-position)",
    ),
    (
        BAD_FLAG,
        re.compile(
            r"error: unrecognized arguments?:.*|error: argument [^:]+: .*|"
            r"error: the following arguments are required:.*|error: ambiguous option:.*|"
            r"\d+ validation errors? for (?:Cache|Scheduler|Parallel|Load|Compilation|Observability|"
            r"Structured\w*|Speculative|LoRA|Engine)\w*Config.*"
        ),
        False,
        "check the server's extra_args and the mode's flags against `vllm serve --help` for this version",
    ),
    (
        PORT_TAKEN,
        re.compile(r"\[Errno 98\][^\n]*|[Aa]ddress already in use[^\n]*|port \d+ is (?:already )?in use[^\n]*"),
        False,
        "another process listens on that port: set server.port = 0 for a free one, or stop the other server",
    ),
    (
        OOM_KV,
        re.compile(
            r"No available memory for the cache blocks.*|"
            r"To serve at least one request with the model'?s max seq len.*|"
            r"(?:is )?larger than the "
            r"(?:maximum number of tokens that can be stored in KV cache|available KV cache memory).*|"
            r"Free memory on device .* is less than desired GPU memory utilization.*|"
            r"Available memory on node \d+ .* is less than desired CPU memory utilization.*|"
            r"(?:CUDA|HIP|XPU)? ?out of memory.*|OutOfMemoryError.*|Insufficient memory.*|"
            r"not enough (?:memory|KV cache).*|"
            r"insufficient KV cache.*|KV cache .* (?:is )?(?:too small|not enough).*"
        ),
        False,
        "lower max_model_len, raise gpu_memory_utilization or kv_cache_memory_bytes, use an fp8 KV cache, "
        "or free the device",
    ),
    (
        BAD_MODEL,
        re.compile(
            r"Invalid repository ID or local directory specified.*|"
            r"Repo id must be in the form .*|"
            r"is not a (?:local folder and is not a )?valid model identifier.*|"
            r"does not appear to have a file named config\.json.*|"
            r"Can't load (?:the )?(?:configuration|config|tokenizer) (?:of|for) .*|"
            r"No such file or directory:? .*(?:config\.json|tokenizer|\.safetensors|\.bin).*|"
            r"Cannot find any (?:of the )?model weights.*|"
            r"Unrecognized (?:model|configuration class).*|"
            r"(?:Repository|Revision) Not Found.*|HFValidationError.*|"
            r"Cannot find the config file for \w+.*|"
            r"Quantization method specified in the model config .* does not match.*|"
            r"[Cc]ould not (?:find|locate) (?:the )?(?:model|config).*|"
            r"(?:model|Model) path .* does not exist.*|"
            r"We couldn't connect to .* to load (?:the )?(?:files|this model).*|"
            r"[Ss]afetensors?.*(?:HeaderTooLarge|InvalidHeader|MetadataIncomplete|invalid).*"
        ),
        True,
        "point server.model (or the mode's model) at a local model directory with config.json, tokenizer and weights",
    ),
    (
        # The CPU build binds each local worker (TP x PP of one engine) to a NUMA node of its own by
        # default, and stops at startup on a box with fewer nodes than workers.
        UNSUPPORTED,
        re.compile(r"Not enough allowed NUMA nodes to bind threads of \d+ local CPUWorkers.*"),
        True,
        "bind the workers' threads yourself: server.env.VLLM_CPU_OMP_THREADS_BIND = \"0|1\" (one CPU list "
        "per worker, separated by |), or lower server.tensor_parallel_size",
    ),
    (
        # FlashAttention 3 with an fp8 KV cache quantizes the queries to fp8 and writes bf16 out,
        # so float16 activations (what AWQ checkpoints declare) fail at the first forward pass.
        UNSUPPORTED,
        re.compile(r"For FP16/BF16 input, output must have the same dtype as inputs\. "
                   r"For FP8 input, output must have dtype BF16.*"),
        True,
        "an fp8 KV cache on FlashAttention 3 needs bfloat16 activations: set the mode's dtype = \"bfloat16\" "
        "(awq_marlin runs AWQ int4 weights in bf16), or keep float16 with kv_cache_dtype = \"auto\"",
    ),
    (
        UNSUPPORTED,
        re.compile(
            r"Model architectures? .* (?:are|is) not supported.*|"
            r".*(?:is|are) not supported (?:on|for|by|with|in) .*|"
            r".*not supported on (?:the )?(?:current|this) (?:platform|device|GPU|CPU).*|"
            r".*[Uu]nsupported (?:dtype|data type|quantization|kv[_ ]cache[_ ]dtype|platform|device).*|"
            r".*(?:does not|doesn't) support .*|"
            r".*requires (?:a )?(?:GPU|CUDA|compute capability|capability) .*|"
            r".*[Mm]inimum capability.*|"
            r".*is not (?:a )?supported (?:quantization|dtype).*|"
            r"NotImplementedError.*|"
            r"_C\w*::\w+\(\) expected at most 0 argument.*|"  # a kernel this build does not have (fp8 GEMM on CPU)
            r"Could not run '[\w:.]+' with arguments from the '\w+' backend.*|no kernel image is available.*"
        ),
        True,
        "pick a dtype / quantization / KV cache dtype this build and device support",
    ),
    (
        # Last: any other reason pydantic gives under "validation error for …Config".
        BAD_FLAG,
        re.compile(r"Value error, .*"),
        False,
        "vLLM's configuration check refused these settings for this model",
    ),
]

_TRACE_NOISE = re.compile(r"^\s*(?:File \"|\^+|~+|warnings\.warn|raise |return |self\.)")
_PREFIX = re.compile(r"^(?:\((?:APIServer|EngineCore\w*|Worker\w*|VllmWorker\S*)(?: pid=\d+)?\)\s*)+")
_LEVEL = re.compile(r"^(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d \[[^\]]+\]\s*")
_DEPRECATED = re.compile(r"DeprecationWarning|FutureWarning|UserWarning|deprecated", re.I)


@dataclass
class Failure:
    kind: str
    message: str
    line: str = ""  # the log line that decided it (prefixes removed)

    def error(self, log_tail: str = "") -> EngineError:
        return EngineError(self.kind, self.message, log_tail)


def strip_prefix(line: str) -> str:
    """'(EngineCore pid=12) ERROR 11-29 08:17:43 [core.py:1] ValueError: …' → 'ValueError: …'."""
    line = _PREFIX.sub("", line.strip())
    return _LEVEL.sub("", line).strip()


_LEVEL_OF = re.compile(r"^(?:\([^)]*\)\s*)*(INFO|WARNING|DEBUG|ERROR|CRITICAL)\s+\d\d-\d\d ")


def _lines(tail: str | Iterable[str], with_level: bool = False) -> list:
    if isinstance(tail, str):
        tail = tail.splitlines()
    out: list[Any] = []
    for x in tail:
        if not x or not x.strip():
            continue
        if with_level:
            m = _LEVEL_OF.match(x.strip())
            out.append((m.group(1) if m else "", strip_prefix(x)))
        else:
            out.append(strip_prefix(x))
    return out


def _shorten(text: str, n: int = 300) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= n else text[: n - 1] + "…"


def find_cause(tail: str | Iterable[str]) -> Failure | None:
    """The first specific cause (oom_kv, bad_flag, bad_model, unsupported, port_taken) in the tail."""
    lines = _lines(tail, with_level=True)
    for kind, rx, needs_error, hint in _RULES:
        for level, line in lines:
            if _DEPRECATED.search(line) or _TRACE_NOISE.search(line):
                continue
            if needs_error and level in ("INFO", "WARNING", "DEBUG"):
                continue
            m = rx.search(line)
            if not m:
                continue
            if needs_error and not _ERRORISH.search(line):
                continue
            detail = _shorten(line)
            return Failure(kind, f"{detail} — {hint}", line)
    return None


_EXC_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Exit)\b:?|"
                       r"Engine core initialization failed|EngineDeadError")
_GENERIC = re.compile(
    r"Engine core initialization failed|WorkerProc initialization failed|See (?:root cause|stack trace)|"
    r"EngineDeadError|EngineCore encountered an issue|^SystemExit|^KeyboardInterrupt"
)


def _last_error_line(tail: str | Iterable[str]) -> str | None:
    """The root cause: the first specific exception line, else the last generic one."""
    generic = None
    for line in _lines(tail):
        if _DEPRECATED.search(line) or _TRACE_NOISE.search(line) or not _EXC_LINE.search(line):
            continue
        if _GENERIC.search(line):
            generic = line
            continue
        return _shorten(line)
    return _shorten(generic) if generic else None


_SAID = re.compile(r"^\s*(?:kvtui: |(?:\S+: )?error: |ERROR\b)")


def _last_said(tail: str | Iterable[str]) -> str | None:
    """No exception in the tail: the last line that states an error (a usage error of the simulator,
    `kvtui: unknown GPU …`, argparse's `error: …`), so a start failure names its cause."""
    said = [ln for ln in _lines(tail) if ln.strip() and _SAID.search(ln)]
    return _shorten(said[-1].strip()) if said else None


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    if returncode > 128 and returncode - 128 in {s.value for s in signal.Signals}:
        return f"exit status {returncode} ({signal.Signals(returncode - 128).name})"
    return f"exit status {returncode}"


def classify_exit(tail: str | Iterable[str], returncode: int | None, during: str = "startup") -> Failure:
    """The process is gone (or never became ready): name the cause."""
    if not isinstance(tail, str):
        tail = list(tail)
    cause = find_cause(tail)
    if cause is not None:
        return cause
    last = _last_error_line(tail) or _last_said(tail)
    how = describe_exit(returncode)
    where = "during startup" if during == "startup" else "while serving"
    msg = f"vLLM {how} {where}"
    if last:
        msg += f": {last}"
    return Failure(CRASHED, msg, last or "")


def classify_timeout(timeout_s: float, phase: str | None = None) -> Failure:
    where = f" (last phase: {phase})" if phase else ""
    return Failure(
        TIMEOUT,
        f"not ready within {timeout_s:g} s{where} — raise server.startup_timeout_s, or look at the log tail",
    )


def classify_unhealthy(status: int | None, returncode: int | None = None, tail: str | Iterable[str] = ()) -> Failure:
    """A running server stopped answering /health with 200."""
    if returncode is not None:
        return classify_exit(tail, returncode, during="run")
    if status == 503:
        last = _last_error_line(tail)
        return Failure(CRASHED, "/health answered 503: the engine died" + (f" ({last})" if last else ""), last or "")
    return Failure(CRASHED, f"/health answered {status}")
