"""Build a tiny Llama model directory that vLLM can serve, with no download.

    python -m kvtui.runtime.engines.vllm.tinymodel DIR [--layers 4 --kv-heads 2 --head-dim 64 …]

Writes config.json (LlamaForCausalLM, `torch_dtype` set), generation_config.json, a
tokenizer (tokenizer.json + tokenizer_config.json with a chat template) and, unless
`--no-weights`, random weights in model.safetensors.

The tokenizer is the one the H200 dummy model uses (shared/gpu/build_bundle.sh): a WordLevel
vocabulary of the words "t0" … "tN-1" split on whitespace, with three special tokens at the
top of the vocabulary. Every token id decodes to one word and re-encodes to itself, so a
prompt of N random ids stays N tokens and any id the model samples decodes. The JSON is
exactly what `tokenizers.Tokenizer(WordLevel(…)).save()` writes; it is written by hand so
that building a model needs nothing beyond the standard library (and numpy, when present,
for the weights).

KV bytes per token = layers × kv_heads × head_dim × 2 (K and V) × bytes per element:
the default 4 × 2 × 64 × 2 × 2 = 2,048 bytes in bf16, 1,024 with an fp8 KV cache.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import struct
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
UNK = "<unk>"
CHAT_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"


@dataclass
class TinyModelSpec:
    layers: int = 4
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 64
    intermediate: int = 512
    vocab: int = 4096
    max_position: int = 4096
    dtype: str = "bfloat16"  # "bfloat16" or "float32" (torch_dtype in config.json)
    seed: int = 0

    @property
    def special_ids(self) -> dict[int, str]:
        return {self.vocab - 3: BOS, self.vocab - 2: EOS, self.vocab - 1: UNK}

    @property
    def bos_id(self) -> int:
        return self.vocab - 3

    @property
    def eos_id(self) -> int:
        return self.vocab - 2

    def kv_bytes_per_token(self, kv_dtype_bytes: int | None = None) -> int:
        b = kv_dtype_bytes or (4 if self.dtype == "float32" else 2)
        return self.layers * self.kv_heads * self.head_dim * 2 * b

    def validate(self) -> None:
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.vocab < 16:
            raise ValueError("vocab must be at least 16")
        if self.dtype not in ("bfloat16", "float32", "float16"):
            raise ValueError(f"dtype must be bfloat16, float16 or float32, not {self.dtype!r}")


def tokenizer_json(spec: TinyModelSpec) -> dict:
    special = spec.special_ids
    vocab = {special.get(i, f"t{i}"): i for i in range(spec.vocab)}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": t,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, t in sorted(special.items())
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": UNK},
    }


def config_json(spec: TinyModelSpec) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": spec.bos_id,
        "eos_token_id": spec.eos_id,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "hidden_size": spec.hidden,
        "initializer_range": 0.02,
        "intermediate_size": spec.intermediate,
        "max_position_embeddings": spec.max_position,
        "mlp_bias": False,
        "num_attention_heads": spec.heads,
        "num_hidden_layers": spec.layers,
        "num_key_value_heads": spec.kv_heads,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": spec.dtype,
        "use_cache": True,
        "vocab_size": spec.vocab,
    }


def weight_shapes(spec: TinyModelSpec) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, init) of every Llama tensor; init is "normal" or "ones"."""
    h, q, kv, i = spec.hidden, spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim, spec.intermediate
    out: list[tuple[str, tuple[int, ...], str]] = [("model.embed_tokens.weight", (spec.vocab, h), "normal")]
    for n in range(spec.layers):
        p = f"model.layers.{n}."
        out += [
            (p + "input_layernorm.weight", (h,), "ones"),
            (p + "post_attention_layernorm.weight", (h,), "ones"),
            (p + "self_attn.q_proj.weight", (q, h), "normal"),
            (p + "self_attn.k_proj.weight", (kv, h), "normal"),
            (p + "self_attn.v_proj.weight", (kv, h), "normal"),
            (p + "self_attn.o_proj.weight", (h, q), "normal"),
            (p + "mlp.gate_proj.weight", (i, h), "normal"),
            (p + "mlp.up_proj.weight", (i, h), "normal"),
            (p + "mlp.down_proj.weight", (h, i), "normal"),
        ]
    out += [("model.norm.weight", (h,), "ones"), ("lm_head.weight", (spec.vocab, h), "normal")]
    return out


def _tensor_bytes(shape: tuple[int, ...], init: str, dtype: str, rng: random.Random, std: float) -> bytes:
    n = math.prod(shape)
    try:
        import numpy as np
    except ImportError:
        return _tensor_bytes_pure(n, init, dtype, rng, std)
    gen = np.random.default_rng(rng.getrandbits(63))
    a = np.ones(n, dtype=np.float32) if init == "ones" else gen.normal(0.0, std, n).astype(np.float32)
    if dtype == "float32":
        return a.astype("<f4").tobytes()
    if dtype == "float16":
        return a.astype("<f2").tobytes()
    # bfloat16: the upper 16 bits of a float32, rounded to nearest even
    u = a.view(np.uint32)
    u = u + 0x7FFF + ((u >> 16) & 1)
    return (u >> 16).astype("<u2").tobytes()


