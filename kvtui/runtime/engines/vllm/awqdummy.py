"""An AWQ int4 twin of a model directory, for serving with `--load-format dummy`.

    python -m kvtui.runtime.engines.vllm.awqdummy /tmp/model8b /tmp/model8b-awq

Copies config.json (with an AWQ int4 `quantization_config` and float16 `torch_dtype` added),
the tokenizer and generation config — no weights. vLLM's dummy loader accepts it: it fills the
float tensors (scales) and leaves the packed int32 ones (qweight, qzeros) as allocated, so the
model is built with AWQ layers and runs their kernels on meaningless weights, which is all a
capacity run needs (shown on the CPU build by tests/vllm/test_vllm_awq_dummy.py). This is how the
H200 scenario's `awq-int4+fp8-kv` mode gets its model without a download. The config says
float16, as AWQ checkpoints do; with an fp8 KV cache serve it with `--dtype bfloat16`
(FlashAttention 3 rejects float16 with fp8 KV on vLLM 0.26.0; awq_marlin runs in bf16).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

# What AutoAWQ writes for 4-bit GEMM checkpoints (e.g. hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4).
AWQ_CONFIG = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}

# Everything a server needs besides the weights.
_COPIED = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
           "tokenizer.model", "vocab.json", "merges.txt")


def awq_twin(src: str | Path, dst: str | Path) -> Path:
    """Write the AWQ twin of `src` into `dst` (created; files overwritten). Returns dst."""
    src, dst = Path(src), Path(dst)
    cfg_path = src / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except OSError as e:
        raise ValueError(f"{cfg_path}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{cfg_path}:{e.lineno}: not JSON ({e.msg})") from None
    if cfg.get("quantization_config"):
        raise ValueError(f"{cfg_path}: already has a quantization_config "
                         f"({cfg['quantization_config'].get('quant_method')})")
    group = AWQ_CONFIG["group_size"]
    for key in ("hidden_size", "intermediate_size"):
        if isinstance(cfg.get(key), int) and cfg[key] % group:
            raise ValueError(f"{cfg_path}: {key} {cfg[key]} is not a multiple of the AWQ group size {group}")
    cfg["quantization_config"] = dict(AWQ_CONFIG)
    cfg["torch_dtype"] = "float16"  # what AWQ checkpoints declare (a mode's dtype overrides it)
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    for name in _COPIED:
        if (src / name).exists():
            shutil.copyfile(src / name, dst / name)
    return dst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvtui.runtime.engines.vllm.awqdummy",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("src", help="a model directory (config.json and tokenizer; weights not needed)")
    ap.add_argument("dst")
    a = ap.parse_args(argv)
    try:
        out = awq_twin(a.src, a.dst)
    except ValueError as e:
        print(f"kvtui: {e}", file=sys.stderr)
        return 2
    print(f"{out}: AWQ int4 (group {AWQ_CONFIG['group_size']}) twin of {a.src}; serve with --load-format dummy "
          "--quantization awq (awq_marlin on NVIDIA GPUs); with --kv-cache-dtype fp8 add --dtype bfloat16")
    return 0


if __name__ == "__main__":
    sys.exit(main())
