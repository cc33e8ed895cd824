"""The window-only estimator (kvtui/core/window_stats.py) against full-completion statistics.

For every judged step of the published H200 runs (docs/results/*.json.xz with their records,
read through kvtui's own readers) and of offline-simulator steps, the p95 of TTFT, TPOT and ITL
two ways: over the complete requests that started in the window (the classic held tail), and
from the window alone (every request cut at the window's end, counted by its gaps so far). And
TPOT under the "births" tail rule (kvtui/core/births.py, what a continuous step with a TPOT or E2E
target measures): over the complete window requests sent by one request's duration before the
window's end (at least 80: births.SAMPLE_FACTOR × the classic 40), with the tail that rule holds. It
prints the relative error per step and their spread, and whether the verdict would differ, and
fails (exit 1) when it measured nothing or when the error is beyond the bound it states.

    PYTHONPATH=$PWD python bench/window_estimator.py            # published H200 runs + simulator
    PYTHONPATH=$PWD python bench/window_estimator.py --md bench/results/window_estimator.md

The published runs' records archives left the tree (docs/RESULTS.md); restore them first:
    git checkout 5cedb2d -- 'docs/results/*.records.jsonl.cols.xz'
"""

from __future__ import annotations

import argparse
import json
import lzma
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvtui.core.stats import percentile  # noqa: E402
from kvtui.core.window_stats import gap_coverage, window_samples  # noqa: E402
from kvtui.core.births import births_cutoff  # noqa: E402
from kvtui.core.record import Record  # noqa: E402
from kvtui.io.records import read_records  # noqa: E402

METRICS = ("ttft", "tpot", "itl")
# TTFT and ITL go from the window alone; TPOT (and E2E) keep the tail, so only the first two must be
# unbiased for the protocol to be right (the run fails if they are not).
GATED = ("ttft", "itl")
BOUND = 0.02  # |window p95 / full p95 - 1| the issue asks for, per step (median over steps, see below)
MIN_REQUESTS = 40
FILL = "mean"  # a step with fewer window requests has no meaningful p95 either way


def _p95(xs: list[float]) -> float | None:
    return percentile(sorted(xs), 0.95) if len(xs) >= 40 else None


def full_samples(recs: list[Record]) -> dict[str, list[float]]:
    ok = [r for r in recs if r.phase == "window" and r.ok]
    return {"ttft": [r.ttft for r in ok if r.ttft is not None],
            "tpot": [r.tpot for r in ok if r.tpot is not None],
            "itl": [g for r in ok for g in r.itl]}


