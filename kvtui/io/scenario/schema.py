"""The scenario: what to serve, in which precision modes, under which load, against which SLO.

Dataclasses hold the validated values; `kvtui.io.scenario.loader` builds them from TOML and
names the file, line and field of every problem.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

ENGINES = ("sim", "vllm", "external")
ROUTINGS = ("least_inflight", "round_robin")  # how kvtui spreads requests over replicas
APIS = ("completions", "chat")
DISTS = ("fixed", "uniform", "normal", "lognormal", "trace")  # trace: set from [workload] trace's rows
LOAD_SHAPES = ("concurrency", "rate", "trace")  # trace: replay [workload] trace's arrival times
ARRIVALS = ("poisson", "bursty", "constant")
SEARCHES = ("auto", "seeded", "fast", "linear")  # auto: seeded where a prediction exists (core/search_seeded.py)
PROTOCOLS = ("continuous",)  # how a step is measured (docs/PROTOCOL.md)
# Retired protocols: refused for a new run (kvtui.io.scenario.checks), still read in old snapshots.
RETIRED_PROTOCOLS = {"classic": "issue 46"}
CONFIRM_WHEN = ("always", "doubt")  # which knee steps the confirmation repeats (kvtui.core.settled)
QUALITY_TASKS = ("passkey", "quotation", "agreement", "needles")  # kvtui.quality.tasks builds them
SLO_METRICS = ("ttft", "tpot", "itl", "e2e")
SLO_PCTS = ("p50", "p90", "p95", "p99")
SLO_KEY = re.compile(r"^(ttft|tpot|itl|e2e)_(p50|p90|p95|p99)_ms$")
# Every SLO latency key a user may write, for "did you mean" suggestions.
SLO_LATENCY_KEYS = tuple(f"{m}_{p}_ms" for m in SLO_METRICS for p in SLO_PCTS)

# The sane range of every numeric field: (low, high, low excluded). Beyond it a value is a
# typo or an attack, never a setting: `ramp.burst_size = -5` spun a worker at 100 % CPU,
# `server.time_scale = 1e300` made a step that never ends, `tensor_parallel_size = 1e9` a
# MemoryError in the telemetry thread. The loader refuses anything outside (exit 2, FILE:LINE:
# field), before any server starts. Bounds are generous: ten times anything real.
DAY_S = 86_400.0
MAX_TOKENS = 10_000_000  # context lengths and token counts (the largest models: 1-10 M)
RANGES: dict[tuple[str, str], tuple[float, float, bool]] = {
    ("", "seed"): (0, 2**63 - 1, False),
    ("server", "max_model_len"): (16, MAX_TOKENS, False),
    ("server", "gpu_memory_utilization"): (0, 1, True),
    ("server", "kv_cache_memory_bytes"): (0, 2**50, False),  # 1 PiB
    ("server", "max_num_seqs"): (0, 1_000_000, False),
    ("server", "max_num_batched_tokens"): (0, 100 * MAX_TOKENS, False),
    ("server", "tensor_parallel_size"): (1, 512, False),
    ("server", "data_parallel_size"): (1, 512, False),
    ("server", "replicas"): (1, 64, False),
    ("server", "port"): (0, 65535, False),
    ("server", "devices"): (1, 4096, False),
    ("server", "startup_timeout_s"): (0, 7 * DAY_S, True),
    ("server", "stop_timeout_s"): (0, 3600, False),
    ("server", "time_scale"): (0, 1000, False),  # 0: auto; ×1000 slow motion turns a 20 s window into 6 h
    ("workload", "shared_prefix"): (0, 1, False),
    ("workload", "temperature"): (0, 100, False),
    ("workload", "turns"): (1, 1000, False),
    ("workload", "jitter"): (0, 1, False),
    ("workload", "seed"): (0, 2**63 - 1, False),
    ("workload", "trace_start_s"): (0, 3650 * DAY_S, False),
    ("workload", "trace_end_s"): (0, 3650 * DAY_S, False),
    ("workload", "trace_skip_rows"): (0, 10**12, False),
    ("workload", "trace_rows"): (0, 10**12, False),
    ("ramp", "start"): (0, 1_000_000, True),
    ("ramp", "max"): (0, 1_000_000, True),
    ("ramp", "burst_size"): (1, 100_000, False),
    ("ramp", "warmup_s"): (0, DAY_S, False),
    ("ramp", "window_s"): (0, DAY_S, False),
    # A step holds its window's records in memory (live or modelled): a count window of 1e8 requests
    # was in range, ~100 GB. As many as a modelled step may simulate (kvtui.simulator.engine.budget).
    ("ramp", "window_requests"): (0, 500_000, False),
    ("ramp", "min_samples"): (1, 100_000_000, False),
    ("ramp", "resolution"): (0, 1_000_000, False),
    ("ramp", "confidence"): (0.5, 1, False),  # and < 1: io/scenario/checks.py (a test at confidence 1 never decides)
    ("ramp", "request_timeout_s"): (0, DAY_S, True),  # 0 failed every request without saying why
    ("ramp", "drain_timeout_s"): (0, DAY_S, False),
    ("ramp", "max_error_burst"): (1, 100_000_000, False),
    ("ramp", "processes"): (1, 256, False),
    ("ramp", "max_processes"): (0, 256, False),
    ("slo", "latency"): (0, 1e9, True),  # ms: eleven days
    ("slo", "max_error_rate"): (0, 1, False),
    ("slo", "min_goodput"): (0, 1, False),
    ("slo", "max_preemptions_per_request"): (0, 1_000_000, False),
    ("cost", "gpu_hourly_usd"): (0, 1_000_000, False),
    ("cost", "gpus"): (0, 100_000, False),
    # [quality]: the loader's _check_quality holds the same bounds, with its own messages.
    ("quality", "prompts"): (0, 10_000, False),
    ("quality", "prompt_tokens"): (1, MAX_TOKENS, False),
    ("quality", "max_tokens"): (1, 100_000, False),
    ("quality", "items"): (0, 10_000, False),
    ("quality", "max_context"): (0, MAX_TOKENS, False),
    ("quality", "tolerance_pt"): (0, 100, False),
    ("quality", "concurrency"): (1, 256, False),
    ("quality", "suite_limit"): (0, 1_000_000, False),
    ("quality", "suite_fewshot"): (-1, 100, False),
    ("length", "value"): (0, MAX_TOKENS, False),  # every prompt_tokens / output_tokens key
    ("length", "min"): (0, MAX_TOKENS, False),
    ("length", "max"): (0, MAX_TOKENS, False),
    ("length", "mean"): (0, MAX_TOKENS, False),
    ("length", "std"): (0, MAX_TOKENS, False),
}


# Environment variables that make the server's interpreter or dynamic loader run code from
# somewhere else (PYTHONPATH=…/evil ran that folder's sitecustomize.py in the server). A
# scenario is shared data: it may set these only when the user says so (`--allow-env`).
HIJACK_ENV = frozenset({
    "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONINSPECT", "PYTHONEXECUTABLE",
    "PYTHONBREAKPOINT", "PYTHONWARNINGS", "PYTHONPLATLIBDIR", "PYTHONSAFEPATH", "PYTHONNOUSERSITE",
    "PYTHONPYCACHEPREFIX", "PYTHONDEVMODE", "PYTHONMALLOC", "PYTHONCASEOK",
    "PATH", "BASH_ENV", "ENV", "PERL5OPT", "PERL5LIB", "NODE_OPTIONS", "RUBYOPT",
    "GCONV_PATH", "HOSTALIASES", "MALLOC_CONF", "OPENSSL_CONF", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "VLLM_PLUGINS",
})
HIJACK_PREFIXES = ("LD_", "DYLD_")


# A rule that cannot miss a new variable of the kinds that load code: CUDA_INJECTION64_PATH
# (libcuda loads it), NCCL_NET_PLUGIN / NCCL_TUNER_PLUGIN (NCCL dlopens them), LD_* and GLIBC_*
# (the dynamic loader), PYTHON* and TORCH* (the interpreter, torch's extensions and compilers):
# any name of those families, or naming a path, a library, a plugin, a preload, a module, a
# hook, a directory, a file or a config needs --allow-env. Knobs that only tune (VLLM_USE_…,
# NCCL_NVLS_ENABLE, OMP_NUM_THREADS) pass.
HIJACK_FAMILIES = ("LD_", "DYLD_", "GLIBC_", "MALLOC_", "PYTHON", "PYTORCH_", "TORCH", "TRITON_", "CUDA_INJECTION",
                   "PERL", "RUBY", "NODE_", "BASH_", "GCONV", "JAVA_TOOL", "JDK_JAVA", "OPENSSL_", "SSL_")
HIJACK_WORDS = ("PATH", "PLUGIN", "PRELOAD", "LIBRARY", "LIB", "INJECT", "MODULE", "EXTENSION", "HOOK",
                "_DIR", "_HOME", "_ROOT", "_FILE", "_CONF", "_CONFIG", "SCRIPT", "_CMD", "COMMAND", "_EXEC",
                "STARTUP", "CALLBACK", "BUNDLE", "_SO")
# Whole words of a name (split at "_") that name a program to run or what builds one: a compiler
# and its flags (Triton and torch's inductor build C at run time with $CC / $CXX, nvcc reads
# NVCC_PREPEND_FLAGS / NVCC_CCBIN: CC=/tmp/x runs /tmp/x), a helper a library execs (GIT_ASKPASS,
# EDITOR), the user's HOME (Python's user site-packages and their .pth files live under it) and
# caches of compiled code (torch.compile's and Hugging Face's hold code that is loaded again),
# and switches that let code in (VLLM_ALLOW_INSECURE_SERIALIZATION, VLLM_SERVER_DEV_MODE).
HIJACK_TOKENS = frozenset({"CC", "CXX", "CPP", "LD", "AS", "AR", "NVCC", "CCBIN", "HOSTCXX", "CUDAHOSTCXX", "FLAGS",
                           "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "NVCCFLAGS", "COMPILER", "LINKER", "ASKPASS",
                           "EDITOR", "VISUAL", "PAGER", "BROWSER", "SHELL", "EXE", "EXECUTABLE", "BIN", "BINARY",
                           "PROGRAM", "OPTIONS", "OPTS", "HOME", "RC", "PROFILE", "CACHE",
                           # a switch that lets code in: insecure (pickle) serialization, remote code,
                           # eval of generated code, development endpoints that call into the workers
                           "INSECURE", "UNSAFE", "TRUST", "CODE", "EVAL", "DEV"})
# Whole words that say where a server listens or is reached: the loopback rule (server.host)
# holds for every route, so these need the user's word too.
LISTEN_TOKENS = frozenset({"HOST", "IP", "ADDR", "ADDRESS", "PORT", "IFNAME", "IFACE", "INTERFACE"})
SAFE_EXACT = frozenset({"PYTORCH_CUDA_ALLOC_CONF", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE",
                        "PYTHONFAULTHANDLER", "PYTHONIOENCODING", "PYTHONUTF8", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                        "VLLM_MM_INPUT_CACHE_GIB", "VLLM_DISABLE_COMPILE_CACHE"})


def _tokens(name: str) -> set[str]:
    return {t for t in name.upper().split("_") if t}


def hijacks(name: str) -> bool:
    """Does this env variable let a value run code in the server (interpreter, loader, libcuda,
    NCCL, torch, search paths, compilers, helpers, caches of compiled code)? A family, word and
    whole-word rule, not only a list: a new variable of those kinds is caught without being
    named here."""
    if name in SAFE_EXACT:
        return False
    up = name.upper()
    return (name in HIJACK_ENV or up.startswith(HIJACK_PREFIXES) or up.startswith(HIJACK_FAMILIES)
            or any(w in up for w in HIJACK_WORDS) or bool(_tokens(name) & HIJACK_TOKENS))


def listens(name: str) -> bool:
    """Does this env variable say where the server (or its workers) listens or is reached
    (VLLM_HOST_IP, MASTER_ADDR, VLLM_PORT, NCCL_SOCKET_IFNAME)?"""
    return name not in SAFE_EXACT and bool(_tokens(name) & LISTEN_TOKENS)


def out_of_range(key: tuple[str, str], value: float) -> str | None:
    """Why `value` is outside the field's sane range, or None."""
    lo, hi, strict = RANGES[key]
    if (value <= lo if strict else value < lo) or value > hi:
        return f"must be {'>' if strict else '≥'} {lo:g} and ≤ {hi:g}, got {value:g}"
    return None


