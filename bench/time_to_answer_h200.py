"""Time to answer on the H200, before and after, from the published snapshots (no GPU needed).

Each row is one archived run of docs/results (its device commands are in its .md): GPU seconds per
mode split into the server's start, the measurement windows and the rest of the steps (ramp,
warm-up, tail, drain), the median step, and per comparison the ratio against the first (careful)
run of the same workload and modes. The figures are the snapshots' own (`server.startup_s`, each step's
`duration_s` and window times), as scripts/h200_answer.sh's split prints them on the device; so are the
ramp settings each heading names (`scenario.ramp`: protocol, confirm_when), never a label typed here.
"step ÷ own" is each step's duration over its warm-up plus the window it really had (a window extended
to a request count, or a watch, is longer than `window_s`): the share of a step that is not measuring.

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

from kvtui.io.snapshot.file import load_snapshot  # noqa: E402

RESULTS = ROOT / "docs" / "results"
MODES = ("bf16", "fp8-kv", "fp8-w", "fp8-w+kv")
# What a snapshot does not hold: a step cut by a device call's end, and the start before it.
NOTES = {("8k / 512", "early", 4): "fp8-w+kv was also cut once by a call's end (one more start and a cut step, "
                                 "not in the snapshot: 484 s in all by h200-8k512-early.md, 1,113 s the comparison).",
         ("2k / 256", "doubt", 3): "fp8-w ran on another machine, at the end of the session's device time: its "
                                "last step (the repeat of the pass at its knee) was cut 16.1 s in, and its "
                                "server's start was the slowest seen (152 s; h200-2k256-doubt.md). The run was "
                                "meant to use confirm_when = \"doubt\"; the device script passed it to no shipped "
                                "scenario, so it ran the scenario's \"always\" (as the heading, read from the "
                                "snapshots, says). Re-evaluated under \"doubt\", none of its steps settles: it "
                                "would have repeated the same steps.",
         ("8k / 512, ITL p95 ≤ 100 ms", "careful", 2): "The device time ran out during fp8-kv's fifth step (a probe "
                                                     "of 18, cut 17.3 s in): no knee; its GPU seconds are a lower "
                                                     "bound. Its starts were compile-cache hits (the fast run's "
                                                     "cache), the fast run's misses or cold.",
         ("8k / 512, ITL p95 ≤ 100 ms", "fast", 4): "fp8-w+kv was cut by a call's end during its seventh step (20.4 s "
                                                  "in, not in the snapshot) and resumed: its GPU seconds count both "
                                                  "server starts (continued.startup_s), not the cut step "
                                                  "(h200-8k512-itl100.md: 1,129 s with it).",
         ("2k / 256", "careful", 4): "fp8-w+kv of the careful run (raw/h200-cont-fp8-wkv.json) was noisy and cut by "
                                  "a call's end before its confirmation: its 375 s are a lower bound, and the "
                                  "four-mode total with it."}
# (workload, run, how it was measured, the snapshots holding its modes: the first that has a mode wins)
RUNS: list[tuple[str, str, str, tuple[str, ...], tuple[str, ...]]] = [
    ("8k / 512", "careful", "continuous", ("h200-8k512", "h200-8k512-w"), MODES),
    ("8k / 512", "doubt", '+ confirm_when = "doubt"', ("h200-8k512-doubt",), MODES),
    ("8k / 512", "early", "+ the preemption stop, settled passes", ("h200-8k512-early",), MODES),
    ("8k / 512", "watch", "+ the KV wall's noisy side watched", ("h200-8k512-watch",), MODES),
    ("2k / 256", "careful", "continuous", ("h200-cont",), ("bf16", "fp8-kv", "fp8-w")),
    ("2k / 256", "doubt", "+ births rule, confirmation order",
     ("h200-2k256-doubt", "h200-2k256-doubt-w"), ("bf16", "fp8-kv", "fp8-w")),
    ("2k / 256", "careful", "continuous", ("h200-cont", "raw/h200-cont-fp8-wkv"), MODES),
    ("2k / 256", "four", "+ births rule, confirmation order, settled steps, one session",
     ("h200-2k256-four",), MODES),
    ("8k / 512, ITL p95 ≤ 100 ms", "careful", "continuous", ("h200-8k512-itl100-careful",), ("bf16", "fp8-kv")),
    ("8k / 512, ITL p95 ≤ 100 ms", "fast", "+ births rule, confirmation order, settled steps",
     ("h200-8k512-itl100",), ("bf16", "fp8-kv")),
    ("8k / 512, ITL p95 ≤ 100 ms", "fast", "+ births rule, confirmation order, settled steps, one session",
     ("h200-8k512-itl100",), MODES),
]


def mode_split(m: dict, warmup_s: float) -> dict[str, float]:
    steps = m.get("steps") or []
    if not steps:
        raise SystemExit(f"time_to_answer_h200: mode {m.get('name')} holds no step: nothing measured")
    # every server started for the mode: its own, and those of the runs a --resume continued it from
    start = float((m.get("server") or {}).get("startup_s") or 0.0) + sum(
        float(x) for x in (m.get("continued") or {}).get("startup_s") or [])
    windows = sum(float(s["t_window_end"]) - float(s["t_window_start"]) for s in steps)
    meas = sum(float(s["duration_s"]) for s in steps)
    return {"steps": len(steps), "start": start, "windows": windows, "overhead": meas - windows,
            "total": start + meas, "median": statistics.median(float(s["duration_s"]) for s in steps),
            "knee": m.get("best_concurrency"), "durations": [float(s["duration_s"]) for s in steps],
            # each step against its own measuring time: warm-up plus the window it really had
            "own": [float(s["duration_s"]) / (warmup_s + float(s["t_window_end"]) - float(s["t_window_start"]))
                    for s in steps]}


def ran_with(docs: list[dict]) -> str:
    """The ramp settings the snapshots ran with, as they recorded them."""
    def one(ramp: dict) -> str:
        cw = ramp.get("confirm_when")
        # snapshots older than the field confirmed every knee, as "always" does now
        return (f"protocol {ramp.get('protocol')}, "
                + (f'confirm_when = "{cw}"' if cw else "no confirm_when (older than the field: every knee confirmed)"))
    seen = sorted({one(d["scenario"]["ramp"]) for d in docs})
    return " / ".join(seen)


def run_split(files: tuple[str, ...], modes: tuple[str, ...]) -> tuple[dict[str, dict], str]:
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
        doc = next(d for d in docs if m in d["modes"])
        out[name] = mode_split(m, float(doc["scenario"]["ramp"].get("warmup_s") or 0.0))
    return out, ran_with(docs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--md", type=Path, help="write the table here too")
    args = ap.parse_args()
    lines = ["# Time to answer on the H200, before and after (from the published snapshots)", "",
             "`python bench/time_to_answer_h200.py --md bench/results/time_to_answer_h200.md`: one H200, vLLM "
             "0.26.0, the 8B shape with dummy weights. GPU seconds per mode: the server's start, the "
             "measurement windows, and the rest of the steps (ramp, warm-up, tail, drain). Each run's device "
             "commands are in docs/results/RUN.md (RUN: the first snapshot named). Each heading's \"ran\" is "
             "read from the snapshots' `scenario.ramp`. *Median step ÷ own*: the median over steps of a step's "
             "duration over its warm-up plus the window it really had (extended to a request count, or "
             "watched): issue 28 asks for a median step ≤ 1.5 × (warm-up + window_s); this reads that against "
             "each step's own window.", ""]
    base: dict[tuple[str, tuple[str, ...]], float] = {}
    for workload, run, how, files, modes in RUNS:
        split, ran = run_split(files, modes)
        lines += [f"## {workload}, {len(modes)} modes: {run} ({how}; ran {ran}; "
                  f"{', '.join(f + '.json' for f in files)})", "",
                  "| mode | knee | steps | start s | windows s | other s | GPU s | median step s | steps s |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for name, s in split.items():
            knee = "—" if s["knee"] is None else f"{s['knee']:g}"
            lines.append(f"| {name} | {knee} | {s['steps']} | {s['start']:.0f} | {s['windows']:.0f} | "
                         f"{s['overhead']:.0f} | {s['total']:.0f} | {s['median']:.1f} | "
                         f"{', '.join(f'{d:.1f}' for d in s['durations'])} |")
        total = sum(s["total"] for s in split.values())
        median = statistics.median(d for s in split.values() for d in s["durations"])
        own = statistics.median(r for s in split.values() for r in s["own"])
        key = (workload, modes)
        base.setdefault(key, total)
        lines += ["", f"{len(split)} modes: **{total:.0f} GPU s ({total / 60:.1f} min)**, ×{total / base[key]:.2f} "
                  f"the careful run; start {sum(s['start'] for s in split.values()):.0f} s, windows "
                  f"{sum(s['windows'] for s in split.values()):.0f} s, other "
                  f"{sum(s['overhead'] for s in split.values()):.0f} s; median step {median:.1f} s over "
                  f"{sum(s['steps'] for s in split.values())} steps, median step ÷ own {own:.2f}.", ""]
        if (workload, run, len(modes)) in NOTES:
            lines += [NOTES[(workload, run, len(modes))], ""]
    text = "\n".join(lines)
    print(text)
    if args.md:
        args.md.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
