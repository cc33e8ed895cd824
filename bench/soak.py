"""Soak: hold the simulator at its knee for a long time and watch kvtui's own memory and CPU.

    python bench/soak.py [--minutes 30] [--scenario kvtui/data/scenarios/sim-demo.toml] [--mode fp8-kv]
                         [--load N] [--sample-s 10] [--out runs/soak]

What it does:
1. finds the knee of the chosen mode offline (`Run(fast=True)`, the same search as `kvtui run
   --fast`), unless --load is given;
2. runs that mode for real (a `kvtui sim serve` process over HTTP, the load generator's worker
   processes, the telemetry thread, the journal) with the ramp pinned to the knee and the run's
   `hold` control on, so step after step is measured at the same load until --minutes pass;
3. samples, every --sample-s seconds, from /proc (psutil is not a kvtui dependency): RSS, CPU
   seconds, threads and open files of the controller (this process: the Run, the telemetry
   thread, the snapshot writer) and of the load-generator workers, and the simulator's for
   reference.

Writes <out>/soak.json (samples + summary) and <out>/run.json (the run's snapshot, its records
beside it), and prints the summary as Markdown (docs/SOAK.md keeps the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvtui.explore.run import Run  # noqa: E402
from kvtui.io.scenario import load_scenario  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


# --------------------------------------------------------------------------- /proc readers


def _stat(pid: int) -> tuple[int, int, float, int] | None:
    """(ppid, pgrp, cpu seconds user+system, threads) from /proc/PID/stat."""
    try:
        s = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = s[s.rfind(")") + 2:].split()
    # rest[0]=state [1]=ppid [2]=pgrp … [11]=utime [12]=stime … [17]=num_threads
    return int(rest[1]), int(rest[2]), (int(rest[11]) + int(rest[12])) / TICK, int(rest[17])


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            st = _stat(int(d.name))
            if st and st[0] == pid:
                out.append(int(d.name))
    return out


def _sample_group(pids: list[int]) -> dict:
    rss = cpu = threads = fds = 0
    for p in pids:
        st, r, f = _stat(p), _rss_kib(p), _fds(p)
        if st is None or r is None:
            continue
        rss += r
        cpu += st[2]
        threads += st[3]
        fds += f or 0
    return {"pids": len(pids), "rss_kib": rss, "cpu_s": round(cpu, 2), "threads": threads, "fds": fds}


def sample(t0: float, run: Run, steps: list[dict]) -> dict:
    me = os.getpid()
    kids = _children(me)
    workers = [p for p in kids if "multiprocessing" in _cmdline(p)]
    sims = [p for p in kids if "sim serve" in _cmdline(p)]
    return {
        "t": round(time.monotonic() - t0, 1),
        "controller": _sample_group([me]),
        "workers": _sample_group(workers),
        "simulator": _sample_group(sims),
        "steps": len(steps),
        "records": run.records_written,
    }


# --------------------------------------------------------------------------- summary


def _slope_per_min(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return (sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den) * 60 if den else 0.0


def summarise(samples: list[dict], steps: list[dict], settle_s: float) -> dict:
    late = [s for s in samples if s["t"] >= settle_s] or samples
    out: dict = {"samples": len(samples), "settle_s": settle_s, "duration_s": samples[-1]["t"] if samples else 0}
    for who in ("controller", "workers", "simulator"):
        rss = [s[who]["rss_kib"] / 1024 for s in late]
        ts = [s["t"] for s in late]
        q = max(1, len(late) // 4)
        first, last = late[:q], late[-q:]

        def cpu_share(part: list[dict]) -> float | None:
            if len(part) < 2 or part[-1]["t"] <= part[0]["t"]:
                return None
            return round((part[-1][who]["cpu_s"] - part[0][who]["cpu_s"]) / (part[-1]["t"] - part[0]["t"]) * 100, 1)

        out[who] = {
            "rss_mib_at_settle": round(rss[0], 1) if rss else None,
            "rss_mib_end": round(rss[-1], 1) if rss else None,
            "rss_mib_min": round(min(rss), 1) if rss else None,
            "rss_mib_max": round(max(rss), 1) if rss else None,
            "rss_slope_mib_per_hour": round(_slope_per_min(ts, rss) * 60, 2),
            "cpu_pct_first_quarter": cpu_share(first),
            "cpu_pct_last_quarter": cpu_share(last),
            "threads_min_max": [min(s[who]["threads"] for s in late), max(s[who]["threads"] for s in late)] if late else None,
            "fds_min_max": [min(s[who]["fds"] for s in late), max(s[who]["fds"] for s in late)] if late else None,
        }
    if steps:
        q = max(1, len(steps) // 10)

        def med(vals: list[float]) -> float | None:
            vals = sorted(v for v in vals if isinstance(v, (int, float)))
            return round(vals[len(vals) // 2], 1) if vals else None

        out["steps"] = {
            "count": len(steps),
            "passed": sum(1 for s in steps if s.get("passed")),
            "errors": sum(s.get("errors", 0) for s in steps),
            "requests": sum(s.get("requests", 0) for s in steps),
            "tpot_p95_ms_first_decile_median": med([s["tpot_ms"].get("p95") for s in steps[:q]]),
            "tpot_p95_ms_last_decile_median": med([s["tpot_ms"].get("p95") for s in steps[-q:]]),
            "ttft_p95_ms_first_decile_median": med([s["ttft_ms"].get("p95") for s in steps[:q]]),
            "ttft_p95_ms_last_decile_median": med([s["ttft_ms"].get("p95") for s in steps[-q:]]),
            "output_tok_s_first_decile_median": med([s.get("output_tok_s") for s in steps[:q]]),
            "output_tok_s_last_decile_median": med([s.get("output_tok_s") for s in steps[-q:]]),
            "client_cpu_share_max": max((s.get("client", {}) or {}).get("cpu_share", 0) or 0 for s in steps)
            if isinstance(steps[0].get("client"), dict) else None,
        }
    return out


def markdown(summary: dict, meta: dict) -> str:
    lines = [f"Soak: {meta['scenario']} mode {meta['mode']} held at {meta['load']:g} for {summary['duration_s'] / 60:.1f} min "
             f"({meta['host']}, {meta['cpus']} CPUs, Python {meta['python']})", "",
             "| process | RSS after settle MiB | RSS end MiB | min–max MiB | slope MiB/h | CPU % first ¼ | CPU % last ¼ | threads | fds |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for who in ("controller", "workers", "simulator"):
        s = summary[who]
        lines.append(f"| {who} | {s['rss_mib_at_settle']} | {s['rss_mib_end']} | {s['rss_mib_min']}–{s['rss_mib_max']} | "
                     f"{s['rss_slope_mib_per_hour']:+.2f} | {s['cpu_pct_first_quarter']} | {s['cpu_pct_last_quarter']} | "
                     f"{s['threads_min_max']} | {s['fds_min_max']} |")
    st = summary.get("steps")
    if st:
        lines += ["", f"Steps: {st['count']} ({st['passed']} passed), {st['requests']} window requests, {st['errors']} errors; "
                  f"TPOT p95 median {st['tpot_p95_ms_first_decile_median']} → {st['tpot_p95_ms_last_decile_median']} ms, "
                  f"TTFT p95 median {st['ttft_p95_ms_first_decile_median']} → {st['ttft_p95_ms_last_decile_median']} ms, "
                  f"output tok/s median {st['output_tok_s_first_decile_median']} → {st['output_tok_s_last_decile_median']} "
                  "(first → last tenth of the steps)."]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def find_knee(scenario_path: str, mode: str, out: Path) -> float:
    sc = load_scenario(scenario_path)
    doc = Run(sc, out / "knee-fast.json", modes=[mode], fast=True).run()
    best = doc["modes"][0]["best_concurrency"]
    if not best:
        raise SystemExit(f"soak: no passing load for mode {mode} in {scenario_path}")
    return float(best)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--scenario", default=str(ROOT / "kvtui" / "data" / "scenarios" / "sim-demo.toml"))
    ap.add_argument("--mode", default="fp8-kv")
    ap.add_argument("--load", type=float, help="concurrency to hold (default: the mode's knee, found offline)")
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--settle-min", type=float, default=3.0, help="minutes left out of the growth figures (imports, pools, caches)")
    ap.add_argument("--out", default=str(ROOT / "runs" / "soak"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    load = a.load or find_knee(a.scenario, a.mode, out)
    sc = load_scenario(a.scenario, [f"ramp.start={load:g}", f"ramp.max={load:g}", "ramp.step=\"+1\"", "ramp.search=\"linear\""])
    steps: list[dict] = []
    log = (out / "steps.log").open("w")

    def listener(ev) -> None:
        if ev.kind == "step_finished":
            steps.append(ev.data)
            d = ev.data
            log.write(f"{time.strftime('%H:%M:%S')} step {d['index']} c={d['load']:g} n={d['requests']} "
                      f"tpot_p95={d['tpot_ms'].get('p95')} ttft_p95={d['ttft_ms'].get('p95')} errors={d['errors']} passed={d['passed']}\n")
            log.flush()
        elif ev.kind in ("warning", "error"):
            log.write(f"{time.strftime('%H:%M:%S')} {ev.kind}: {ev.data}\n")
            log.flush()

    run = Run(sc, out / "run.json", modes=[a.mode], listener=listener)
    run.hold(True)  # after the first step: the same load again and again
    meta = {"scenario": Path(a.scenario).name, "mode": a.mode, "load": load, "minutes": a.minutes, "host": platform.node(),
            "cpus": os.cpu_count(), "python": platform.python_version(), "command": " ".join(sys.argv),
            "started_at": time.strftime("%Y-%m-%d %H:%M:%S")}
    err: list[BaseException] = []

    def go() -> None:
        try:
            run.run()
        except BaseException as e:  # noqa: BLE001 - reported below
            err.append(e)

    t0 = time.monotonic()
    th = threading.Thread(target=go, name="soak-run")
    th.start()
    samples: list[dict] = []
    deadline = t0 + a.minutes * 60
    while th.is_alive() and time.monotonic() < deadline:
        samples.append(sample(t0, run, steps))
        th.join(a.sample_s)
    run.stop("soak finished")
    th.join(300)
    log.close()
    if err:
        raise err[0]
    measured = [s for s in steps if not s.get("aborted")]  # the step cut by the stop at the end
    summary = summarise(samples, measured, a.settle_min * 60)
    (out / "soak.json").write_text(json.dumps({"meta": meta, "summary": summary, "samples": samples}, indent=1))
    print(markdown(summary, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
