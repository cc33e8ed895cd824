"""Model shapes (Hugging Face config.json) and GPUs (datasheet figures) for the simulator.

`load_model("llama-3.1-8b")` reads a bundled config from kvtui/data/models/; any other
argument that names a file (or a folder holding config.json) is read as a Hugging Face
config.json. `load_gpu("h200")` looks a GPU up in kvtui/data/gpus.toml by name or alias,
case-insensitively. Unknown names raise `kvtui.errors.UsageError` with the list of names.

Parameter counts are exact for the architectures covered (Llama, Qwen2, Mistral/Mixtral,
Qwen2-MoE, DeepSeek-V2/V3 with MLA); other decoder-only configs are read with the same
field names and counted as Llama-like.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvtui import DATA_DIR
from kvtui.errors import UsageError

DATA = DATA_DIR  # the package data, wherever this module sits in the tree
MODELS_DIR = DATA / "models"
GPUS_FILE = DATA / "gpus.toml"

GIB = 1024**3

@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape, and the counts the memory/step models need."""

    name: str
    source: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tie_embeddings: bool = False
    dtype_bytes: int = 2
    max_position: int = 0
    qkv_bias: bool = False
    # MoE (num_experts == 0: dense)
    num_experts: int = 0
    experts_per_tok: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0  # total width of the always-on shared expert(s)
    first_dense_layers: int = 0  # DeepSeek first_k_dense_replace
    # MLA (kv_lora_rank == 0: standard attention)
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_nope_dim: int = 0
    qk_rope_dim: int = 0
    v_head_dim: int = 0
    # a pre-quantized checkpoint (AWQ/GPTQ): its group size for the scales
    quant_method: str = ""
    quant_group_size: int = 128
    config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # --- structure -------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:  # the Hugging Face spelling
        return self.vocab

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense_layers if self.is_moe else 0

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    # --- parameter counts (whole model, TP=1) -----------------------------------------
    def attn_params_per_layer(self) -> int:
        h = self.hidden
        if self.is_mla:
            qk = self.qk_nope_dim + self.qk_rope_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * self.heads * qk
            else:
                q = h * self.heads * qk
            kv_a = h * (self.kv_lora_rank + self.qk_rope_dim) + self.kv_lora_rank
            kv_b = self.kv_lora_rank * self.heads * (self.qk_nope_dim + self.v_head_dim)
            o = self.heads * self.v_head_dim * h
            return q + kv_a + kv_b + o
        q = h * self.heads * self.head_dim
        kv = 2 * h * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * h
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        return q + kv + o + bias

    def expert_params(self) -> int:
        """One routed expert (gate, up, down)."""
        return 3 * self.hidden * self.moe_intermediate

    def counts(self) -> dict[str, int]:
        """Parameter counts by role. `linear` = what weight quantization compresses."""
        h = self.hidden
        attn = self.attn_params_per_layer() * self.layers
        dense_mlp = 3 * h * self.intermediate * self.dense_layers
        experts = self.num_experts * self.expert_params() * self.moe_layers
        shared = 3 * h * self.shared_intermediate * self.moe_layers
        router = h * self.num_experts * self.moe_layers
        norms = (2 * self.layers + 1) * h
        embed = self.vocab * h
        lm_head = 0 if self.tie_embeddings else self.vocab * h
        active_experts = self.experts_per_tok * self.expert_params() * self.moe_layers
        return {
            "embed": embed,
            "lm_head": lm_head,
            "attn": attn,
            "dense_mlp": dense_mlp,
            "experts": experts,
            "shared_experts": shared,
            "router": router,
            "norms": norms,
            "linear": attn + dense_mlp + experts + shared,
            "total": embed + lm_head + attn + dense_mlp + experts + shared + router + norms,
            # per token: the linear layers a token goes through (routed experts: top-k only)
            "active_linear": attn + dense_mlp + shared + active_experts + router,
        }

    @property
    def total_params(self) -> int:
        return self.counts()["total"]

    @property
    def active_params(self) -> int:
        c = self.counts()
        return c["active_linear"] + c["embed"] + c["lm_head"] + c["norms"]

    # --- KV cache ------------------------------------------------------------------------
    def kv_elems_per_token_per_layer(self, tp: int = 1) -> int:
        """K and V elements one token adds to one layer's cache on one GPU."""
        if self.is_mla:  # vLLM caches the compressed latent + rope key, not per-head K/V
            return self.kv_lora_rank + self.qk_rope_dim
        heads = max(1, math.ceil(self.kv_heads / tp)) if tp > 1 else self.kv_heads
        return 2 * heads * self.head_dim

    def kv_bytes_per_token(self, kv_bytes: int, tp: int = 1) -> int:
        return self.layers * self.kv_elems_per_token_per_layer(tp) * kv_bytes

    def attn_flops_per_pair(self) -> float:
        """FLOPs of one query token attending to one context token, all layers (QK^T + PV)."""
        if self.is_mla:
            per_head = 2 * (self.qk_nope_dim + self.qk_rope_dim) + 2 * self.v_head_dim
        else:
            per_head = 4 * self.head_dim
        return float(self.layers * self.heads * per_head)

    def describe(self) -> str:
        c = self.counts()
        s = f"{self.name}: {c['total'] / 1e9:.2f} B params, {self.layers} layers, hidden {self.hidden}"
        if self.is_mla:
            s += f", MLA (latent {self.kv_lora_rank}+{self.qk_rope_dim})"
        else:
            s += f", {self.heads} heads / {self.kv_heads} KV heads x {self.head_dim}"
        if self.is_moe:
            s += (f", MoE {self.num_experts} experts top-{self.experts_per_tok} "
                  f"({self.active_params / 1e9:.2f} B active)")
        return s


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_gb: float
    usable_gib: float
    bandwidth_gbs: float
    bf16_tflops: float
    fp8_tflops: float
    int8_tops: float
    arch: str
    interconnect_gbs: float = 0.0  # GPU-to-GPU, one direction (tensor parallel all-reduce)
    aliases: tuple[str, ...] = ()
    measured: bool = False
    compute_capability: tuple[int, int] | None = None  # CUDA's (major, minor), from the datasheet

    @property
    def bandwidth(self) -> float:
        """bytes/s"""
        return self.bandwidth_gbs * 1e9

    @property
    def has_fp8(self) -> bool:
        return self.fp8_tflops > 0

    def peak_flops(self, fmt: str) -> float:
        """Dense tensor-core peak, FLOP/s, for GEMMs whose *inputs* are `fmt`."""
        if fmt == "fp8" and self.has_fp8:
            return self.fp8_tflops * 1e12
        if fmt == "int8" and self.int8_tops:
            return self.int8_tops * 1e12
        return self.bf16_tflops * 1e12


