"""The window `kvtui init` writes, against the default 20 s, on the offline simulator: for default
`kvtui init MODEL --gpu GPU` scenarios, the median step over (warm-up + window), the comparison's
modelled seconds and steps, and the knees, with init's window and with `ramp.window_s = 20`, both
measured in this run (SIMULATED, modelled seconds). See docs/PROTOCOL.md, "The window".

    PYTHONPATH=$PWD python bench/init_window.py --md bench/results/init_window.md

Fails (exit 1) when a run measured no step in a case where init predicted a knee.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CASES = [("llama-3.1-8b", "H200"), ("qwen2.5-7b", "H200"), ("mixtral-8x7b", "H200"), ("qwen2.5-32b", "H200"),
         ("deepseek-v2-lite", "H200"), ("mixtral-8x7b", "H100"), ("qwen2.5-32b", "H100"), ("llama-3.1-8b", "L40S"),
         ("qwen2.5-7b", "L40S"),
         # bf16 meets the SLO at no load on an L4 (~70 ms a token alone): sized for fp8-w's knee of 2
         ("llama-3.1-8b", "L4"),
         # long outputs at a high knee: the first fail's longer requests size the window
         ("llama-3.1-8b", "H200", "--prompt", "512", "--output", "1024"),
         ("llama-3.1-8b", "H200", "--prompt", "8192", "--output", "512")]


def _kvtui(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "kvtui", *args], check=True, capture_output=True, cwd=ROOT)


def measured(doc: dict[str, Any]) -> dict[str, Any]:
    r = doc["scenario"]["ramp"]
    steps = [s for m in doc["modes"] for s in m["steps"]]
    if not steps:
        return {}
    return {"window": r["window_s"], "ratio": statistics.median(s["duration_s"] for s in steps) / (r["warmup_s"] +
                                                                                                  r["window_s"]),
            "steps": len(steps), "total": sum(s["duration_s"] for s in steps),
            "births": statistics.median((s.get("births") or {}).get("requests") or 0 for s in steps),
            "knees": "/".join(f"{m.get('best_concurrency') or 0:g}" for m in doc["modes"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--md", type=Path)
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="kvtui-initwin-"))
    rows, bad = [], []
    for model, gpu, *lengths in CASES:
        gpu_label = gpu + (f" {lengths[1]}+{lengths[3]}" if lengths else "")
        toml = tmp / f"{model}-{gpu_label.replace(' ', '-')}.toml"
        _kvtui("init", model, "--gpu", gpu, *lengths, "--out", str(toml))
        sized = "window_s" in toml.read_text()
        got = {}
        for label, sets in (("init", []), ("20 s", ["--set", "ramp.window_s=20"])):
            out = tmp / f"{toml.stem}-{label.replace(' ', '')}.json"
            _kvtui("run", str(toml), "--headless", "--fast", "--out", str(out), *sets)
            got[label] = measured(json.loads(out.read_text()))
        if not got["init"] or not got["20 s"]:
            bad.append(f"{model} on {gpu_label}")
            continue
        rows.append((model, gpu_label, sized, got["init"], got["20 s"]))
        print(f"{model} {gpu_label}: {got}", flush=True)
    out = ["# The window `kvtui init` writes, against the default 20 s (offline simulator, SIMULATED)", "",
           "Command: `PYTHONPATH=$PWD python bench/init_window.py --md bench/results/init_window.md`", "",
           "Default `kvtui init MODEL --gpu GPU` scenarios (2,048 + 256 tokens unless the GPU column says "
           "prompt+output, TTFT p95 ≤ 2 s, TPOT p95 ≤ 50 ms, "
           "warm-up 2 s), four modes `--fast`; each row measured twice in this run: with the window init wrote, "
           "and with `--set ramp.window_s=20`. Median step ÷ (warm-up + window); total: the comparison's steps, "
           "modelled seconds; whole requests: the median step's TPOT population (the births rule asks 80).", "",
           "| model | GPU | window (init) | median step ÷ (warm-up + window): 20 s → init | steps | total s "
           "| whole requests | knees (20 s; init) |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for model, gpu, sized, new, old in rows:
        w = f"**{new['window']:g} s**" if sized else f"{new['window']:g} s (default)"
        out.append(f"| {model} | {gpu} | {w} | {old['ratio']:.2f} → {new['ratio']:.2f} | {old['steps']} → "
                   f"{new['steps']} | {old['total']:.0f} → {new['total']:.0f} | {old['births']:.0f} → "
                   f"{new['births']:.0f} | {old['knees']}; {new['knees']} |")
    worst = max(r[3]["ratio"] for r in rows)
    out += ["", f"Worst median step with init's window: {worst:.2f} × (warm-up + window)."]
    if bad:
        out.append("Measured no step: " + ", ".join(bad))
    text = "\n".join(out) + "\n"
    print(text)
    if a.md:
        a.md.write_text(text, encoding="utf-8")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
