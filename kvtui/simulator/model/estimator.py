"""The memory formula behind the whole product: how many KV tokens a GPU holds, per mode.

vLLM (0.26, V1 engine) sizes its KV cache at startup as

    KV cache = GPU total × gpu_memory_utilization − weights − activation peak − non-torch memory

(`--kv-cache-memory-bytes` replaces the whole right-hand side), then cuts it into blocks of
`block_size` tokens: num_gpu_blocks = KV cache // (block_size × KV bytes per token), and
prints "Maximum concurrency for max_model_len tokens per request" = KV tokens / max_model_len.
CUDA graphs are captured *after* that (0.26 does not subtract them: they come on top of the
budget, as its own log line says), and the CUDA context is outside torch's view. Both show up
in NVML's used memory.

`estimate_memory()` returns every term as a `MemoryEstimate`; `.table()` prints it.
The engine defaults vLLM picks (block size, max_num_seqs, max_num_batched_tokens, prefix
caching) live here, in one place: `resolve_settings()`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from kvtui.simulator.model.catalog import GIB, GpuSpec, ModelSpec
from kvtui.simulator.model.roofline import Calibration, as_calibration, weight_bytes

# --- vLLM's defaults (V1 engine, OpenAI server), in one place ---------------------------------
BLOCK_SIZE = 16
DEFAULT_UTILIZATION = 0.9  # 0.26; 0.32+ defaults to 0.92
# vLLM ≥ 0.10 picks larger defaults on big-memory GPUs (≥ 70 GiB, not A100): H100/H200/B200.
BIG_GPU_MAX_NUM_SEQS = 1024
BIG_GPU_MAX_BATCHED_TOKENS = 8192
SMALL_GPU_MAX_NUM_SEQS = 256
SMALL_GPU_MAX_BATCHED_TOKENS = 2048
PREFIX_CACHING_DEFAULT = True


def vllm_defaults(gpu: GpuSpec) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) vLLM would choose on this GPU."""
    if gpu.usable_gib >= 70 and "a100" not in gpu.name.lower():
        return BIG_GPU_MAX_NUM_SEQS, BIG_GPU_MAX_BATCHED_TOKENS
    return SMALL_GPU_MAX_NUM_SEQS, SMALL_GPU_MAX_BATCHED_TOKENS


@dataclass
class EngineSettings:
    """The effective engine settings (what vLLM would report after applying its defaults)."""

    max_model_len: int
    gpu_memory_utilization: float = DEFAULT_UTILIZATION
    kv_cache_memory_bytes: int = 0
    max_num_seqs: int = BIG_GPU_MAX_NUM_SEQS
    max_num_batched_tokens: int = BIG_GPU_MAX_BATCHED_TOKENS
    prefix_caching: bool = PREFIX_CACHING_DEFAULT
    block_size: int = BLOCK_SIZE
    tp: int = 1


def resolve_settings(model: ModelSpec, gpu: GpuSpec, server: Any = None, **over: Any) -> EngineSettings:
    """Settings from a `kvtui.io.scenario.schema.Server` (or None) plus keyword overrides; 0/None = vLLM's default."""

    def pick(name: str, default: Any) -> Any:
        v = over.get(name)
        if v is None and server is not None:
            v = getattr(server, name, None)
        return default if v in (None, 0, 0.0) else v

    seqs, batched = vllm_defaults(gpu)
    mml = int(pick("max_model_len", model.max_position or 8192))
    pc = over.get("prefix_caching")
    if pc is None and server is not None:
        pc = getattr(server, "enable_prefix_caching", None)
    tp = int(pick("tensor_parallel_size", 1)) if "tp" not in over else int(over["tp"] or 1)
    return EngineSettings(
        max_model_len=mml,
        gpu_memory_utilization=float(pick("gpu_memory_utilization", DEFAULT_UTILIZATION)),
        kv_cache_memory_bytes=int(pick("kv_cache_memory_bytes", 0)),
        max_num_seqs=int(pick("max_num_seqs", seqs)),
        max_num_batched_tokens=int(pick("max_num_batched_tokens", batched)),
        prefix_caching=PREFIX_CACHING_DEFAULT if pc is None else bool(pc),
        block_size=int(over.get("block_size") or BLOCK_SIZE),
        tp=max(1, tp),
    )


