"""A dummy-weights model directory of a bundled shape (or of any config.json), for vLLM's --load-format dummy.

    python -m kvtui.runtime.engines.vllm.shapedummy deepseek-v2-lite /tmp/dsv2lite
    python -m kvtui.runtime.engines.vllm.shapedummy qwen3-30b-a3b /tmp/qwen3moe --layers 24
    python -m kvtui.runtime.engines.vllm.shapedummy path/to/config.json /tmp/x

`kvtui init` and `kvtui run` want a model directory: config.json and a tokenizer. A bundled shape
(kvtui/data/models/*.json) holds what the estimator reads; vLLM's model classes read more fields
(DeepSeek-V2's router and YaRN rope, Qwen3-MoE's sparse step …). This fills those with the released
checkpoint's values for the model_type (FILL below), writes the word-list tokenizer of tinymodel (the
H200 dummy model's: "t0" … "tN-1", three special tokens at the top of the vocabulary, so every sampled
id decodes and a prompt of N random ids stays N tokens) sized to the shape's vocabulary, and no weights:
serve it with `--load-format dummy` (the scenario's load_format = "dummy").

`--layers N` keeps the first N layers (a smaller stand-in of the same per-layer shape; say so where
its figures are published: kvtui-shapedummy.json in the directory records it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kvtui.runtime.engines.vllm.tinymodel import BOS, CHAT_TEMPLATE, EOS, UNK, TinyModelSpec, tokenizer_json

PROVENANCE = "kvtui-shapedummy.json"

# What vLLM's model class reads beyond the estimator's fields, as the released checkpoints give it.
FILL: dict[str, dict[str, Any]] = {
    "deepseek_v2": {  # deepseek-ai/DeepSeek-V2-Lite(-Chat) config.json
        "attention_bias": False,
        "attention_dropout": 0.0,
        "aux_loss_alpha": 0.001,
        "first_k_dense_replace": 1,
        "initializer_range": 0.02,
        "moe_layer_freq": 1,
        "n_group": 1,
        "norm_topk_prob": False,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                         "original_max_position_embeddings": 4096, "type": "yarn"},
        "rope_theta": 10000,
        "routed_scaling_factor": 1.0,
        "scoring_func": "softmax",
        "seq_aux": True,
        "topk_group": 1,
        "topk_method": "greedy",
        "use_cache": True,
    },
    "qwen3_moe": {  # Qwen/Qwen3-30B-A3B config.json
        "attention_bias": False,
        "attention_dropout": 0.0,
        "decoder_sparse_step": 1,
        "initializer_range": 0.02,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "output_router_logits": False,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.001,
        "sliding_window": None,
        "use_sliding_window": False,
        "use_cache": True,
    },
    "mixtral": {"rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
                "sliding_window": None, "use_cache": True},
    "llama": {"pretraining_tp": 1, "use_cache": True, "rms_norm_eps": 1e-05, "initializer_range": 0.02},
}


def shape_config(shape: str) -> dict[str, Any]:
    """The config dict of a bundled shape name, or of a config.json file or directory."""
    from kvtui.errors import UsageError
    from kvtui.simulator.model.catalog import MODELS_DIR, bundled_models

    p = Path(shape)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        names = {n.lower(): n for n in bundled_models()}
        n = names.get(shape.lower().removesuffix(".json"))
        if n is None:
            raise UsageError(f"unknown shape {shape!r}: a config.json or one of {', '.join(sorted(names.values()))}")
        p = MODELS_DIR / f"{n}.json"
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UsageError(f"{p}: cannot read ({e})")
    if not isinstance(cfg, dict) or "vocab_size" not in cfg or "model_type" not in cfg:
        raise UsageError(f"{p}: not a model config (needs model_type and vocab_size)")
    return cfg


def dummy_config(cfg: dict[str, Any], layers: int | None = None) -> dict[str, Any]:
    """The config.json vLLM serves: the shape's fields, FILL's for its model_type, token ids of the tokenizer."""
    out = {k: v for k, v in cfg.items() if not k.startswith("_") and k != "quantization_config"}
    for k, v in FILL.get(str(cfg.get("model_type", "")).lower(), {}).items():
        out.setdefault(k, v)
    if layers is not None:
        full = int(out["num_hidden_layers"])
        if not 1 <= layers <= full:
            from kvtui.errors import UsageError

            raise UsageError(f"--layers must be in 1..{full}, got {layers}")
        out["num_hidden_layers"] = layers
        if "max_window_layers" in out:
            out["max_window_layers"] = layers
    spec = TinyModelSpec(vocab=int(out["vocab_size"]))
    out["bos_token_id"], out["eos_token_id"] = spec.bos_id, spec.eos_id
    out.setdefault("torch_dtype", "bfloat16")
    return out


def build(shape: str, directory: str | Path, layers: int | None = None) -> Path:
    cfg = dummy_config(shape_config(shape), layers)
    spec = TinyModelSpec(vocab=int(cfg["vocab_size"]), max_position=int(cfg.get("max_position_embeddings") or 4096))
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    (d / "generation_config.json").write_text(json.dumps({"bos_token_id": spec.bos_id,
                                                          "eos_token_id": spec.eos_id}) + "\n")
    (d / "tokenizer.json").write_text(json.dumps(tokenizer_json(spec), ensure_ascii=False))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": spec.max_position, "add_bos_token": False, "chat_template": CHAT_TEMPLATE},
        indent=1) + "\n")
    (d / "special_tokens_map.json").write_text(json.dumps({"bos_token": BOS, "eos_token": EOS,
                                                           "unk_token": UNK}) + "\n")
    for w in d.glob("*.safetensors"):
        w.unlink()  # dummy weights only: a stale weight file would make vLLM load it
    (d / PROVENANCE).write_text(json.dumps({"shape": shape, "layers": cfg["num_hidden_layers"],
                                            "load_format": "dummy"}, indent=1) + "\n")
    return d


def main(argv: list[str] | None = None) -> int:
    from kvtui.errors import UsageError

    ap = argparse.ArgumentParser(
        prog="python -m kvtui.runtime.engines.vllm.shapedummy",
        description="A dummy-weights model directory of a bundled shape (vLLM --load-format dummy).")
    ap.add_argument("shape", help="a bundled shape (deepseek-v2-lite, qwen3-30b-a3b, mixtral-8x7b, …) or a config.json")
    ap.add_argument("dir")
    ap.add_argument("--layers", type=int, default=None, help="keep the first N layers (default: all)")
    a = ap.parse_args(argv)
    try:
        d = build(a.shape, a.dir, a.layers)
    except UsageError as e:
        print(f"shapedummy: {e}", file=sys.stderr)
        return 2
    cfg = json.loads((d / "config.json").read_text())
    print(f"{d}: {cfg['architectures'][0]}, {cfg['num_hidden_layers']} layers, vocab {cfg['vocab_size']} "
          f"(no weights: serve with --load-format dummy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
