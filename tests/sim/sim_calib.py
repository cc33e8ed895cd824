"""The H200 / vLLM 0.26 calibration data (bench/data/h200-vllm-0.26.0), read without numpy."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from kvtui.io.scenario.schema import Mode, Server
from kvtui.simulator.engine.fast import bench_serve
from kvtui.simulator.engine.scheduler import SchedulerSim
from kvtui.simulator.model.catalog import load_gpu, load_model
from kvtui.simulator.model.roofline import DEFAULT_CALIBRATION

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "bench" / "data" / "h200-vllm-0.26.0"
MODES = {
    "a": Mode("a"),
    "b": Mode("b", kv_cache_dtype="fp8"),
    "c": Mode("c", quantization="fp8"),
    "d": Mode("d", quantization="fp8", kv_cache_dtype="fp8"),
}
STARTUP = {"a": "startup-bf16", "b": "startup-kv-fp8", "c": "startup-w-fp8", "d": "startup-w-fp8-kv-fp8"}
PREFIX_ORDER = (128, 512, 32, 256)
NOPREFIX_ORDER = (512, 256, 64)
ISL, OSL = 2048, 256


def capacity(mode: str) -> dict:
    text = (DATA / "startup" / f"{STARTUP[mode]}.txt").read_text()
    return {
        "weights_gib": float(re.search(r"Model loading took ([\d.]+) GiB", text).group(1)),
        "kv_cache_gib": float(re.search(r"Available KV cache memory: ([\d.]+) GiB", text).group(1)),
        "kv_tokens": int(re.search(r"GPU KV cache size: ([\d,]+) tokens", text).group(1).replace(",", "")),
        "max_concurrency": float(re.search(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x", text).group(1)),
        "cuda_graph_gib": float(re.search(r"took ([\d.]+) GiB", text.split("Graph capturing")[1]).group(1)),
    }


def nvml_ready_mib(mode: str) -> int:
    row = re.search(rf"^\| {mode} \|.*\| ([\d,]+) / ([\d,]+) \|$", (DATA / "README.md").read_text(), re.M)
    return int(row.group(1).replace(",", ""))


def measured(mode: str, conc: int, prefix: bool) -> dict:
    path = DATA / ("bench" if prefix else "noprefix") / f"{mode}_c{conc}.json"
    return json.loads(path.read_text())


def _metrics(path: Path) -> dict[str, float]:
    out = {}
    for line in path.read_text().splitlines():
        m = re.match(r"(vllm:\w+)(\{[^}]*\})? ([-\d.e+]+)$", line.strip())
        if m and not m.group(1).endswith("_created") and "source=" not in (m.group(2) or "") and "reason=" not in (m.group(2) or ""):
            out[m.group(1)] = float(m.group(3))
    return out


def measured_hit_rates(mode: str) -> dict[int, float]:
    prev = _metrics(DATA / "metrics" / f"{mode}_ready.txt")
    out = {}
    for c in PREFIX_ORDER:
        cur = _metrics(DATA / "metrics" / f"{mode}_after_c{c}.txt")
        q = cur["vllm:prefix_cache_queries_total"] - prev["vllm:prefix_cache_queries_total"]
        out[c] = (cur["vllm:prefix_cache_hits_total"] - prev["vllm:prefix_cache_hits_total"]) / q
        prev = cur
    return out


def rests_on() -> set[str]:
    """The cells the fit rests on, as the fit wrote them into the calibration file."""
    return set(tomllib.loads(DEFAULT_CALIBRATION.read_text())["fit"]["rests_on"])


def sched(mode: str, prefix: bool = True, **server) -> SchedulerSim:
    srv = Server(max_model_len=8192, gpu_memory_utilization=0.9, enable_prefix_caching=prefix, **server)
    return SchedulerSim(load_model("llama-3.1-8b"), load_gpu("H200"), MODES[mode], srv, seed=0)


def prompt_hashes(i: int) -> list[int]:
    """`vllm bench serve --seed 0`: prompt i is the same in every run of the session."""
    base = (i + 1) << 20
    return list(range(base, base + ISL // 16))


def replay(mode: str, prefix: bool) -> dict[int, dict]:
    """Replay a measured session in its run order; returns per concurrency the bench summary."""
    s = sched(mode, prefix)
    h = prompt_hashes if prefix else None
    bench_serve(s, 16, 16, ISL, 32, h, id_prefix="w")  # the bench's 16-prompt warm-up (32 tokens out)
    out = {}
    for c in (PREFIX_ORDER if prefix else NOPREFIX_ORDER):
        q0, h0, p0 = s.pc_queries, s.pc_hits, s.preemptions_total
        summary, _records = bench_serve(s, (2 if prefix else 3) * c, c, ISL, OSL, h, id_prefix=f"c{c}-")
        summary["hit_rate"] = (s.pc_hits - h0) / (s.pc_queries - q0) if s.pc_queries > q0 else 0.0
        summary["preemptions"] = s.preemptions_total - p0
        out[c] = summary
    return out