# --- the estimate ----------------------------------------------------------------------------
def activation_peak_bytes(model: ModelSpec, weights: str, s: EngineSettings, cal: Calibration) -> float:
    """vLLM's profiled peak activation: one forward of max_num_batched_tokens, one sampler pass
    over max_num_seqs rows of fp32 logits; quantized weights add a quantized copy of the input.
    The formula's shape is ours; one scale is fitted (only one figure per format measured)."""
    t = s.max_num_batched_tokens
    if model.is_moe:
        ffn = max(model.intermediate if model.dense_layers else 0,
                  model.experts_per_tok * model.moe_intermediate + model.shared_intermediate)
    else:
        ffn = model.intermediate
    forward = t * (4 * model.hidden + 2 * ffn / s.tp) * model.dtype_bytes
    sampler = min(s.max_num_seqs, t) * model.vocab * 4
    extra = t * model.hidden * 1.0 if weights in ("fp8", "int8") else 0.0
    return cal.activation_scale * (forward + sampler) + extra


@dataclass
class MemoryEstimate:
    model: str
    params_b: float
    active_params_b: float
    gpu: str
    gpu_measured: bool
    weights: str
    kv_cache_dtype: str
    tp: int
    settings: EngineSettings
    gpu_total_gib: float
    budget_gib: float  # total × utilization (or the explicit KV bytes' equivalent)
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    cuda_graphs_in_budget: bool
    kv_cache_gib: float
    kv_bytes_per_token: int
    block_bytes: int
    num_gpu_blocks: int
    kv_tokens: int
    max_concurrency_reported: float  # kv_tokens / max_model_len, as vLLM prints it
    request_tokens: int | None  # prompt + output (or --context) the concurrency below assumes
    blocks_per_request: int | None
    kv_bound_concurrency: int | None  # requests of that length whose KV fits at once
    admitted_concurrency: int | None  # the same, capped by max_num_seqs
    kv_formula: str
    nvml_overhead_gib: float
    used_gib: float  # what NVML would show once the server is ready
    fits: bool
    problem: str | None = None
    calibration: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["terms"] = [{"term": a, "gib": b, "note": c} for a, b, c in self.terms()]
        return d

    def terms(self) -> list[tuple[str, float | None, str]]:
        s = self.settings
        rows: list[tuple[str, float | None, str]] = []
        if s.kv_cache_memory_bytes:
            rows.append(("KV cache (--kv-cache-memory-bytes)", self.kv_cache_gib,
                         "set explicitly: the budget below is not used"))
        else:
            rows.append(("GPU memory (CUDA total)", self.gpu_total_gib,
                         f"{self.gpu}" + ("" if self.gpu_measured else ", approx")))
            rows.append((f"x gpu_memory_utilization {s.gpu_memory_utilization:g}", self.budget_gib, "vLLM's budget"))
            rows.append((f"- weights ({self.weights}, {self.params_b:.2f} B params)", self.weights_gib,
                         f"all experts resident; {self.active_params_b:.2f} B active per token"
                         if self.active_params_b < self.params_b * 0.95
                         else "embedding and lm_head stay bf16" if self.weights != "bf16" else ""))
            rows.append(("- activation peak", self.activation_gib,
                         f"profile: {s.max_num_batched_tokens} tokens, {s.max_num_seqs} seqs"))
            rows.append(("- non-torch memory", self.non_torch_gib, "CUDA/NCCL workspaces"))
            if self.cuda_graphs_in_budget:
                rows.append(("- CUDA graphs", self.cuda_graph_gib, ""))
            rows.append(("= KV cache", self.kv_cache_gib, ""))
        return rows

    def table(self) -> str:
        s = self.settings
        w = 44
        lines = [
            f"kvtui estimate: {self.model} on {self.gpu}"
            + (f" x{self.tp} (tensor parallel, per GPU)" if self.tp > 1 else "")
            + f", weights {self.weights}, KV {self.kv_cache_dtype}",
            "",
        ]
        for label, val, note in self.terms():
            v = f"{val:9.2f} GiB" if val is not None else " " * 13
            if label == "= KV cache" and val is not None and val < 0:
                # No memory is left for it: say how much is missing, not a negative cache.
                v, note = f"{'none':>9}    ", f"short by {-val:.2f} GiB"
            lines.append(f"  {label:<{w}}{v}   {note}".rstrip())
        lines.append("")
        lines.append(f"  {'KV bytes per token':<{w}}{self.kv_bytes_per_token:>9,} B     {self.kv_formula}")
        lines.append(f"  {'block (' + str(s.block_size) + ' tokens)':<{w}}{self.block_bytes:>9,} B")
        lines.append(f"  {'= GPU KV blocks':<{w}}{self.num_gpu_blocks:>9,}")
        lines.append(f"  {'= KV tokens':<{w}}{self.kv_tokens:>9,}")
        lines.append(f"  {'max concurrency @ max_model_len ' + str(s.max_model_len):<{w}}"
                     f"{self.max_concurrency_reported:>9.2f}x    as vLLM prints it")
        if self.request_tokens:
            lines.append(f"  {'KV-bound concurrency @ ' + str(self.request_tokens) + ' tokens/request':<{w}}"
                         f"{self.kv_bound_concurrency:>9,}     "
                         f"{self.blocks_per_request} blocks each")
            lines.append(f"  {'admitted (capped by max_num_seqs ' + str(s.max_num_seqs) + ')':<{w}}"
                         f"{self.admitted_concurrency:>9,}")
        lines.append("")
        outside = "outside vLLM's budget" if not self.cuda_graphs_in_budget else "included above"
        lines.append(f"  {'CUDA graphs':<{w}}{self.cuda_graph_gib:9.2f} GiB   "
                     f"captured after sizing the KV cache ({outside})")
        lines.append(f"  {'CUDA context + allocator slack':<{w}}{self.nvml_overhead_gib:9.2f} GiB   "
                     "outside torch's view")
        lines.append(f"  {'= GPU memory used when ready (NVML)':<{w}}{self.used_gib:9.2f} GiB")
        lines.append("")
        lines.append(f"  settings: max_model_len {s.max_model_len}, max_num_seqs {s.max_num_seqs}, "
                     f"max_num_batched_tokens {s.max_num_batched_tokens}, block {s.block_size}, "
                     f"prefix caching {'on' if s.prefix_caching else 'off'}")
        lines.append(f"  calibration: {self.calibration}")
        for n in self.notes:
            lines.append(f"  note: {n}")
        if self.problem:
            lines.append(f"  DOES NOT FIT: {self.problem}")
        return "\n".join(lines)


