"""The tiny model directory: config, WordLevel tokenizer that round-trips every id, safetensors weights."""

from __future__ import annotations

import builtins
import json
import math
import struct
import subprocess
import sys

import pytest

from kvtui.runtime.engines.vllm.tinymodel import TinyModelSpec, build, weight_shapes


def read_safetensors_header(path):
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = json.loads(fh.read(n))
    return n, header


def test_default_model_directory(tmp_path):
    d = build(tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]) == (4, 2, 64)
    assert cfg["torch_dtype"] == "bfloat16"
    assert cfg["vocab_size"] == 4096
    tc = json.loads((d / "tokenizer_config.json").read_text())
    assert "messages" in tc["chat_template"]
    assert TinyModelSpec().kv_bytes_per_token() == 4 * 2 * 64 * 2 * 2  # 2,048 B/token in bf16
    assert TinyModelSpec().kv_bytes_per_token(1) == 1024  # fp8 KV


def test_weights_file_matches_the_llama_layout(tmp_path):
    spec = TinyModelSpec(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=256)
    d = build(tmp_path / "m", spec)
    path = d / "model.safetensors"
    n, header = read_safetensors_header(path)
    shapes = {name: shape for name, shape, _ in weight_shapes(spec)}
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    assert set(tensors) == set(shapes)
    assert tensors["model.layers.1.self_attn.k_proj.weight"]["shape"] == [32, 64]  # kv_heads x head_dim, hidden
    assert all(t["dtype"] == "BF16" for t in tensors.values())
    data = sum(math.prod(s) * 2 for s in shapes.values())
    assert path.stat().st_size == 8 + n + data
    assert (8 + n) % 8 == 0


def test_tokenizer_round_trips_every_id(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    spec = TinyModelSpec(vocab=512)
    d = build(tmp_path / "m", spec, weights=False)
    assert not (d / "model.safetensors").exists()
    tok = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    ids = list(range(spec.vocab - 3))  # every word id; the three specials sit at the top
    text = tok.decode(ids)
    assert text.split()[:3] == ["t0", "t1", "t2"]
    assert tok.encode(text).ids == ids
    assert tok.token_to_id("<|end_of_text|>") == spec.eos_id == 510
    assert tok.encode("t7 nonsense").ids == [7, spec.vocab - 1]  # unknown word → <unk>


def test_transformers_loads_it_with_the_chat_template(tmp_path):
    transformers = pytest.importorskip("transformers")
    d = build(tmp_path / "m", TinyModelSpec(vocab=128), weights=False)
    tok = transformers.AutoTokenizer.from_pretrained(str(d))
    assert tok("t5 t6").input_ids == [5, 6]
    chat = tok.apply_chat_template([{"role": "user", "content": "t1 t2"}], tokenize=False, add_generation_prompt=True)
    assert chat == "user: t1 t2\nassistant:"


def test_weights_without_numpy_are_valid_too(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_numpy(name, *a, **k):
        if name == "numpy" or name.startswith("numpy."):
            raise ImportError("no numpy here")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_numpy)
    spec = TinyModelSpec(layers=1, hidden=32, heads=2, kv_heads=1, head_dim=16, intermediate=64, vocab=64, dtype="float32")
    d = build(tmp_path / "m", spec)
    n, header = read_safetensors_header(d / "model.safetensors")
    off = header["model.norm.weight"]["data_offsets"]
    raw = (d / "model.safetensors").read_bytes()[8 + n + off[0] : 8 + n + off[1]]
    assert struct.unpack("<32f", raw) == (1.0,) * 32
    emb = header["model.embed_tokens.weight"]["data_offsets"]
    vals = struct.unpack(f"<{64 * 32}f", (d / "model.safetensors").read_bytes()[8 + n + emb[0] : 8 + n + emb[1]])
    assert all(math.isfinite(v) and abs(v) < 0.2 for v in vals) and len(set(vals)) > 1000


def test_cli(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "kvtui.runtime.engines.vllm.tinymodel", str(tmp_path / "m"), "--layers", "2", "--kv-heads", "1", "--no-weights"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert "2 layers, 1 KV heads x 64" in r.stdout and "--load-format dummy" in r.stdout
    assert json.loads((tmp_path / "m" / "config.json").read_text())["num_key_value_heads"] == 1
    bad = subprocess.run(
        [sys.executable, "-m", "kvtui.runtime.engines.vllm.tinymodel", str(tmp_path / "x"), "--heads", "3", "--kv-heads", "2"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "multiple of kv_heads" in bad.stderr