@dataclass
class Length:
    """A token-length distribution; `sample` lives in kvtui.runtime.load.workload."""

    dist: str = "fixed"
    value: int = 0  # fixed
    min: int = 1
    max: int = 0  # 0 = no cap beyond max_model_len
    mean: float = 0.0
    std: float = 0.0

    @property
    def upper(self) -> int:
        """Largest length this distribution can produce (for the ISL+OSL check)."""
        if self.dist == "fixed":
            return self.value
        if self.max:
            return self.max
        if self.dist == "uniform":
            return self.max
        # Unbounded tails are clipped at mean + 4 std by the sampler.
        return int(self.mean + 4 * self.std) + 1

    def describe(self) -> str:
        if self.dist == "fixed":
            return str(self.value)
        if self.dist == "uniform":
            return f"uniform {self.min}-{self.max}"
        if self.dist == "trace":
            return f"trace (mean {self.mean:,.0f}, max {self.max:,})"
        cap = f" [{self.min}, {self.max}]" if self.max else ""
        return f"{self.dist} {self.mean:g}±{self.std:g}{cap}"


@dataclass
class Server:
    engine: str = "sim"
    model: str = "llama-3.1-8b"
    served_model_name: str = ""
    max_model_len: int = 8192
    gpu_memory_utilization: float = 0.9
    kv_cache_memory_bytes: int = 0
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0
    tensor_parallel_size: int = 1
    # vllm: --data-parallel-size, engines behind one endpoint (TP x DP GPUs); vLLM labels their
    # metrics by engine, so the per-replica view shows each rank.
    data_parallel_size: int = 1
    # sim/vllm: servers kvtui launches per mode (each its own port and per-run key) and spreads
    # requests over; on one GPU give each its share (gpu_memory_utilization 0.45 for two).
    replicas: int = 1
    routing: str = "least_inflight"  # or "round_robin": which replica gets the next request
    load_format: str = ""
    enable_prefix_caching: bool | None = None
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    secret_env: list[str] = field(default_factory=list)
    startup_timeout_s: float = 900.0
    stop_timeout_s: float = 30.0
    # external engine
    url: str = ""
    metrics_url: str = ""
    # Several replicas: their base URLs (kvtui spreads requests over them), or with `url` (a
    # gateway, llm-d, KServe, a vLLM data-parallel head) only the /metrics URLs of what is behind it.
    replica_urls: list[str] = field(default_factory=list)
    metrics_urls: list[str] = field(default_factory=list)  # per replica; default <replica>/metrics
    api_key: str = ""
    # Modes in parallel, one per free device (kvtui run --parallel); devices: the sim engine's
    # simulated GPUs (a real engine's are NVML's free ones)
    parallel: bool = False
    devices: int = 1
    # kvtui run --cluster (docs/CLUSTER.md): the Ray accelerator type every lane asks for ("H100",
    # "H200", "L40S": Ray's accelerator_type:X resource), and the vLLM version every node must have
    # ("0.26" any 0.26.x; empty: the nodes must agree)
    accelerator_type: str = ""
    vllm_version: str = ""
    # sim engine
    gpu: str = "H200"
    time_scale: float = 0.0  # 0 = choose: real time when the box keeps up, else slow motion


