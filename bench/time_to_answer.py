"""Time to answer: per mode and per comparison, seconds split into start, measurement windows and
overhead, for the classic protocol and the continuous one (ramp.protocol), measured in one run.

The classic protocol was retired (issue 46): no run measures it now, so this bench only formats an
earlier run's snapshots (`--reuse DIR`, bench/results/time_to_answer.md was written that way);
without --reuse it says so and exits 2.

Two measurements, each before/after as a ratio:
- offline (`kvtui run --fast`, a default `kvtui init` scenario, 4 modes): modelled seconds;
- the live simulator over real HTTP, real wall-clock seconds, one mode, short windows, an SLO the
  window alone can judge (TTFT + ITL), so the continuous protocol's shorter tail shows.

    PYTHONPATH=$PWD python bench/time_to_answer.py --md bench/results/time_to_answer.md

Fails (exit 1) when a run measured no step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvtui.explore.run import Run  # noqa: E402
from kvtui.io.scenario.loader import load_scenario  # noqa: E402


def split(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Per mode: start, windows, overhead (s) and step figures; and the comparison's totals."""
    rows = []
    for m in doc["modes"]:
        steps = m.get("steps") or []
        if not steps:
            continue
        start = float((m.get("server") or {}).get("startup_s") or 0.0) if not steps[0].get("fast") else 0.0
        # in the units of duration_s: modelled offline, wall seconds live (a slow-motion simulator too)
        windows = sum(max(0.0, s["t_window_end"] - s["t_window_start"]) for s in steps)
        measured = sum(s["duration_s"] for s in steps)
        rows.append({"mode": m["name"], "knee": m.get("best_concurrency"), "steps": len(steps), "start": start,
                     "windows": windows, "overhead": measured - windows, "total": start + measured,
                     "median_step": statistics.median(s["duration_s"] for s in steps),
                     "early": sum(1 for s in steps if s.get("stopped_early")),
                     "drained": sum(1 for s in steps if (s.get("drain") or {"before": True})["before"])})
    tot = {k: sum(r[k] for r in rows) for k in ("start", "windows", "overhead", "total")}
    return rows, tot


REUSE: Path | None = None  # --reuse DIR: the snapshots of an earlier run of this bench, not measured again


# The protocols compared: (name, ramp.protocol, ramp.births). "continuous, whole tail" is the
# continuous protocol as it was before the births rule (kvtui/core/births.py): a step with a TPOT
# target held its load until every window request had finished.
VARIANTS = (("classic", "classic", True), ("continuous, whole tail", "continuous", False),
            ("continuous", "continuous", True))


def _file(name: str) -> str:
    return name.replace(", ", "-").replace(" ", "-")


def offline(tmp: Path, name: str, protocol: str, births: bool) -> dict[str, Any]:
    if REUSE is not None:
        return json.loads((REUSE / f"fast-{_file(name)}.json").read_text())
    sc = load_scenario(tmp / "s.toml")
    sc.ramp.protocol, sc.ramp.births = protocol, births
    return Run(sc, tmp / f"fast-{_file(name)}.json", fast=True).run()


def live(tmp: Path, name: str, protocol: str, births: bool = True,
         toml: str = "live.toml") -> tuple[dict[str, Any], float]:
    if REUSE is not None:
        doc = json.loads((REUSE / f"live-{_file(name)}.json").read_text())
        m = doc["modes"][0]
        return doc, m["finished_at"] - m["started_at"]
    sc = load_scenario(tmp / toml)
    sc.ramp.protocol, sc.ramp.births = protocol, births
    t = time.monotonic()
    doc = Run(sc, tmp / f"live-{_file(name)}.json").run()
    return doc, time.monotonic() - t


LIVE = """
name = "time-to-answer-live"
seed = 3
[server]
engine = "sim"
gpu = "H200"
model = "llama-3.1-8b"
max_model_len = 4096
[[modes]]
name = "fp8-kv"
kv_cache_dtype = "fp8"
[workload]
prompt_tokens = 512
output_tokens = 128
[ramp]
start = 16
max = 128
warmup_s = 1.0
window_s = 4.0
search = "fast"
confirm = false
[slo]
ttft_p95_ms = 400
itl_p95_ms = 60
"""


# The same, judged on TPOT (the births rule's case): the whole tail against the births cutoff.
LIVE_TPOT = LIVE.replace("itl_p95_ms = 60", "tpot_p95_ms = 15").replace("time-to-answer-live",
                                                                       "time-to-answer-live-tpot")