def births_p95(recs: list[Record], t1: float, e2e_est: float | None) -> tuple[float | None, int, float | None]:
    """TPOT p95 under the "births" tail rule (kvtui.core.births): over the complete window requests
    sent by one request's duration before the window's end. (p95 s, requests, its tail s: when the
    last of them ended, or the last window request had its first token, after the window's end)."""
    win = [r for r in recs if r.phase == "window"]
    if e2e_est is None:
        ends = sorted(r.e2e for r in win if r.ok and r.e2e is not None)
        e2e_est = ends[len(ends) // 2] if ends else None
    cut = births_cutoff(t1, e2e_est, (r.t_intended for r in win), MIN_REQUESTS)
    if cut is None:
        return None, 0, None
    xs = [r.tpot for r in win if r.ok and r.tpot is not None and r.t_intended <= cut]
    ends = [r.t_last for r in win if r.ok and r.t_last is not None and r.t_intended <= cut]
    ends += [r.t_first for r in win if r.t_first is not None]
    return _p95(xs), len(xs), max(0.0, max(ends, default=t1) - t1)


def compare(recs: list[Record], t0: float, t1: float, scale: float = 1.0,
            e2e_est: float | None = None) -> dict[str, Any] | None:
    win = [r for r in recs if r.phase == "window"]
    if len(win) < MIN_REQUESTS:
        return None
    inside = sum(1 for r in win if t0 <= r.t_sent <= t1)
    if inside < len(win) / 2:
        # A step whose window times are on another clock than its records (a resumed run's
        # carried steps): the window re-based on its first window request.
        t0, t1 = min(r.t_sent for r in win), min(r.t_sent for r in win) + (t1 - t0)
    full = full_samples(recs)
    t_cut = t1  # every request cut at the window's end: the estimator at its most demanding
    w = window_samples(recs, t0, t1, t_end=t_cut, time_scale=scale, fill=FILL)
    est = {"ttft": w.ttft, "tpot": w.tpot, "itl": w.itl}
    row: dict[str, Any] = {"requests": len(win), "cut": w.cut, "coverage": gap_coverage(win, t1),
                           "full_tail_s": (max(((r.t_last or t1) for r in win if r.ok), default=t1) - t1) / scale}
    for m in METRICS:
        a, b = _p95([x / scale for x in full[m]]), _p95(est[m])
        row[m] = (a, b, (b / a - 1) if a and b else None)
    if any(r.t_intended < t0 - 1e-6 for r in win):  # re-based window (above): send times off this clock
        row["births"] = (None, 0, None)
        row["births_tail_s"] = None
        return row
    bp, bn, tail = births_p95(recs, t1, e2e_est)
    a = row["tpot"][0]
    bp = bp / scale if bp is not None else None
    row["births"] = (bp, bn, (bp / a - 1) if a and bp else None)
    row["births_tail_s"] = None if tail is None else tail / scale
    return row


def published(results: Path) -> list[tuple[str, dict[str, Any]]]:
    rows = []
    for snap in sorted(results.glob("*.json.xz")):
        doc = json.loads(lzma.open(snap).read())
        if not doc.get("records"):
            continue
        rpath = snap.with_name(doc["records"])
        try:
            recs = list(read_records(rpath))
        except OSError:
            continue
        by: dict[tuple[str, int], list[Record]] = {}
        for r in recs:
            by.setdefault((r.mode, r.step), []).append(r)
        for m in doc.get("modes") or []:
            for st in m.get("steps") or []:
                if st.get("t_window_start") is None or st.get("passed") is None:
                    continue
                est = (st.get("ramp") or {}).get("e2e_est_s")
                row = compare(by.get((m["name"], st["index"]), []), st["t_window_start"], st["t_window_end"],
                              st.get("time_scale") or 1.0,
                              est * (st.get("time_scale") or 1.0) if isinstance(est, (int, float)) else None)
                if row is not None:
                    row["passed"] = st["passed"]
                    row["protocol"] = st.get("protocol") or "classic"
                    rows.append((f"{snap.name.split('.')[0]} {m['name']} c={st['load']:g}", row))
    return rows


def simulated() -> list[tuple[str, dict[str, Any]]]:
    """Steps of the offline simulator (kvtui's fast client, complete requests) on the 8B shape."""
    from kvtui.simulator.model import catalog
    from kvtui.simulator.engine.fast import simulate_step
    from kvtui.simulator.engine.scheduler import SchedulerSim
    from kvtui.io.scenario.schema import Mode, Server

    rows = []
    for kv, prompt, out, loads in (("auto", 2048, 256, (32, 96, 160)), ("fp8", 8192, 512, (16, 48, 80))):
        srv = Server(engine="sim", model="llama-3.1-8b", gpu="H200", max_model_len=prompt + out + 16)
        mode = Mode(name=f"kv-{kv}", kv_cache_dtype=kv)
        for load in loads:
            sched = SchedulerSim(catalog.load_model("llama-3.1-8b"), catalog.load_gpu("H200"), mode, srv, seed=1)
            res = simulate_step(sched, lambda i: (prompt, out), load, True, 5.0, 20.0, seed=7, mode_name=mode.name)
            row = compare(res.records, res.window_start or 0.0, res.window_end or 0.0)
            if row is not None:
                rows.append((f"sim {mode.name} {prompt}/{out} c={load}", row))
    return rows


def _fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "—"
    return f"{x * 100:+.1f} %" if pct else f"{x * 1000:.1f}"


def report(rows: list[tuple[str, dict[str, Any]]], title: str) -> tuple[list[str], dict[str, list[float]]]:
    lines = [f"### {title}", "", "| step | window requests | cut | gaps seen at the window's end | classic tail s | "
             + " | ".join(f"{m} p95 full → window (ms)" for m in METRICS)
             + " | tpot p95 full → births (ms, requests) | births tail s |",
             "|---|---:|---:|---:|---:|" + "---|" * (len(METRICS) + 1) + "---:|"]
    errs: dict[str, list[float]] = {m: [] for m in METRICS + ("births",)}
    for name, row in rows:
        cells = []
        for m in METRICS:
            a, b, e = row[m]
            if e is not None:
                errs[m].append(e)
            cells.append(f"{_fmt(a)} → {_fmt(b)} ({_fmt(e, True)})")
        bp, bn, be = row["births"]
        if be is not None:
            errs["births"].append(be)
        cells.append(f"{_fmt(row['tpot'][0])} → {_fmt(bp)} ({_fmt(be, True)}, {bn})" if bp is not None
                     else "no cutoff")
        bt = row.get("births_tail_s")
        cells.append(f"{bt:.1f}" if bp is not None and bt is not None else "—")
        lines.append(f"| {name} | {row['requests']} | {row['cut']} | {row['coverage']:.0%} | "
                     f"{row['full_tail_s']:.1f} | " + " | ".join(cells) + " |")
    lines.append("")
    for m in METRICS + ("births",):
        if errs[m]:
            e = errs[m]
            lines.append(f"- {m} p95: median error {statistics.median(e) * 100:+.2f} %, "
                         f"worst {max(e, key=abs) * 100:+.2f} %, "
                         f"within 2 %: {sum(abs(x) <= BOUND for x in e)}/{len(e)}")
    lines.append("")
    return lines, errs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--md", type=Path, help="write the report here too")
    ap.add_argument("--no-sim", action="store_true")
    ap.add_argument("--fill", default="mean", choices=("resample", "mean", "none"),
                    help="how a cut request's unseen gaps count in its TPOT (kvtui/core/window_stats.py)")
    a = ap.parse_args(argv)
    global FILL
    FILL = a.fill
    pub = published(a.results)
    sim = [] if a.no_sim else simulated()
    if not pub and not sim:
        print("window_estimator: measured nothing (no published records, no simulator steps)", file=sys.stderr)
        return 1
    out = ["# The window-only estimator against full completion", "",
           "Command: `PYTHONPATH=$PWD python bench/window_estimator.py --md bench/results/window_estimator.md`", "",
           "Each step's p95 over the complete requests that started in its window (the classic held "
           "tail) against the same p95 from the window alone (kvtui/core/window_stats.py: every request "
           "cut at the window's end, TPOT by its gaps so far, ITL from gaps that arrived in the window). "
           "Error = window / full − 1. The last two columns: TPOT p95 under the births tail rule "
           "(kvtui/core/births.py: the complete window requests sent by one request's duration before the "
           "window's end, the step's own ramp estimate where it has one, else its E2E p50; at least 80) "
           "against the full tail, and how long after the window's end that rule holds the load (the "
           "classic tail column holds it until every window request ended).", ""]
    verdict_ok = True
    all_errs: dict[str, list[float]] = {m: [] for m in METRICS + ("births",)}
    for rows, title in ((pub, "Published H200 runs (docs/results, vLLM, real GPU)"),
                        (sim, "Offline simulator (SIMULATED, H200 catalogue, 8B shape)")):
        if not rows:
            continue
        lines, errs = report(rows, title)
        out += lines
        for m in METRICS + ("births",):
            all_errs[m] += errs[m]
    n = sum(len(v) for v in all_errs.values())
    if not n:
        print("window_estimator: no step had enough samples on both sides", file=sys.stderr)
        return 1
    out.append("## Summary")
    out.append("")
    for m in METRICS + ("births",):
        e = all_errs[m]
        if not e:
            continue
        med = statistics.median(e)
        if m == "births":
            inside = sum(abs(x) <= BOUND for x in e)
            out.append(f"- **tpot p95 under the births rule** (kvtui/core/births.py: the complete window requests "
                       f"sent by one request's duration before the window's end) against every window request "
                       f"run to its end, over {len(e)} steps: median {med * 100:+.2f} %, worst "
                       f"{max(e, key=abs) * 100:+.2f} %, {inside}/{len(e)} within 2 %, "
                       f"{sum(abs(x) <= 0.05 for x in e)}/{len(e)} within 5 %. Not an estimate of cut requests: "
                       "the same whole-request TPOT over fewer requests, chosen by send time; the spread is "
                       "that of a smaller sample of one step.")
            cont = [r for rows, _t in ((pub, ""),) for _n, r in rows
                    if r.get("protocol") == "continuous" and r["births"][2] is not None]
            if cont:
                ce = [r["births"][2] for r in cont]
                tails = [r["births_tail_s"] for r in cont if r.get("births_tail_s") is not None]
                full = [r["full_tail_s"] for r in cont]
                out.append(f"  - on the {len(cont)} published H200 steps the continuous protocol measured (the steady "
                           f"state the rule runs on): median {statistics.median(ce) * 100:+.2f} %, worst "
                           f"{max(ce, key=abs) * 100:+.2f} %, {sum(abs(x) <= BOUND for x in ce)}/{len(ce)} within "
                           f"2 %; the tail held after the window: median {statistics.median(full):.1f} s with every "
                           f"window request run to its end, {statistics.median(tails):.1f} s under the births rule.")
            if abs(med) > BOUND:
                verdict_ok = False
            continue
        inside = sum(abs(x) <= BOUND for x in e)
        out.append(f"- **{m} p95** over {len(e)} steps: median {med * 100:+.2f} %, "
                   f"worst {max(e, key=abs) * 100:+.2f} %,"
                   f" {inside}/{len(e)} within 2 %")
        if m in GATED and abs(med) > BOUND:
            verdict_ok = False
        if m not in GATED:
            out.append(f"  - {m} is biased from the window alone (see above): a step whose SLO judges it counts "
                       "whole requests only (the births rule below, kvtui/core/window_stats.py tail_rule).")
    text = "\n".join(out) + "\n"
    print(text)
    if a.md:
        a.md.write_text(text, encoding="utf-8")
    if not verdict_ok:
        print("window_estimator: a median TTFT, ITL or births-TPOT error beyond 2 %: biased", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