@dataclass
class Mode:
    name: str
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    quantization: str = ""
    model: str = ""  # per-mode model override (e.g. an AWQ checkpoint)
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def weights(self) -> str:
        """The weight format the simulator and estimator reason about."""
        q = (self.quantization or "").lower()
        if q.startswith("awq") or q.startswith("gptq"):
            return "int4"
        if q in ("fp8", "modelopt", "fbgemm_fp8", "ptpc_fp8"):
            return "fp8"
        if q in ("int8", "w8a8", "bitblas", "experts_int8"):
            return "int8"
        return "bf16" if self.dtype in ("auto", "bfloat16", "bf16") else self.dtype

    @property
    def kv_bytes(self) -> int:
        return 1 if self.kv_cache_dtype.startswith("fp8") else 2


@dataclass
class Workload:
    api: str = "completions"
    prompt_tokens: Length = field(default_factory=lambda: Length(value=1024))
    output_tokens: Length = field(default_factory=lambda: Length(value=128))
    dataset: str = ""
    ignore_eos: bool = True
    shared_prefix: float = 0.0  # share of each prompt that is common to all requests
    temperature: float = 0.0
    turns: int = 1  # multi-turn: each turn re-sends the history
    jitter: float = 0.1  # ± share applied to fixed lengths so prefills do not march in lock-step
    seed: int = 0
    # A production trace (kvtui.io.scenario.trace, docs/TRACES.md): request k takes row k's (input, output)
    # pair jointly, and its prefix blocks (Mooncake hash_ids, a session id); prompt_tokens and
    # output_tokens are then not used. Azure, BurstGPT and Mooncake are recognised by their columns;
    # your own CSV or JSON lines by `trace_columns` {time, input, output, session, time_unit = "s"|"ms"|"us"}.
    trace: str = ""
    trace_format: str = "auto"  # or azure, burstgpt, mooncake, csv, jsonl
    trace_columns: dict[str, str] = field(default_factory=dict)
    trace_start_s: float = 0.0  # a time window, seconds from the file's first row (end 0: to the end)
    trace_end_s: float = 0.0
    trace_skip_rows: int = 0  # a row range: skip the first N data rows, then take trace_rows (0: all)
    trace_rows: int = 0


