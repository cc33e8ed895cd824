"""GGUF → an ordinary Hugging Face model directory (bf16 safetensors, tokenizer, chat template).

    python -m kvtui.models.convert FILE.gguf OUTDIR

Run as its own process by `kvtui.models.build` (it imports torch and transformers, which kvtui
itself never needs). transformers dequantizes the GGUF's tensors on load; the GGUF
`quantization_config` it attaches is dropped before saving, so vLLM sees a plain bf16 model.
Exit 0 on success, 3 when a converter package is missing (its name on stderr), 1 otherwise.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

NEEDED = ("torch", "transformers", "gguf", "accelerate")


def missing_converters() -> list[str]:
    import importlib.util

    return [m for m in NEEDED if importlib.util.find_spec(m) is None]


def convert(gguf: Path, out: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src, name = str(gguf.parent), gguf.name
    tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.bfloat16)
    cfg = model.config
    # GGUF's quantizer: the tensors are dequantized on load, so nothing of it is left to save
    # (transformers refuses to serialize a model that still carries it).
    # Both are plain attributes transformers sets at load time; its types only know them through
    # torch.nn.Module.__getattr__ (Tensor | Module), hence the targeted ignores. `unused-ignore` rides
    # along because without torch/transformers installed (the dev venv) both are Any and the ignore
    # has nothing to silence: the same file must check clean with and without them.
    model.hf_quantizer = None  # type: ignore[assignment, unused-ignore]
    if hasattr(model, "is_quantized"):
        model.is_quantized = False  # type: ignore[assignment, unused-ignore]
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    # The property has a setter (transformers 5: a deprecated alias of `dtype`) that mypy does not
    # see; older transformers read the attribute itself, so it is the spelling that works in both.
    cfg.torch_dtype = torch.bfloat16  # type: ignore[misc, unused-ignore]
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    # The saved config must not carry the GGUF quantization either (older transformers write it).
    cfg_path = out / "config.json"
    d = json.loads(cfg_path.read_text())
    d.pop("quantization_config", None)
    # transformers 5 writes rope settings as rope_parameters and the dtype as dtype; older
    # readers (the transformers beside vLLM 0.26) look for rope_theta and torch_dtype, and would
    # silently fall back to rope_theta 10,000: write both spellings.
    rp = d.get("rope_parameters") or {}
    if isinstance(rp, dict) and "rope_theta" in rp:
        d.setdefault("rope_theta", rp["rope_theta"])
    d.setdefault("torch_dtype", "bfloat16")
    cfg_path.write_text(json.dumps(d, indent=2, sort_keys=True) + "\n")
    return d


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m kvtui.models.convert FILE.gguf OUTDIR", file=sys.stderr)
        return 2
    miss = missing_converters()
    if miss:
        print(" ".join(miss), file=sys.stderr)
        return 3
    d = convert(Path(args[0]), Path(args[1]))
    print(json.dumps({k: d.get(k) for k in ("architectures", "num_hidden_layers", "vocab_size")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