def table(title: str, rows: list[dict[str, Any]], unit: str) -> list[str]:
    out = [f"### {title}", "", f"| mode | knee | steps | start {unit} | windows {unit} | overhead {unit} "
           f"| total {unit} "
           f"| median step {unit} | stopped early | drained |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['mode']} | {r['knee']} | {r['steps']} | {r['start']:.1f} | {r['windows']:.1f} | "
                   f"{r['overhead']:.1f} | {r['total']:.1f} | {r['median_step']:.1f} | {r['early']} | {r['drained']} |")
    return out + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--md", type=Path)
    ap.add_argument("--no-live", action="store_true")
    ap.add_argument("--reuse", type=Path, help="format an earlier run's snapshots (DIR) instead of measuring")
    a = ap.parse_args(argv)
    global REUSE
    REUSE = a.reuse
    if REUSE is None:
        print("time_to_answer: the classic protocol was retired (issue 46) and no run measures it now: "
              "--reuse DIR formats an earlier run's snapshots", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="kvtui-tta-"))
    subprocess.run([sys.executable, "-m", "kvtui", "init", "llama-3.1-8b", "--engine", "sim", "--gpu", "H200",
                    "--out", str(tmp / "s.toml")], check=True, capture_output=True, cwd=ROOT)
    sc = load_scenario(tmp / "s.toml")
    per = sc.ramp.warmup_s + sc.ramp.window_s
    out = ["# Time to answer: classic against continuous steps (the whole tail, and the births rule)", "",
           "Command: `PYTHONPATH=$PWD python bench/time_to_answer.py --md bench/results/time_to_answer.md`", ""]
    summary = []
    docs = {name: offline(tmp, name, proto, births) for name, proto, births in VARIANTS}
    tots = {}
    for p, doc in docs.items():
        rows, tot = split(doc)
        if not rows:
            print(f"time_to_answer: the offline {p} run measured no step", file=sys.stderr)
            return 1
        tots[p] = (rows, tot)
        out += table(f"Offline simulator, {p} (SIMULATED, modelled seconds; default `kvtui init llama-3.1-8b "
                     f"--engine sim --gpu H200`, warm-up {sc.ramp.warmup_s:g} s + window {sc.ramp.window_s:g} s)",
                     rows, "s")
    med = {p: statistics.median(s["duration_s"] for m in doc["modes"] for s in m["steps"]) for p, doc in docs.items()}
    (ra, ta), (rw, tw), (rb, tb) = (tots[name] for name, _, _ in VARIANTS)
    summary += [f"- offline, comparison of {len(ra)} modes, classic → continuous with the whole tail → continuous: "
                f"{ta['total']:.0f} → {tw['total']:.0f} → {tb['total']:.0f} modelled s "
                f"(×{tw['total'] / ta['total']:.2f}, ×{tb['total'] / ta['total']:.2f}); windows {ta['windows']:.0f} → "
                f"{tw['windows']:.0f} → {tb['windows']:.0f}, overhead {ta['overhead']:.0f} → {tw['overhead']:.0f} → "
                f"{tb['overhead']:.0f}",
                "- offline, median step / (warm-up + window): "
                + " → ".join(f"{med[name] / per:.2f} ({name})" for name, _, _ in VARIANTS),
                "- offline knees (classic → whole tail → continuous): "
                + ", ".join(f"{x['mode']} {x['knee']:g} → {w['knee']:g} → {y['knee']:g}"
                            for x, w, y in zip(ra, rw, rb))]
    if not a.no_live:
        lt = tmp / "live.toml"
        lt.write_text(LIVE, encoding="utf-8")
        lrows = {}
        for p in ("classic", "continuous"):
            doc, wall = live(tmp, p, p)
            rows, tot = split(doc)
            if not rows:
                print(f"time_to_answer: the live {p} run measured no step", file=sys.stderr)
                return 1
            lrows[p] = (rows, tot, wall)
            out += table(f"Live simulator over HTTP, {p} (SIMULATED, wall seconds; TTFT p95 ≤ 400 ms, ITL p95 ≤ 60 "
                         f"ms, warm-up 1 s + window 4 s)", rows, "s")
        (_, la, wa), (_, lb, wb) = lrows["classic"], lrows["continuous"]
        summary += [f"- live simulator, one mode: {wa:.1f} → {wb:.1f} wall s (×{wb / wa:.2f}); overhead "
                    f"{la['overhead']:.1f} → {lb['overhead']:.1f} s (the tail waits for first tokens only)"]
        (tmp / "live-tpot.toml").write_text(LIVE_TPOT, encoding="utf-8")
        trows = {}
        for p, births in (("continuous, whole tail, TPOT", False), ("continuous, TPOT", True)):
            doc, wall = live(tmp, p, "continuous", births, "live-tpot.toml")
            rows, tot = split(doc)
            if not rows:
                print(f"time_to_answer: the live {p} run measured no step", file=sys.stderr)
                return 1
            trows[p] = (rows, tot, wall, statistics.median(s["duration_s"] for s in doc["modes"][0]["steps"]))
            out += table(f"Live simulator over HTTP, {p} (SIMULATED, wall seconds; TTFT p95 ≤ 400 ms, TPOT p95 ≤ 15 "
                         f"ms, warm-up 1 s + window 4 s)", rows, "s")
        (rw_, _, ww, mw), (rb_, _, wb2, mb) = trows["continuous, whole tail, TPOT"], trows["continuous, TPOT"]
        summary += [f"- live simulator, a TPOT SLO, one mode, the whole tail → the births rule: {ww:.1f} → {wb2:.1f} "
                    f"wall s (×{wb2 / ww:.2f}); median step {mw:.1f} → {mb:.1f} wall s (a simulator in slow motion: "
                    f"warm-up + window are 5 modelled s); "
                    f"knee {rw_[0]['knee']} → {rb_[0]['knee']}"]
    out += ["## Summary (ratios measured in this one run)", ""] + summary + [""]
    text = "\n".join(out)
    print(text)
    if a.md:
        a.md.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