@dataclass
class Ramp:
    load: str = "concurrency"  # or "rate" (open loop, req/s), "trace" (open loop, × the trace's own times)
    start: float = 1
    max: float = 256
    step: str = "double"  # "double", "xN" (geometric), "+N" (linear), or "a,b,c" (explicit list)
    search: str = "auto"
    arrival: str = "poisson"  # open loop only
    burst_size: int = 8
    warmup_s: float = 2.0
    window_s: float = 20.0
    window_requests: int = 0  # > 0: the window ends after this many requests started
    min_samples: int = 20
    confirm: bool = True
    # "always": the confirmation repeats the last pass and the first fail (the careful method);
    # "doubt": only a verdict that neither the sequential test nor the KV cache's arithmetic settled
    # (kvtui.core.settled; each step records `settled`).
    confirm_when: str = "always"
    resolution: float = 0.0  # search stops when fail - pass <= resolution (0: 1 request or ~5 %)
    request_timeout_s: float = 600.0
    drain_timeout_s: float = 120.0
    max_error_burst: int = 20  # stop a step early after this many consecutive errors
    processes: int = 1  # load-generator processes (with autoscale: the first step's)
    # Add worker processes when one nears its capacity (kvtui.runtime.load.autoscale), up to max_processes
    # (0: the cores this process may use).
    autoscale: bool = True
    max_processes: int = 0
    # How a step is measured (docs/PROTOCOL.md): "continuous" (the default) keeps the load between
    # steps, starts requests at the steady state's rate, takes the figures from the window itself
    # where the SLO allows and stops a step once its verdict is beyond doubt. The only value: "classic"
    # (drain, ramp from zero, hold until the window's requests finish; its ramp's cohort read TPOT p95
    # ~7 % and TTFT p95 ~2x above the steady state, bench/results/protocol_bias.md) was retired
    # (issue 46); old snapshots measured with it still replay, export, diff and re-evaluate.
    protocol: str = "continuous"
    # Continuous protocol, an SLO on TPOT or E2E: those figures count the window requests sent by one
    # request's duration before the window's end, each whole, and the step holds its load only until
    # they have finished (kvtui.core.births). false: every window request, the whole tail.
    births: bool = True
    # The sequential test's confidence that an early verdict is right (per step, all looks together).
    confidence: float = 0.95


