"""The pre-flight's result: one Check per line it shows, the Preflight that holds them, and the
compute-capability tables the checks read."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from kvtui.io.scenario.schema import Scenario

ENV_SKIP = "KVTUI_PREFLIGHT"

FP8_CC = (8, 9)  # Ada (8.9), Hopper (9.0), Blackwell: FP8 tensor cores, vLLM's FP8 GEMMs (W8A8)
# Below 8.9 vLLM runs FP8 weights weight-only (W8A16): FP8 Marlin dequantizes them to 16 bits in
# the GEMM (vLLM's Fp8Config: minimum capability 7.5; fbgemm_fp8 uses Marlin there from 8.0).
FP8_WEIGHT_ONLY_CC = (7, 5)
# An fp8 KV cache below Hopper: FlashAttention 2 reads none, FlashInfer and Triton attention do
# (vLLM picks one of them); kvtui asks for Ampere, where those paths are built and tested.
FP8_KV_CC = (8, 0)
# Weight formats vLLM runs weight-only (W8A16) on a GPU without FP8 tensor cores.
FP8_WEIGHT_ONLY = {"fp8": FP8_WEIGHT_ONLY_CC, "fbgemm_fp8": (8, 0)}
# --quantization → the compute capability vLLM's kernels for it need
QUANT_CC = {
    **FP8_WEIGHT_ONLY,
    "modelopt": FP8_CC,
    "ptpc_fp8": (9, 4),
    "awq": (7, 5),
    "awq_marlin": (8, 0),
    "gptq_marlin": (8, 0),
    "marlin": (8, 0),
    "gptq": (6, 0),
    "compressed-tensors": (7, 5),
}
BF16_CC = (8, 0)  # "Bfloat16 is only supported on GPUs with compute capability of at least 8.0"
ARCH = {
    (7, 0): "Volta",
    (7, 5): "Turing",
    (8, 0): "Ampere",
    (8, 6): "Ampere",
    (8, 7): "Ampere",
    (8, 9): "Ada",
    (9, 0): "Hopper",
    (10, 0): "Blackwell",
    (12, 0): "Blackwell",
}


@dataclass
class Check:
    name: str
    status: str  # "ok", "warn", "fail"
    text: str
    fix: str = ""

    def line(self) -> str:
        word = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}[self.status]
        return f"pre-flight {word} {self.name}: {self.text}" + (f" — fix: {self.fix}" if self.fix else "")


@dataclass
class Preflight:
    checks: list[Check] = field(default_factory=list)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def ok(self) -> bool:
        return not self.failed

    def add(self, name: str, status: str, text: str, fix: str = "") -> None:
        self.checks.append(Check(name, status, text, fix))

    def summary(self) -> str:
        n = len(self.failed)
        return (
            f"pre-flight: {n} check{'s' if n != 1 else ''} failed: no mode was started, nothing was written "
            f"({ENV_SKIP}=0 skips the checks)"
        )


def skipped() -> bool:
    return os.environ.get(ENV_SKIP, "").strip().lower() in ("0", "no", "off", "false")


def _cc(cc: tuple[int, int] | None) -> str:
    if cc is None:
        return "?"
    arch = ARCH.get(cc) or next((a for k, a in sorted(ARCH.items(), reverse=True) if k <= cc), "")
    return f"{cc[0]}.{cc[1]}" + (f" ({arch})" if arch else "")


def _where(sc: Scenario, path: tuple) -> str:
    """`file:line` of a scenario key, for the message (the loader's own line index)."""
    src = sc.source or ""
    if not src or src.startswith("<"):
        return "server.model" if path == ("server", "model") else ".".join(map(str, path))
    try:
        from kvtui.io.scenario.locate import LineIndex

        with open(src, encoding="utf-8") as f:
            line = LineIndex(f.read()).line(path)
    except OSError:
        line = 0
    dotted = ".".join(str(p) for p in path)
    return f"{src}:{line}: {dotted}" if line else f"{src}: {dotted}"


def fp8_weight_only(quantization: str, cc: tuple[int, int] | None) -> bool:
    """FP8 weights that vLLM runs weight-only (W8A16, FP8 Marlin) on this compute capability: no FP8
    tensor cores (below 8.9) but enough for Marlin. None (unknown) is not weight-only."""
    q = (quantization or "").lower()
    return cc is not None and q in FP8_WEIGHT_ONLY and FP8_WEIGHT_ONLY[q] <= cc < FP8_CC