def _tensor_bytes_pure(n: int, init: str, dtype: str, rng: random.Random, std: float) -> bytes:
    """Pure Python fallback without numpy (a few seconds for the default size)."""
    vals = [1.0] * n if init == "ones" else [rng.gauss(0.0, std) for _ in range(n)]
    if dtype == "float32":
        return struct.pack(f"<{n}f", *vals)
    if dtype == "float16":
        return struct.pack(f"<{n}e", *vals)
    raw = struct.unpack(f"<{n}I", struct.pack(f"<{n}f", *vals))
    return struct.pack(f"<{n}H", *((u + 0x7FFF + ((u >> 16) & 1)) >> 16 & 0xFFFF for u in raw))


def write_safetensors(path: Path, spec: TinyModelSpec) -> int:
    """Random weights (normal, std 0.02; norms at 1.0) in the safetensors format. Returns bytes written."""
    rng = random.Random(spec.seed)
    st_dtype = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}[spec.dtype]
    esize = 4 if spec.dtype == "float32" else 2
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    tensors = weight_shapes(spec)
    for name, shape, _ in tensors:
        size = math.prod(shape) * esize
        header[name] = {"dtype": st_dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)  # 8-byte alignment of the data section
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(hb)))
        fh.write(hb)
        for _, shape, init in tensors:
            fh.write(_tensor_bytes(shape, init, spec.dtype, rng, 0.02))
    os.replace(tmp, path)
    return 8 + len(hb) + offset


def build(directory: str | os.PathLike, spec: TinyModelSpec | None = None, weights: bool = True) -> Path:
    """Write the model directory (created if needed; files overwritten). Returns its path."""
    spec = spec or TinyModelSpec()
    spec.validate()
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config_json(spec), indent=1) + "\n")
    (d / "generation_config.json").write_text(
        json.dumps({"bos_token_id": spec.bos_id, "eos_token_id": spec.eos_id}) + "\n"
    )
    (d / "tokenizer.json").write_text(json.dumps(tokenizer_json(spec), ensure_ascii=False))
    (d / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": BOS,
                "eos_token": EOS,
                "unk_token": UNK,
                "tokenizer_class": "PreTrainedTokenizerFast",
                "model_max_length": spec.max_position,
                "add_bos_token": False,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=1,
        )
        + "\n"
    )
    (d / "special_tokens_map.json").write_text(json.dumps({"bos_token": BOS, "eos_token": EOS,
                                                           "unk_token": UNK}) + "\n")
    st = d / "model.safetensors"
    if weights:
        write_safetensors(st, spec)
    elif st.exists():
        st.unlink()
    (d / "kvtui-tinymodel.json").write_text(json.dumps(asdict(spec), indent=1) + "\n")
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m kvtui.runtime.engines.vllm.tinymodel",
        description="Build a tiny Llama model directory for vLLM (no download).",
    )
    ap.add_argument("dir")
    d = TinyModelSpec()
    ap.add_argument("--layers", type=int, default=d.layers)
    ap.add_argument("--hidden", type=int, default=d.hidden)
    ap.add_argument("--heads", type=int, default=d.heads)
    ap.add_argument("--kv-heads", type=int, default=d.kv_heads)
    ap.add_argument("--head-dim", type=int, default=d.head_dim)
    ap.add_argument("--intermediate", type=int, default=d.intermediate)
    ap.add_argument("--vocab", type=int, default=d.vocab)
    ap.add_argument("--max-position", type=int, default=d.max_position)
    ap.add_argument("--dtype", default=d.dtype, choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument(
        "--no-weights", action="store_true", help="config and tokenizer only: serve it with --load-format dummy"
    )
    a = ap.parse_args(argv)
    spec = TinyModelSpec(
        layers=a.layers,
        hidden=a.hidden,
        heads=a.heads,
        kv_heads=a.kv_heads,
        head_dim=a.head_dim,
        intermediate=a.intermediate,
        vocab=a.vocab,
        max_position=a.max_position,
        dtype=a.dtype,
        seed=a.seed,
    )
    try:
        path = build(a.dir, spec, weights=not a.no_weights)
    except ValueError as e:
        ap.error(str(e))
    print(
        f"{path}: {spec.layers} layers, {spec.kv_heads} KV heads x {spec.head_dim}, vocab {spec.vocab}, "
        f"{spec.dtype}, KV {spec.kv_bytes_per_token()} B/token"
        + ("" if not a.no_weights else " (no weights: use --load-format dummy)")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
