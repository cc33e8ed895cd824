"""Helpers for tests/pkg (imported by name: pytest puts this folder on sys.path). Here: a fake NVML box (the one mock: GPUs and their
memory holders cannot be produced on a machine without a GPU), a model directory, a fake vLLM
GPU build on sys.path (a real distribution's metadata, as pip writes it)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pynvml

GIB = 1024**3
ROOT = Path(__file__).resolve().parents[2]

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
         "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
         "max_position_embeddings": 8192, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def model_dir(path: Path, **over) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({**LLAMA, **over}))
    return path


class FakeGpuBox:
    """pynvml's functions replaced for `gpus`: dicts of name, total/free GiB, cc (major, minor), procs {pid: GiB}."""

    def __init__(self, monkeypatch, gpus, names=None):
        self.gpus = gpus
        self.names = names or {}
        fns = {
            "nvmlInit": lambda: None,
            "nvmlShutdown": lambda: None,
            "nvmlSystemGetDriverVersion": lambda: "580.159.04",
            "nvmlSystemGetCudaDriverVersion_v2": lambda: 13000,
            "nvmlDeviceGetCount": lambda: len(self.gpus),
            "nvmlDeviceGetHandleByIndex": lambda i: i,
            "nvmlDeviceGetUUID": lambda h: f"GPU-{h:04d}-fake",
            "nvmlDeviceGetName": lambda h: self.gpus[h]["name"],
            "nvmlDeviceGetMemoryInfo": lambda h, version=None: SimpleNamespace(
                total=self.gpus[h]["total"] * GIB, free=self.gpus[h]["free"] * GIB,
                used=(self.gpus[h]["total"] - self.gpus[h]["free"]) * GIB),
            "nvmlDeviceGetCudaComputeCapability": lambda h: self.gpus[h]["cc"],
            "nvmlDeviceGetComputeRunningProcesses": lambda h: [SimpleNamespace(pid=p, usedGpuMemory=int(g * GIB))
                                                               for p, g in self.gpus[h].get("procs", {}).items()],
            "nvmlDeviceGetGraphicsRunningProcesses": lambda h: [],
            "nvmlSystemGetProcessName": lambda pid: self.names.get(pid, ""),
        }
        for name, fn in fns.items():
            monkeypatch.setattr(pynvml, name, fn)


def H200(free=139.8, procs=None):
    return {"name": "NVIDIA H200", "total": 139.8, "free": free, "cc": (9, 0), "procs": procs or {}}


def A100(free=79.1):
    return {"name": "NVIDIA A100-SXM4-80GB", "total": 79.1, "free": free, "cc": (8, 0), "procs": {}}