@dataclass
class Slo:
    latency: dict[str, float] = field(default_factory=lambda: {"ttft_p95_ms": 2000.0, "tpot_p95_ms": 50.0})
    max_error_rate: float = 0.01
    min_goodput: float = 0.0  # share of requests meeting every per-request target
    # Preemptions in the window per counted request (vLLM's own counter), None: not a target.
    # 0 asks for the knee without preemption: past the KV wall vLLM recomputes preempted
    # prefills, and a load can meet the latency targets while delivering fewer tokens (H200,
    # docs/results/h200-kvb.json: fp8 KV 148 concurrent with 52 preemptions, 2,759 tok/s; 132
    # without, 4,144).
    max_preemptions_per_request: float | None = None

    def targets(self) -> list[tuple[str, str, float]]:
        """(metric, percentile, limit_ms) triples."""
        out = []
        for key, limit in self.latency.items():
            m = SLO_KEY.match(key)
            assert m, key
            out.append((m.group(1), m.group(2), float(limit)))
        return out

    def describe(self) -> str:
        parts = [f"{m.upper()} {p} ≤ {v:g} ms" for m, p, v in self.targets()]
        parts.append(f"errors ≤ {self.max_error_rate:.0%}")
        if self.min_goodput:
            parts.append(f"goodput ≥ {self.min_goodput:.0%}")
        if self.max_preemptions_per_request is not None:
            parts.append(f"preemptions ≤ {self.max_preemptions_per_request:g}/request")
        return ", ".join(parts)