# --- models ------------------------------------------------------------------------------
def bundled_models() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


def bundled_hf_id(name: str) -> str | None:
    """The Hugging Face id a bundled shape was read from (its `_source` starts with it), or None."""
    import json

    p = next((q for q in MODELS_DIR.glob("*.json") if q.stem.lower() == name.lower()), None)
    if p is None:
        return None
    try:
        src = str(json.loads(p.read_text(encoding="utf-8")).get("_source") or "")
    except (OSError, ValueError):
        return None
    head = src.split()[0] if src.split() else ""
    return head if head.count("/") == 1 and not head.startswith((".", "/")) else None


def _get(cfg: dict, *keys, default=None):
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return default


def model_from_config(cfg: dict[str, Any], name: str, source: str = "") -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config.json dict."""
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the LM here
        inner = dict(cfg["text_config"])
        inner.setdefault("quantization_config", cfg.get("quantization_config"))
        inner.setdefault("torch_dtype", cfg.get("torch_dtype"))
        cfg = inner
    try:
        hidden = int(_get(cfg, "hidden_size", "d_model", "n_embd"))
        layers = int(_get(cfg, "num_hidden_layers", "n_layer", "num_layers"))
        heads = int(_get(cfg, "num_attention_heads", "n_head"))
        vocab = int(_get(cfg, "vocab_size"))
    except (TypeError, ValueError):
        raise UsageError(f"{source or name}: not a decoder config.json (needs hidden_size, num_hidden_layers, "
                         f"num_attention_heads, vocab_size)")
    kv_heads = int(_get(cfg, "num_key_value_heads", "num_kv_heads", default=heads))
    head_dim = int(_get(cfg, "head_dim", default=hidden // heads))
    intermediate = int(_get(cfg, "intermediate_size", "ffn_dim", default=4 * hidden))
    mt = str(cfg.get("model_type", "")).lower()
    dtype = str(_get(cfg, "torch_dtype", "dtype", default="bfloat16")).lower()
    dtype_bytes = 2 if dtype in ("bfloat16", "float16", "half", "float32",
                                 "float") else 2  # vLLM serves fp32 configs as bf16
    # MoE
    num_experts = int(_get(cfg, "num_local_experts", "n_routed_experts", "num_experts", default=0) or 0)
    top_k = int(_get(cfg, "num_experts_per_tok", "moe_topk", default=0) or 0)
    moe_inter = int(_get(cfg, "moe_intermediate_size", default=intermediate) or intermediate)
    shared = 0
    if cfg.get("n_shared_experts"):
        shared = int(cfg["n_shared_experts"]) * moe_inter
    elif cfg.get("shared_expert_intermediate_size"):
        shared = int(cfg["shared_expert_intermediate_size"])
    first_dense = int(cfg.get("first_k_dense_replace", 0) or 0) if num_experts else 0
    if num_experts and not top_k:
        top_k = 2
    # MLA
    kv_lora = int(cfg.get("kv_lora_rank") or 0)
    q = cfg.get("quantization_config") or {}
    method = str(q.get("quant_method", "")).lower() if isinstance(q, dict) else ""
    return ModelSpec(
        name=name,
        source=source or cfg.get("_source", ""),
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        vocab=vocab,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        dtype_bytes=dtype_bytes,
        max_position=int(cfg.get("max_position_embeddings", 0) or 0),
        qkv_bias=bool(cfg.get("attention_bias", False)) or mt in ("qwen2", "qwen2_moe"),
        num_experts=num_experts,
        experts_per_tok=top_k,
        moe_intermediate=moe_inter if num_experts else 0,
        shared_intermediate=shared,
        first_dense_layers=first_dense,
        kv_lora_rank=kv_lora,
        q_lora_rank=int(cfg.get("q_lora_rank") or 0),
        qk_nope_dim=int(cfg.get("qk_nope_head_dim") or 0),
        qk_rope_dim=int(cfg.get("qk_rope_head_dim") or 0),
        v_head_dim=int(cfg.get("v_head_dim") or 0),
        quant_method=method,
        quant_group_size=int(q.get("group_size", 128) or 128) if isinstance(q, dict) else 128,
        config=dict(cfg),
    )


@lru_cache(maxsize=64)
def _load_model_cached(key: str) -> ModelSpec:
    path = Path(key)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise UsageError(f"{path}: cannot read config.json ({e})")
        if not isinstance(cfg, dict):
            raise UsageError(f"{path}: not a config.json object")
        name = path.parent.name if path.name == "config.json" else path.stem
        return model_from_config(cfg, name=name, source=str(path))
    wanted = key.lower().removesuffix(".json")
    names = bundled_models()
    for n in names:
        if n.lower() == wanted:
            p = MODELS_DIR / f"{n}.json"
            cfg = json.loads(p.read_text(encoding="utf-8"))
            return model_from_config(cfg, name=n, source=cfg.get("_source", str(p)))
    # a Hugging Face id "org/Name" whose name part matches a bundled shape
    tail = wanted.rsplit("/", 1)[-1].removesuffix("-instruct")
    for n in names:
        if n.lower() == tail:
            return _load_model_cached(n)
    raise UsageError(f"unknown model {key!r}: give a config.json path or one of {', '.join(names)}")


def load_model(name_or_path: str | Path) -> ModelSpec:
    """A bundled model by name (case-insensitive) or a config.json (file or folder)."""
    return _load_model_cached(str(name_or_path))


# --- GPUs --------------------------------------------------------------------------------
def _capability(v: Any) -> tuple[int, int] | None:
    """"8.6" → (8, 6); None when absent."""
    if v is None:
        return None
    major, _, minor = str(v).partition(".")
    return int(major), int(minor or 0)


@lru_cache(maxsize=1)
def _gpu_table() -> dict[str, GpuSpec]:
    raw = tomllib.loads(GPUS_FILE.read_text(encoding="utf-8"))
    out: dict[str, GpuSpec] = {}
    for name, d in raw.items():
        out[name] = GpuSpec(
            name=name,
            memory_gb=float(d["memory_gb"]),
            usable_gib=float(d["usable_gib"]),
            bandwidth_gbs=float(d["bandwidth_gbs"]),
            bf16_tflops=float(d["bf16_tflops"]),
            fp8_tflops=float(d.get("fp8_tflops", 0)),
            int8_tops=float(d.get("int8_tops", 0)),
            arch=str(d.get("arch", "")),
            interconnect_gbs=float(d.get("interconnect_gbs", 0)),
            aliases=tuple(d.get("aliases", ())),
            measured=name == "H200",
            compute_capability=_capability(d.get("compute_capability")),
        )
    return out


def gpu_names() -> list[str]:
    return list(_gpu_table())


def _norm(s: str) -> str:
    return "".join(ch for ch in s.lower() if ch.isalnum())


def load_gpu(name: str) -> GpuSpec:
    """A GPU by catalogue name or alias; case, spaces and dashes do not matter."""
    table = _gpu_table()
    want = _norm(name)
    for g in table.values():
        if want in (_norm(g.name), *(_norm(a) for a in g.aliases)):
            return g
    raise UsageError(f"unknown GPU {name!r}: one of {', '.join(table)}")
