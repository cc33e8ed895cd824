"""Step time of one engine iteration: a roofline with fitted efficiencies, and the calibration file.

One vLLM step runs every scheduled token through the model once. Its time is modelled as

    t = max(W / (BW * e_w[fmt]),  F_lin / (peak[fmt] * e_gemm[fmt]))      linear layers
      + KV_read / (BW * e_kv[kv])                                        attention, memory side
      + F_attn / (peak_bf16 * e_attn)                                    attention, compute side
      + allreduce (tensor parallel only)
      + o_step + o_seq * seqs (+ o_mixed when the step carries prefill)   launch/sampling overhead
    t = max(t, cpu_step + cpu_seq * seqs)                                the engine's CPU floor

W = weight bytes read once per step (linear layers in the mode's format; embedding rows
are gathered, lm_head is read whole; MoE: only the experts the step's tokens touch).
F_lin = 2 * active linear params * tokens + 2 * hidden * vocab * sampled (lm_head on the
sampled positions only). KV_read = every scheduled sequence reads its context's K/V once.
F_attn = 4 * layers * heads * head_dim per (query, key) pair, causal inside the chunk.
The CPU floor: with asynchronous scheduling (vLLM 0.26's default) the engine core prepares
step k+1 (scheduling, input tensors, output processing of step k: Python work per scheduled
sequence) while the GPU runs step k, so a step takes the longer of the two. It binds only in
large decode batches (on the H200 fit: ~76 µs per sequence, i.e. from ~200 streams up).

Formats: fp8 weights halve W and, on GPUs with FP8 tensor cores, double the GEMM peak;
int8 (W8A8) likewise with the INT8 peak; int4 (AWQ/GPTQ, Marlin W4A16) quarters W (plus
group scales) and runs the math at the bf16 peak with a dequant penalty; fp8 KV halves
KV bytes. The e_* factors and overheads come from a calibration file (TOML) fitted to
real measurements by bench/fit_calibration.py.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kvtui.simulator.model.catalog import DATA, GpuSpec, ModelSpec

CALIBRATION_DIR = DATA / "calibration"
DEFAULT_CALIBRATION = CALIBRATION_DIR / "h200-vllm-0.26.0.toml"


@dataclass
class Calibration:
    """Efficiency factors and memory constants. Defaults are priors; the TOML file overrides them."""

    name: str = "uncalibrated priors"
    source: str = ""
    gpu: str = ""  # the GPU the factors were fitted on
    vllm: str = ""
    # --- memory (what vLLM's profiler sees) --------------------------------------------
    non_torch_gib: float = 0.22  # NCCL/cuBLAS workspaces etc. vLLM subtracts from the budget
    weights_extra_gib: float = 0.05  # buffers counted with "Model loading took" (rotary cache…)
    activation_scale: float = 1.0  # multiplies the activation-peak formula
    cuda_graph_gib_per_layer: dict[str, float] = field(default_factory=lambda: {"bf16": 0.0305, "fp8": 0.0281})
    cuda_graphs_in_budget: bool = False  # vLLM 0.26 captures graphs after sizing the KV cache
    nvml_overhead_gib: float = 0.8  # CUDA context + allocator slack: NVML used − the terms above
    # --- step time ---------------------------------------------------------------------
    weights_bw_eff: dict[str, float] = field(default_factory=lambda: {"bf16": 0.8, "fp8": 0.7, "int8": 0.7,
                                                                      "int4": 0.6})
    gemm_eff: dict[str, float] = field(default_factory=lambda: {"bf16": 0.7, "fp8": 0.55, "int8": 0.55, "int4": 0.5})
    kv_bw_eff: dict[str, float] = field(default_factory=lambda: {"auto": 0.8, "fp8": 0.7})
    attn_eff: float = 0.5
    step_overhead_s: float = 0.0015
    seq_overhead_s: float = 5e-6
    mixed_overhead_s: float = 0.0  # extra for steps that carry prefill (piecewise graphs)
    cpu_step_s: float = 0.0  # engine-core CPU per step, overlapped with the GPU (async scheduling)
    cpu_seq_s: float = 0.0  # engine-core CPU per scheduled sequence, overlapped with the GPU
    step_jitter: float = 0.0  # lognormal sigma of step time noise (seeded); 0 = none
    # vLLM's API server takes each request in turn (parse, tokenize, hand to the engine):
    # the offline clients (fast.py) serialise arrivals through it. The real-time server's own
    # HTTP handling is real, so it may leave this out or add it as a delay.
    frontend_s_per_request: float = 0.0
    fit: dict[str, Any] = field(default_factory=dict)  # fit summary, for provenance

    @classmethod
    def from_dict(cls, d: dict[str, Any], name: str = "") -> "Calibration":
        cal = cls()
        meta = d.get("meta", {})
        cal.name = name or meta.get("name", cal.name)
        cal.source = meta.get("source", "")
        cal.gpu = meta.get("gpu", "")
        cal.vllm = meta.get("vllm", "")
        flat: dict[str, Any] = {}
        for section in ("memory", "step"):
            flat.update(d.get(section, {}))
        known = {f.name for f in fields(cls)}
        for k, v in flat.items():
            if k in known:
                cur = getattr(cal, k)
                if isinstance(cur, dict):
                    merged = dict(cur)
                    merged.update({kk: float(vv) for kk, vv in v.items()})
                    setattr(cal, k, merged)
                elif isinstance(cur, bool):
                    setattr(cal, k, bool(v))
                else:
                    setattr(cal, k, float(v))
        cal.fit = d.get("fit", {})
        return cal

    def weights_bw(self, fmt: str) -> float:
        return self.weights_bw_eff.get(fmt, self.weights_bw_eff["bf16"])

    def gemm(self, fmt: str) -> float:
        return self.gemm_eff.get(fmt, self.gemm_eff["bf16"])

    def kv_bw(self, kv_bytes: int) -> float:
        return self.kv_bw_eff["fp8" if kv_bytes == 1 else "auto"]

    def graph_gib_per_layer(self, fmt: str) -> float:
        g = self.cuda_graph_gib_per_layer
        return g.get(fmt, g.get("fp8" if fmt != "bf16" else "bf16", 0.03))


def load_calibration(path: str | Path | None = None) -> Calibration:
    """The calibration file (default: the H200 / vLLM 0.26.0 fit); priors if it is missing."""
    p = Path(path) if path else DEFAULT_CALIBRATION
    if not p.is_file():
        if path:
            from kvtui.errors import UsageError

            raise UsageError(f"calibration file not found: {p}")
        return Calibration()
    return Calibration.from_dict(tomllib.loads(p.read_text(encoding="utf-8")), name=p.stem)


def as_calibration(cal: Calibration | str | Path | None) -> Calibration:
    if isinstance(cal, Calibration):
        return cal
    return load_calibration(cal)


# --- weight bytes ----------------------------------------------------------------------
def linear_bytes_per_param(fmt: str, model: ModelSpec) -> float:
    """Bytes one linear-layer weight takes in `fmt`, scales included."""
    if fmt == "fp8":
        return 1.0  # per-tensor (or per-channel) scales: negligible
    if fmt == "int8":
        return 1.0 + 4.0 / model.hidden  # one fp32 scale per output channel
    if fmt == "int4":
        g = model.quant_group_size or 128
        return 0.5 + 2.5 / g  # 4-bit weights + an fp16 scale and a 4-bit zero per group
    return float(model.dtype_bytes)


def weight_bytes(model: ModelSpec, fmt: str, tp: int = 1) -> float:
    """Resident weight bytes per GPU (all experts resident)."""
    c = model.counts()
    lin = c["linear"] * linear_bytes_per_param(fmt, model)
    rest = (c["embed"] + c["lm_head"] + c["router"]) * model.dtype_bytes
    norms = c["norms"] * model.dtype_bytes
    return (lin + rest) / tp + norms


# --- the step-time model -------------------------------------------------------------
# FP8 Marlin (W8A16) dequantizes each weight tile to 16 bits inside the GEMM: the math runs at
# the bf16 peak, and the dequant costs some of it where the GEMM is compute-bound (an assumption:
# no Ampere measurement here; a calibration's gemm_eff.w8a16 replaces it).
W8A16_DEQUANT = 0.9


def w8a16_gemm(cal: "Calibration") -> float:
    """The GEMM efficiency of weight-only fp8 (W8A16): never above bf16's, the dequant's cost off it,
    nor above the Marlin int4 kernels' (the same dequant-in-GEMM class)."""
    own = cal.gemm_eff.get("w8a16")
    if own:
        return own
    return min(cal.gemm("bf16") * W8A16_DEQUANT, cal.gemm("int4"))