def estimate_memory(
    model: ModelSpec,
    gpu: GpuSpec,
    weights: str = "bf16",
    kv_cache_dtype: str = "auto",
    settings: EngineSettings | None = None,
    calibration: Calibration | str | None = None,
    prompt_tokens: int | None = None,
    output_tokens: int | None = None,
    context_tokens: int | None = None,
) -> MemoryEstimate:
    cal = as_calibration(calibration)
    s = settings or resolve_settings(model, gpu)
    if weights not in ("bf16", "fp8", "int8", "int4"):
        raise ValueError(f"weights must be bf16, fp8, int8 or int4, not {weights!r}")
    kv_b = 1 if str(kv_cache_dtype).startswith("fp8") else 2
    kv_name = "fp8" if kv_b == 1 else "auto"
    tp = s.tp
    c = model.counts()
    total = gpu.usable_gib
    budget = total * s.gpu_memory_utilization
    w = weight_bytes(model, weights, tp) / GIB + cal.weights_extra_gib
    act = activation_peak_bytes(model, weights, s, cal) / GIB
    nt = cal.non_torch_gib
    graphs = cal.graph_gib_per_layer(weights) * model.layers
    notes: list[str] = []
    if s.kv_cache_memory_bytes:
        kv_gib = s.kv_cache_memory_bytes / GIB
    else:
        kv_gib = budget - w - act - nt - (graphs if cal.cuda_graphs_in_budget else 0.0)
    bpt = model.kv_bytes_per_token(kv_b, tp)
    block_bytes = bpt * s.block_size
    blocks = max(0, int(kv_gib * GIB // block_bytes)) if kv_gib > 0 else 0
    kv_tokens = blocks * s.block_size
    req = None
    if context_tokens:
        req = int(context_tokens)
    elif prompt_tokens or output_tokens:
        req = int(prompt_tokens or 0) + int(output_tokens or 0)
    bpr = kv_bound = admitted = None
    if req:
        bpr = math.ceil(req / s.block_size)
        kv_bound = blocks // bpr if bpr else 0
        admitted = min(kv_bound, s.max_num_seqs)
    problem = None
    if kv_gib <= 0:
        problem = (f"No available memory for the cache blocks: weights {w:.2f} + activations {act:.2f} + "
                   f"non-torch {nt:.2f} GiB exceed the budget {budget:.2f} GiB "
                   "(try a smaller model, quantized weights, or a higher utilization)")
    elif kv_tokens < s.max_model_len:
        need = s.max_model_len * bpt / GIB
        problem = (f"To serve at least one request with the model's max seq len ({s.max_model_len}), "
                   f"{need:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
                   f"({kv_gib:.2f} GiB); lower --max-model-len")
    if model.is_mla:
        notes.append("MLA: the cache holds the compressed latent "
                     f"({model.kv_lora_rank}+{model.qk_rope_dim} per layer), not per-head K/V")
    if not gpu.measured:
        notes.append(f"{gpu.name}: datasheet figures; only the H200 is calibrated against real vLLM measurements")
    if weights == "int4":
        notes.append(f"int4: AWQ/GPTQ weights (group {model.quant_group_size}) plus fp16 scales; "
                     "needs an AWQ/GPTQ checkpoint")
    if weights == "fp8" and not gpu.has_fp8:
        notes.append(f"{gpu.name} has no FP8 tensor cores: vLLM runs FP8 weights weight-only (W8A16, FP8 Marlin): "
                     "half the weight bytes, 16-bit matmuls with a dequant")
    if kv_b == 1:
        notes.append("fp8 KV: 1 byte per element; without calibrated scales vLLM uses scale 1.0")
    if tp > 1:
        notes.append(f"tensor parallel {tp}: figures per GPU; KV heads split {model.kv_heads} -> "
                     f"{max(1, math.ceil(model.kv_heads / tp))} per GPU")
    used = w + act + nt + max(0.0, kv_gib) + graphs + cal.nvml_overhead_gib
    if model.is_mla:
        kv_formula = f"{model.layers} layers x ({model.kv_lora_rank}+{model.qk_rope_dim}) latent x {kv_b} B"
    else:
        heads = max(1, math.ceil(model.kv_heads / tp)) if tp > 1 else model.kv_heads
        kv_formula = f"{model.layers} layers x {heads} KV heads x {model.head_dim} x 2 (K,V) x {kv_b} B"
    return MemoryEstimate(
        model=model.name,
        params_b=c["total"] / 1e9,
        active_params_b=model.active_params / 1e9,
        gpu=gpu.name,
        gpu_measured=gpu.measured,
        weights=weights,
        kv_cache_dtype=kv_name,
        tp=tp,
        settings=s,
        gpu_total_gib=total,
        budget_gib=budget,
        weights_gib=w,
        activation_gib=act,
        non_torch_gib=nt,
        cuda_graph_gib=graphs,
        cuda_graphs_in_budget=cal.cuda_graphs_in_budget,
        kv_cache_gib=kv_gib,
        kv_bytes_per_token=bpt,
        block_bytes=block_bytes,
        num_gpu_blocks=blocks,
        kv_tokens=kv_tokens,
        max_concurrency_reported=kv_tokens / s.max_model_len if s.max_model_len else 0.0,
        request_tokens=req,
        blocks_per_request=bpr,
        kv_bound_concurrency=kv_bound,
        admitted_concurrency=admitted,
        kv_formula=kv_formula,
        nvml_overhead_gib=cal.nvml_overhead_gib,
        used_gib=used,
        fits=problem is None,
        problem=problem,
        calibration=cal.name + (f" ({cal.gpu}, vLLM {cal.vllm})" if cal.gpu else ""),
        notes=notes,
    )
