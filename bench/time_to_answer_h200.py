"""Time to answer on the H200, before and after, from the published snapshots (no GPU needed).

Each row is one archived run of docs/results (its device commands are in its .md): GPU seconds per
mode split into the server's start, the measurement windows and the rest of the steps (ramp,
warm-up, tail, drain), the median step, and per comparison the ratio against the first (careful)
run of the same workload. The figures are the snapshots' own (`server.startup_s`, each step's
`duration_s` and window times), as scripts/h200_answer.sh's split prints them on the device.

    python bench/time_to_answer_h200.py [--md bench/results/time_to_answer_h200.md]

Fails (exit 1) when a snapshot is missing or a mode it names holds no step: it measured nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvtui.snapshot.file import load_snapshot  # noqa: E402

RESULTS = ROOT / "docs" / "results"
MODES = ("bf16", "fp8-kv", "fp8-w", "fp8-w+kv")
# What a snapshot does not hold: a step cut by a device call's end, and the start before it.
NOTES = {("8k / 512", "early"): "fp8-w+kv was also cut once by a call's end (one more start and a cut step, "
                                 "not in the snapshot: 484 s in all by h200-8k512-early.md, 1,113 s the comparison).",
         ("2k / 256", "doubt"): "fp8-w ran on another machine, at the end of the session's device time: its "
                                "last step (the repeat of the pass at its knee) was cut 16.1 s in, and its "
                                "server's start was the slowest seen (152 s; h200-2k256-doubt.md)."}
# (workload, run, how it was measured, the snapshots holding its modes: the first that has a mode wins)
RUNS: list[tuple[str, str, str, tuple[str, ...], tuple[str, ...]]] = [
    ("8k / 512", "careful", 'continuous, confirm_when = "always"', ("h200-8k512", "h200-8k512-w"), MODES),
    ("8k / 512", "doubt", '+ confirm_when = "doubt"', ("h200-8k512-doubt",), MODES),
    ("8k / 512", "early", "+ the preemption stop, settled passes", ("h200-8k512-early",), MODES),
    ("8k / 512", "watch", "+ the KV wall's noisy side watched", ("h200-8k512-watch",), MODES),
    ("2k / 256", "careful", 'continuous, confirm_when = "always"', ("h200-cont",), ("bf16", "fp8-kv", "fp8-w")),
    ("2k / 256", "doubt", '+ births rule, confirmation order, confirm_when = "doubt"',
     ("h200-2k256-doubt", "h200-2k256-doubt-w"), ("bf16", "fp8-kv", "fp8-w")),
]


def mode_split(m: dict) -> dict[str, float]:
    steps = m.get("steps") or []
    if not steps:
        raise SystemExit(f"time_to_answer_h200: mode {m.get('name')} holds no step: nothing measured")
    start = float((m.get("server") or {}).get("startup_s") or 0.0)
    windows = sum(float(s["t_window_end"]) - float(s["t_window_start"]) for s in steps)
    meas = sum(float(s["duration_s"]) for s in steps)
    return {"steps": len(steps), "start": start, "windows": windows, "overhead": meas - windows,
            "total": start + meas, "median": statistics.median(float(s["duration_s"]) for s in steps),
            "knee": m.get("best_concurrency"), "durations": [float(s["duration_s"]) for s in steps]}


def run_split(files: tuple[str, ...], modes: tuple[str, ...]) -> dict[str, dict[str, float]]:
    docs = []
    for f in files:
        path = RESULTS / f"{f}.json.xz"
        if not path.is_file():
            raise SystemExit(f"time_to_answer_h200: {path} is missing")
        docs.append(load_snapshot(path))
    out = {}
    for name in modes:
        m = next((m for d in docs for m in d["modes"] if m["name"] == name and m.get("steps")), None)
        if m is None:
            raise SystemExit(f"time_to_answer_h200: no steps for {name} in {', '.join(files)}")
        out[name] = mode_split(m)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--md", type=Path, help="write the table here too")
    args = ap.parse_args()
    lines = ["# Time to answer on the H200, before and after (from the published snapshots)", "",
             "`python bench/time_to_answer_h200.py --md bench/results/time_to_answer_h200.md`: one H200, vLLM "
             "0.26.0, the 8B shape with dummy weights. GPU seconds per mode: the server's start, the "
             "measurement windows, and the rest of the steps (ramp, warm-up, tail, drain). Each run's device "
             "commands are in docs/results/RUN.md (RUN: the first snapshot named).", ""]
    base: dict[str, float] = {}
    for workload, run, how, files, modes in RUNS:
        split = run_split(files, modes)
        lines += [f"## {workload}: {run} ({how}; {', '.join(f + '.json' for f in files)})", "",
                  "| mode | knee | steps | start s | windows s | other s | GPU s | median step s | steps s |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for name, s in split.items():
            lines.append(f"| {name} | {s['knee']:g} | {s['steps']} | {s['start']:.0f} | {s['windows']:.0f} | "
                         f"{s['overhead']:.0f} | {s['total']:.0f} | {s['median']:.1f} | "
                         f"{', '.join(f'{d:.1f}' for d in s['durations'])} |")
        total = sum(s["total"] for s in split.values())
        median = statistics.median(d for s in split.values() for d in s["durations"])
        base.setdefault(workload, total)
        lines += ["", f"{len(split)} modes: **{total:.0f} GPU s ({total / 60:.1f} min)**, ×{total / base[workload]:.2f} "
                  f"the careful run; start {sum(s['start'] for s in split.values()):.0f} s, windows "
                  f"{sum(s['windows'] for s in split.values()):.0f} s, other "
                  f"{sum(s['overhead'] for s in split.values()):.0f} s; median step {median:.1f} s over "
                  f"{sum(s['steps'] for s in split.values())} steps.", ""]
        if (workload, run) in NOTES:
            lines += [NOTES[(workload, run)], ""]
    text = "\n".join(lines)
    print(text)
    if args.md:
        args.md.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