class Roofline:
    """Precomputed constants for one (model, GPU, weights format, KV dtype, TP); `time()` is cheap."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, weights: str, kv_bytes: int, cal: Calibration, tp: int = 1):
        self.model, self.gpu, self.fmt, self.kv_bytes, self.cal, self.tp = model, gpu, weights, kv_bytes, cal, tp
        c = model.counts()
        bpp = linear_bytes_per_param(weights, model)
        # bytes read every step: non-expert linear weights + lm_head (+ touched experts)
        expert_params = c["experts"]
        self.w_static = ((c["linear"] - expert_params) * bpp + (c["lm_head"] or c["embed"]) * model.dtype_bytes) / tp
        self.expert_layer_bytes = model.expert_params() * bpp / tp if model.is_moe else 0.0
        self.moe_layers = model.moe_layers
        self.n_experts = model.num_experts
        self.top_k = model.experts_per_tok
        self.lin_flops_per_token = 2.0 * c["active_linear"] / tp
        self.lm_flops_per_sample = 2.0 * model.hidden * model.vocab / tp
        self.attn_flops_per_pair = model.attn_flops_per_pair() / tp
        self.kv_bytes_per_token = model.kv_bytes_per_token(kv_bytes, tp)
        bw = gpu.bandwidth
        # the GEMM format: fp8 without FP8 tensor cores runs W8A16 (FP8 Marlin) at the bf16 peak
        peak = gpu.peak_flops(weights if weights in ("fp8", "int8") else "bf16")
        self.inv_w = 1.0 / (bw * cal.weights_bw(weights))
        self.weight_only = weights == "fp8" and not gpu.has_fp8
        self.inv_lin = 1.0 / (peak * (w8a16_gemm(cal) if self.weight_only else cal.gemm(weights)))
        self.inv_kv = 1.0 / (bw * cal.kv_bw(kv_bytes))
        self.inv_attn = 1.0 / (gpu.bf16_tflops * 1e12 * cal.attn_eff)
        self.o_step = cal.step_overhead_s
        self.o_seq = cal.seq_overhead_s
        self.o_mixed = cal.mixed_overhead_s
        self.cpu_step = cal.cpu_step_s
        self.cpu_seq = cal.cpu_seq_s
        # tensor parallel: two all-reduces of the hidden state per layer
        if tp > 1:
            link = gpu.interconnect_gbs or 25.0
            self.ar_bytes_per_token = 2 * model.layers * model.hidden * 2 * 2 * (tp - 1) / tp
            self.inv_link = 1.0 / (link * 1e9)
            self.ar_latency = 2 * model.layers * 8e-6
        else:
            self.ar_bytes_per_token = 0.0
            self.inv_link = 0.0
            self.ar_latency = 0.0

    def weight_read_bytes(self, tokens: int) -> float:
        if not self.moe_layers or tokens <= 0:
            return self.w_static
        touched = self.n_experts * (1.0 - (1.0 - self.top_k / self.n_experts) ** tokens)
        return self.w_static + self.moe_layers * touched * self.expert_layer_bytes

    def time(self, tokens: int, seqs: int, sampled: int, ctx_read: int, pairs: float, prefill: bool) -> float:
        """Seconds for one step.

        tokens: scheduled tokens (prefill chunks + one per decoding sequence)
        seqs: scheduled sequences; sampled: sequences that sample a token this step
        ctx_read: sum over scheduled sequences of the tokens already in their KV cache
        pairs: causal (query, key) pairs the step's attention computes
        """
        if tokens <= 0:
            return 0.0
        w = self.w_static if not self.moe_layers else self.weight_read_bytes(tokens)
        t_w = w * self.inv_w
        t_c = (tokens * self.lin_flops_per_token + sampled * self.lm_flops_per_sample) * self.inv_lin
        t = t_w if t_w > t_c else t_c
        t += ctx_read * self.kv_bytes_per_token * self.inv_kv + pairs * self.attn_flops_per_pair * self.inv_attn
        t += self.o_step + self.o_seq * seqs
        if prefill:
            t += self.o_mixed
        if self.ar_bytes_per_token:
            t += tokens * self.ar_bytes_per_token * self.inv_link + self.ar_latency
        cpu = self.cpu_step + self.cpu_seq * seqs
        return t if t > cpu else cpu

    def time_limit(self, tokens: int, seqs: int, sampled: int, ctx_read: int, pairs: float,
                   prefill: bool) -> tuple[float, str]:
        """`time()` plus the name of its largest term: weights | compute | kv | attention | overhead | cpu
        (the floor)."""
        w = self.w_static if not self.moe_layers else self.weight_read_bytes(tokens)
        t_w = w * self.inv_w
        t_c = (tokens * self.lin_flops_per_token + sampled * self.lm_flops_per_sample) * self.inv_lin
        t_kv = ctx_read * self.kv_bytes_per_token * self.inv_kv
        t_a = pairs * self.attn_flops_per_pair * self.inv_attn
        t_o = self.o_step + self.o_seq * seqs + (self.o_mixed if prefill else 0.0)
        if t_w > t_c:
            t_lin, name, big = t_w, "weights", t_w
        else:
            t_lin, name, big = t_c, "compute", t_c
        if t_kv > big:
            name, big = "kv", t_kv
        if t_a > big:
            name, big = "attention", t_a
        if t_o > big:
            name = "overhead"
        t = t_lin + t_kv + t_a + t_o
        if self.ar_bytes_per_token:
            t += tokens * self.ar_bytes_per_token * self.inv_link + self.ar_latency
        cpu = self.cpu_step + self.cpu_seq * seqs
        if cpu > t:
            return cpu, "cpu"
        return t, name


__all__ = [
    "Calibration",
    "Roofline",
    "load_calibration",
    "as_calibration",
    "weight_bytes",
    "linear_bytes_per_param",
    "DEFAULT_CALIBRATION",
]