@dataclass
class Cost:
    gpu_hourly_usd: float = 3.5
    gpus: int = 0  # 0: the server's tensor_parallel_size
    count_failed: bool = True  # failed requests' time still costs money


@dataclass
class Quality:
    """Optional per-mode check against the baseline on fixed prompts at temperature 0."""

    enabled: bool = False
    # The smoke test (kvtui.explore.quality): repeated-phrase prompts, outputs against the baseline's.
    prompts: int = 8
    prompt_tokens: int = 128
    max_tokens: int = 32
    logprobs: bool = True
    # The suite (kvtui.quality): tasks with ground truth, generated from the scenario's seed.
    tasks: list[str] = field(default_factory=lambda: ["passkey", "quotation", "agreement"])
    items: int = 24  # per task
    lengths: list[int] = field(default_factory=list)  # passkey lengths in tokens ([]: ¼, ½ and all of max_context)
    max_context: int = 0  # largest context to test (0: server.max_model_len)
    task_files: list[str] = field(default_factory=list)  # the user's own JSONL tasks
    tolerance_pt: float = 2.0  # an accuracy drop up to this many points is tolerated (if beyond noise)
    concurrency: int = 4  # quality requests in flight (none of them counts in a step)
    # Standard suites through lm-evaluation-harness (kvtui.quality.harness; pip install 'kvtui[eval]').
    suites: list[str] = field(default_factory=list)  # harness task names (gsm8k, kvtui_arith, …)
    suite_paths: list[str] = field(default_factory=list)  # folders of task YAML (relative to the scenario)
    suite_limit: int = 0  # items a suite (the harness's first N; 0: all)
    suite_fewshot: int = -1  # few-shot examples (-1: the task's own)
    suite_api: str = "chat"  # chat: local-chat-completions; completions: local-completions (log-likelihood tasks)
    # Quality at the operating point: the same items again while the knee's load runs.
    at_knee: bool = False


@dataclass
class Scenario:
    name: str = "scenario"
    description: str = ""
    seed: int = 0
    server: Server = field(default_factory=Server)
    modes: list[Mode] = field(default_factory=lambda: [Mode(name="baseline")])
    workload: Workload = field(default_factory=Workload)
    ramp: Ramp = field(default_factory=Ramp)
    slo: Slo = field(default_factory=Slo)
    cost: Cost = field(default_factory=Cost)
    quality: Quality = field(default_factory=Quality)
    source: str = ""  # the file it came from
    warnings: list[str] = field(default_factory=list)

    def mode(self, name: str) -> Mode:
        for m in self.modes:
            if m.name == name:
                return m
        raise KeyError(name)

    def to_dict(self, redact: bool = True) -> dict[str, Any]:
        """The scenario as run, secrets removed (for snapshots and exports)."""
        d = asdict(self)
        if redact:
            from kvtui.secrets import redact_scenario

            d = redact_scenario(d)
        return d
