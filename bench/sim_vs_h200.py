"""The simulator against kvtui's own real H200 run: same modes, loads, client and step settings.

For every step of the real snapshot (docs/results/h200-abc.json: vLLM 0.26.0, 8B shape,
2k/256, prefix caching off, closed loop), simulate the same step offline with the calibrated
model and print measured vs simulated figures with the signed error (simulated / real − 1),
the SLO verdicts, and the delays of the first request of every "wave" (see below).

    .venv/bin/python bench/sim_vs_h200.py [SNAPSHOT ...] [--client auto|v1|v2] [--knee] [--calibration FILE]

Default snapshot: docs/results/h200-abc.json. Several snapshots (e.g. the h200-v2 re-run:
h200-v2-b.json h200-v2-a.json h200-v2-d.json) are replayed one after the other, each with its
own client model, then summarised together. Steps that measured nothing (interrupted, 0
requests in the window) are left out.

The replay mirrors the *client* of the real run, not an ideal one (docs/SIMULATOR.md, "Against
kvtui's own H200 run"). Two clients are known; `--client auto` (default) tells them apart by
the snapshot (see `client_kind`):

v1 — the client of docs/results/h200-abc.json (httpx, one pool shared by all slots):
- staggered start over min(2, max(0.2, warm-up / 2)) s, as kvtui's load generator does;
- the window opens at warm-up_s (5 s) whether or not every slot has finished a request: the
  generator is called with window_timeout_s = 0, so at c ≥ 64 the window of that run opened
  before any request had finished and counted the second wave of a synchronised start;
- the client's own send delay, which grew with the number of open streams: that run's client
  shared one httpx connection pool between all slots, and requests sent while many streams
  were open waited for it (measured here from the records: the first request of each wave).
  Its fitted law is `[replay_client]` in the calibration file; the simulated vLLM itself does
  not have it (fast mode does not add it).

v2 — the fixed client of the h200-v2 re-run (aiohttp, one connection per slot):
- the same staggered start (kvtui/runtime/load/generator.py LoadGenerator.run_step);
- no send delay: each slot has its own connection, so nothing holds a send back;
- the window opens once warm-up_s has passed AND every slot has finished one request
  (LoadGenerator.run_step's warm rule), capped at warm-up_s + window_timeout_s, which
  Run passes as the request timeout (300 s here): in the replay `warm_wait_s` = that timeout.

`--knee` also sweeps the load (the ramp's resolution up to its max) with the chosen client on a
fresh simulated engine per load and prints the simulator's highest concurrency at the SLO per mode.

bench/fit_calibration.py imports this module: the same replay is part of the fit.

The published runs' records archives left the tree (docs/RESULTS.md); restore them first:
    git checkout 5cedb2d -- 'docs/results/*.records.jsonl.cols.xz'
"""

from __future__ import annotations

import argparse
import math
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvtui.simulator.model import catalog  # noqa: E402
from kvtui.simulator.engine.fast import FastStepResult, simulate_step  # noqa: E402
from kvtui.simulator.model.roofline import DEFAULT_CALIBRATION, Calibration, load_calibration  # noqa: E402
from kvtui.simulator.engine.scheduler import SchedulerSim  # noqa: E402
from kvtui.core.evaluate import StepContext, evaluate_step, ran_to_its_end  # noqa: E402
from kvtui.runtime.load.workload import PromptFactory, TokenSpace  # noqa: E402
from kvtui.io.snapshot.file import load_snapshot  # noqa: E402
from kvtui.io.scenario import scenario_from_snapshot  # noqa: E402

REAL = ROOT / "docs" / "results" / "h200-abc.json"
RECORDS = ROOT / "docs" / "results" / "h200-abc.records.jsonl"  # read_records finds the .gz
STREAMS_REF = 256  # the client delay law is written as its value at this many streams

# (label, key in the step dict, percentile or None)
FIGURES: list[tuple[str, str, str | None]] = [
    ("out tok/s", "output_tok_s", None),
    ("TTFT p50", "ttft_ms", "p50"),
    ("TTFT p95", "ttft_ms", "p95"),
    ("TPOT p50", "tpot_ms", "p50"),
    ("TPOT p95", "tpot_ms", "p95"),
    ("ITL p50", "itl_ms", "p50"),
    ("ITL p99", "itl_ms", "p99"),
]


# The step figures a fit to kvtui's runs rests on, with their weights in the squared log error
# (bench/fit_calibration.py for bf16/fp8, bench/fit_int4.py for int4).
STEP_FIT_WEIGHTS: dict[tuple[str, str | None], float] = {
    ("output_tok_s", None): 1.0, ("tpot_ms", "p50"): 1.0, ("tpot_ms", "p95"): 1.0, ("itl_ms", "p50"): 0.5, ("itl_ms", "p99"): 1.0,
}


def fig(step: dict, key: str, pct: str | None) -> float | None:
    v = step.get(key)
    if pct is not None:
        v = (v or {}).get(pct)
    return None if v is None else float(v)


# --- the client of that run -------------------------------------------------------------------
@dataclass
class ReplayClient:
    """How the real run's client behaved, as far as the simulator's virtual client can mirror it."""

    send_delay_s_at_ref: float = 0.0  # send delay with STREAMS_REF streams open
    send_delay_exponent: float = 2.0  # delay = at_ref × (streams / STREAMS_REF) ** exponent
    # The generator's window_timeout_s: 0 = the window opens at warm-up_s (v1); a number = it waits
    # for every slot to finish a request, at most that long past warm-up_s (v2); None = no cap.
    warm_wait_s: float | None = 0.0
    name: str = "v1"  # which of kvtui's clients this mirrors (module docstring)

    def describe(self) -> str:
        if self.warm_wait_s is None or self.warm_wait_s > 0:
            cap = "" if self.warm_wait_s is None else f" (cap {self.warm_wait_s:g} s)"
            win = f"window from warm-up_s once every slot has finished a request{cap}"
        else:
            win = "window from warm-up_s"
        delay = (f"send delay {self.send_delay_s_at_ref * 1e3:.0f} ms × (streams/{STREAMS_REF})^{self.send_delay_exponent:g}"
                 if self.send_delay_s_at_ref > 0 else "no send delay")
        return f"client {self.name}: {win}, {delay}"

    def send_delay(self) -> Callable[[int], float] | None:
        if self.send_delay_s_at_ref <= 0:
            return None
        a, p = self.send_delay_s_at_ref, self.send_delay_exponent
        return lambda streams: a * (streams / STREAMS_REF) ** p

    @staticmethod
    def stagger_s(warmup_s: float) -> float:
        return min(2.0, max(0.2, warmup_s / 2))  # kvtui/runtime/load/generator.py LoadGenerator.run_step


def client_kind(doc: dict) -> tuple[str, str]:
    """Which of kvtui's clients measured this snapshot, and why we think so.

    kvtui_version did not change between them (0.1.0), so the snapshot's own evidence is used:
    the per-step client stats gained `runq_wait_s` with the aiohttp client (commit 40bd0bf),
    which came after per-slot connections (cb0fe36) and the warm-up-waits-for-every-slot rule
    (dc0faf2). A snapshot with it was measured by v2; one without it by v1 (h200-abc.json)."""
    steps = [st for m in doc.get("modes", []) for st in m.get("steps", [])]
    if any("runq_wait_s" in (st.get("client") or {}) for st in steps):
        return "v2", "client stats carry runq_wait_s (aiohttp client: per-slot connections, window waits for every slot)"
    return "v1", "client stats without runq_wait_s (httpx client with a shared pool, window at warm-up_s)"


def replay_client(path: str | Path | None = None, kind: str = "v1", doc: dict | None = None) -> ReplayClient:
    """The replayed client. v1: the `[replay_client]` section of the calibration file (written by
    bench/fit_calibration.py). v2: no send delay, window after every slot's first request, capped
    at the snapshot's request timeout (what Run passes as window_timeout_s)."""
    if kind == "v2":
        timeout = ((doc or {}).get("scenario", {}).get("ramp", {}) or {}).get("request_timeout_s")
        return ReplayClient(0.0, 2.0, float(timeout) if timeout else None, "v2")
    if kind != "v1":
        raise ValueError(f"unknown client {kind!r} (v1 or v2)")
    p = Path(path) if path else DEFAULT_CALIBRATION
    d = tomllib.loads(p.read_text(encoding="utf-8")).get("replay_client", {}) if p.is_file() else {}
    rc = ReplayClient()
    for k in ("send_delay_s_at_ref", "send_delay_exponent", "warm_wait_s"):
        if k in d:
            setattr(rc, k, float(d[k]))
    return rc


# --- the replay ---------------------------------------------------------------------------------
def scenario(doc: dict):
    """The real run's scenario on the simulator: the H200 and the 8B shape it ran."""
    sc = scenario_from_snapshot(doc["scenario"])
    sc.server.engine, sc.server.gpu, sc.server.model = "sim", "H200", "llama-3.1-8b"
    for m in sc.modes:
        m.model = ""
    return sc


@dataclass
class StepSim:
    mode: str
    index: int
    load: float
    real: dict
    sim: dict
    res: FastStepResult | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    run: str = ""  # the snapshot's stem (several snapshots in one table)


def simulate_run(doc: dict, cal: Calibration | None = None, client: ReplayClient | None = None, modes: list[str] | None = None,
                 on_sched: Callable[[str, SchedulerSim], None] | None = None, keep: bool = False) -> list[StepSim]:
    """Every step of the real run, in its order, one scheduler per mode (drained between steps)."""
    sc = scenario(doc)
    cal = cal or load_calibration()
    client = client or replay_client()
    model, gpu = catalog.load_model("llama-3.1-8b"), catalog.load_gpu("H200")
    delay = client.send_delay()
    out: list[StepSim] = []
    for m in doc["modes"]:
        if modes and m["name"] not in modes:
            continue
        mode = sc.mode(m["name"])
        sched = SchedulerSim(model, gpu, mode, sc.server, calibration=cal, seed=sc.seed)
        if on_sched:
            on_sched(m["name"], sched)
        factory = PromptFactory(sc.workload, TokenSpace.synthetic(), sc.server.max_model_len, salt=1, seed=sc.seed)
        counter = 0
        for i, st in enumerate(m["steps"]):
            if not st.get("requests") or not ran_to_its_end(st):
                continue  # cut short (its in-flight requests cancelled): not a measurement of the load
            res = simulate_step(sched, factory.lengths, st["load"], True, sc.ramp.warmup_s, sc.ramp.window_s, 0, sc.seed, m["name"], i,
                                counter_start=counter, stagger_s=client.stagger_s(sc.ramp.warmup_s), warm_wait_s=client.warm_wait_s,
                                send_delay=delay)
            counter += len(res.records) + 1
            ctx = StepContext(load=st["load"], t_window_start=res.window_start or res.t_start, t_window_end=res.window_end or res.t_end)
            sim = evaluate_step(res.records, ctx, sc.slo)
            out.append(StepSim(m["name"], i, st["load"], st, sim, res if keep else None))
    return out


# --- waves ----------------------------------------------------------------------------------------
def wave_heads(records, skip_s: float = 3.0, quiet_s: float = 0.5, gap_s: float = 1.0) -> list[tuple[int, float]]:
    """The first request of every wave: sent when no request had received its first token for
    `quiet_s` (the engine was only decoding, nothing queued), at least `gap_s` after the previous
    such send, past the staggered start. Returns (streams decoding at the send, its TTFT in s).

    Its TTFT is the engine's path for a lone request (a decode step, then its 2048-token prefill)
    plus whatever held the request between the client's send and the engine: the cleanest
    measurement of that delay the records give."""
    import bisect

    sel = sorted((r for r in records if r.t_first is not None), key=lambda r: r.t_sent)
    if not sel:
        return []
    t0 = sel[0].t_sent
    firsts = sorted(r.t_first for r in sel)
    out: list[tuple[int, float]] = []
    last = -math.inf
    for r in sel:
        if r.t_sent - t0 < skip_s:
            continue
        k = bisect.bisect_left(firsts, r.t_sent)
        prev = firsts[k - 1] if k > 0 else -math.inf
        if r.t_sent - prev > quiet_s:
            if r.t_sent - last > gap_s:
                n = sum(1 for q in sel if q.t_first <= r.t_sent and (q.t_last if q.t_last is not None else math.inf) > r.t_sent)
                out.append((n, r.t_first - r.t_sent))
            last = r.t_sent
    return out


def records_path(snapshot: str | Path, doc: dict | None = None) -> Path | None:
    """The snapshot's per-request records (its `records` key, next to it), if they exist."""
    sp = Path(snapshot)
    name = (doc or {}).get("records") or sp.name.replace(".json", ".records.jsonl")
    p = sp.with_name(Path(name).name)
    for cand in (p, p.with_name(p.name + ".gz"), p.with_name(p.name + ".cols.xz")):  # read_records reads all three
        if cand.exists():
            return p
    return None


def real_wave_heads(path: Path = RECORDS) -> dict[tuple[str, int], list[tuple[int, float]]]:
    """Wave heads of every (mode, step index) whose records the run kept (h200-abc: bf16 and fp8-kv)."""
    from kvtui.io.records import read_records

    by: dict[tuple[str, int], list] = {}
    for r in read_records(path):
        by.setdefault((r.mode, r.step), []).append(r)
    return {k: wave_heads(v) for k, v in by.items()}


# --- tables -----------------------------------------------------------------------------------------
def err(sim: float | None, real: float | None) -> float | None:
    if sim is None or real is None or real == 0 or math.isinf(sim) or math.isinf(real):
        return None
    return sim / real - 1


def fmt_err(e: float | None) -> str:
    return "—" if e is None else f"{e * 100:+.0f}%"


def verdict(v) -> str:
    return {True: "pass", False: "fail", None: "?"}[v]


def summary(rows: list[StepSim]) -> dict[str, dict[str, float]]:
    """Per figure: mean |error|, mean signed error, max |error| over the steps, and n."""
    out = {}
    for label, key, pct in FIGURES:
        es = [e for e in (err(fig(r.sim, key, pct), fig(r.real, key, pct)) for r in rows) if e is not None]
        out[label] = {"mean_abs": sum(abs(e) for e in es) / len(es), "mean": sum(es) / len(es), "max_abs": max(abs(e) for e in es), "n": len(es)}
    return out


def agreement(rows: list[StepSim]) -> int:
    return sum(1 for r in rows if r.sim["passed"] == r.real["passed"])


def table(rows: list[StepSim], with_run: bool = False) -> str:
    head = ("| run " if with_run else "") + "| mode | conc | " + " | ".join(f"{lab} real / sim (err)" for lab, _, _ in FIGURES) + " | SLO real / sim |"
    L = [head, ("|---" if with_run else "") + "|---|---|" + "---|" * len(FIGURES) + "---|"]
    for r in rows:
        cells = []
        for _lab, key, pct in FIGURES:
            a, b = fig(r.real, key, pct), fig(r.sim, key, pct)
            f = (lambda x: f"{x:,.0f}") if (key != "tpot_ms" and key != "itl_ms") else (lambda x: f"{x:.1f}")
            cells.append(f"{f(a) if a is not None else '—'} / {f(b) if b is not None else '—'} ({fmt_err(err(b, a))})")
        L.append((f"| {r.run} " if with_run else "") + f"| {r.mode} | {r.load:g} | " + " | ".join(cells) + f" | {verdict(r.real['passed'])} / {verdict(r.sim['passed'])} |")
    return "\n".join(L)


def summary_table(rows: list[StepSim], rests_on: set[str] = frozenset()) -> str:
    s = summary(rows)
    L = ["| figure | mean signed error | mean abs error | max abs error | steps | the fit rests on it |", "|---|---|---|---|---|---|"]
    for lab, v in s.items():
        L.append(f"| {lab} | {v['mean'] * 100:+.1f}% | {v['mean_abs'] * 100:.1f}% | {v['max_abs'] * 100:.0f}% | {v['n']} | "
                 f"{'yes' if lab in rests_on else 'no'} |")
    return "\n".join(L)


def wave_table(rows: list[StepSim], heads_real: dict, client: ReplayClient) -> str:
    """Per (mode, load): the measured and simulated TTFT of the first request of each wave."""
    import statistics

    groups: dict[tuple[str, float], dict[str, list]] = {}
    for r in rows:
        g = groups.setdefault((r.mode, r.load), {"real": [], "sim": [], "streams": []})
        hr = heads_real.get((r.mode, r.index))
        if hr is None or r.res is None:
            continue
        g["real"] += [t for _, t in hr]
        g["streams"] += [n for n, _ in hr]
        g["sim"] += [t for _, t in wave_heads(r.res.records)]
    L = ["| mode | conc | waves real / sim | streams open | wave-head TTFT ms real (median, range) | sim (median) | err | of which the client's send delay (sim) ms |",
         "|---|---|---|---|---|---|---|---|"]
    delay = client.send_delay()
    for (mode, load), g in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if not g["real"] or not g["sim"]:
            continue
        mr, ms = statistics.median(g["real"]), statistics.median(g["sim"])
        n = round(statistics.median(g["streams"]))
        d = delay(n) * 1e3 if delay else 0.0
        L.append(f"| {mode} | {load:g} | {len(g['real'])} / {len(g['sim'])} | {n} | {mr * 1e3:.0f} ({min(g['real']) * 1e3:.0f}–{max(g['real']) * 1e3:.0f}) "
                 f"| {ms * 1e3:.0f} | {fmt_err(ms / mr - 1)} | {d:.0f} |")
    return "\n".join(L)


def window_offset(doc: dict, mode: str, step: dict) -> float | None:
    """Seconds from the step's start to its window's opening in the real run (None for modes
    carried over from a resumed snapshot: their times are on another run's clock)."""
    if mode in ((doc.get("resumed_from") or {}).get("modes") or []):
        return None
    t0 = (doc.get("run") or {}).get("t0_monotonic")
    if t0 is None or step.get("t_window_start") is None or step.get("t_rel_start") is None:
        return None
    return step["t_window_start"] - t0 - step["t_rel_start"]


def queue_table(rows: list[StepSim], doc: dict | None = None) -> str:
    """vLLM's waiting queue in the window (the real /metrics maximum against the simulated one),
    and when the window opened after the step's start (the client's warm-up rule at work)."""
    L = ["| mode | conc | window opens at s real / sim | waiting max real / sim | running max real / sim | TTFT p50 real / sim ms |",
         "|---|---|---|---|---|---|"]
    f = lambda x, spec="g": "—" if x is None else format(x, spec)  # noqa: E731
    for r in rows:
        sim_w = sim_r = sim_o = None
        if r.res is not None:
            t0, t1 = r.res.window_start or r.res.t_start, r.res.window_end or r.res.t_end
            inside = [q for q in r.res.series if t0 <= q.t <= t1] or r.res.series
            sim_w, sim_r = max(q.waiting for q in inside), max(q.running for q in inside)
            sim_o = t0 - r.res.t_start
        real_o = window_offset(doc, r.mode, r.real) if doc else None
        L.append(f"| {r.mode} | {r.load:g} | {f(real_o, '.1f')} / {f(sim_o, '.1f')} | {f(r.real.get('waiting_max'))} / {f(sim_w)} | "
                 f"{f(r.real.get('running_max'))} / {f(sim_r)} | {fig(r.real, 'ttft_ms', 'p50') or 0:,.0f} / {fig(r.sim, 'ttft_ms', 'p50') or 0:,.0f} |")
    return "\n".join(L)


TEST_DATA = ROOT / "tests" / "sim" / "data" / "h200_abc_run.json"


def write_test_data(doc: dict, heads: dict, path: Path = TEST_DATA) -> None:
    """The few numbers tests/sim/test_sim_h200_run.py needs from the real run (no records, no snapshot)."""
    import json

    sc = doc["scenario"]
    out = {
        "source": "docs/results/h200-abc.json and its records; written by bench/sim_vs_h200.py --test-data",
        "scenario": {"seed": sc["seed"], "warmup_s": sc["ramp"]["warmup_s"], "window_s": sc["ramp"]["window_s"],
                     "prompt_tokens": sc["workload"]["prompt_tokens"]["value"], "output_tokens": sc["workload"]["output_tokens"]["value"],
                     "max_model_len": sc["server"]["max_model_len"], "gpu_memory_utilization": sc["server"]["gpu_memory_utilization"],
                     "enable_prefix_caching": sc["server"]["enable_prefix_caching"], "slo": sc["slo"]["latency"]},
        "modes": [{"name": m["name"], "kv_cache_dtype": m["settings"]["kv_cache_dtype"], "quantization": m["settings"]["quantization"]}
                  for m in doc["modes"]],
        "steps": [],
    }
    for m in doc["modes"]:
        for i, st in enumerate(m["steps"]):
            row = {"mode": m["name"], "index": i, "load": st["load"], "passed": st["passed"], "output_tok_s": st["output_tok_s"]}
            for _lab, key, pct in FIGURES[1:]:
                row[f"{key[:-3]}_{pct}_ms"] = st[key][pct]
            hr = heads.get((m["name"], i))
            row["wave_head_ttft_ms"] = [round(t * 1e3, 1) for _, t in hr] if hr else None
            row["wave_head_streams"] = [n for n, _ in hr] if hr else None
            out["steps"].append(row)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")


def knee_sweep(doc: dict, cal: Calibration, client: ReplayClient, loads: list[float] | None = None,
               modes: list[str] | None = None) -> dict[str, list[tuple[float, dict]]]:
    """The simulator's own search grid per mode: every load from the ramp's resolution up to its
    max (32, 64, … 256 here), each on a fresh simulated engine with the replayed client."""
    sc = scenario(doc)
    r = sc.ramp
    res_ = float(r.resolution or 32)
    loads = loads or [res_ * k for k in range(1, int(float(r.max) // res_) + 1)]
    model, gpu = catalog.load_model("llama-3.1-8b"), catalog.load_gpu("H200")
    out: dict[str, list[tuple[float, dict]]] = {}
    for m in doc["modes"]:
        if (modes and m["name"] not in modes) or not any(st.get("requests") for st in m["steps"]):
            continue
        mode = sc.mode(m["name"])
        rows = []
        for k, c in enumerate(loads):
            sched = SchedulerSim(model, gpu, mode, sc.server, calibration=cal, seed=sc.seed)
            factory = PromptFactory(sc.workload, TokenSpace.synthetic(), sc.server.max_model_len, salt=1, seed=sc.seed)
            res = simulate_step(sched, factory.lengths, c, True, r.warmup_s, r.window_s, 0, sc.seed, m["name"], k,
                                stagger_s=client.stagger_s(r.warmup_s), warm_wait_s=client.warm_wait_s, send_delay=client.send_delay())
            ctx = StepContext(load=c, t_window_start=res.window_start or res.t_start, t_window_end=res.window_end or res.t_end)
            rows.append((c, evaluate_step(res.records, ctx, sc.slo)))
        out[m["name"]] = rows
    return out


def knee_of(grid: list[tuple[float, dict]]) -> float | None:
    """The highest passing load below the first failing one (kvtui's "best")."""
    best = None
    for c, st in grid:
        if not st["passed"]:
            break
        best = c
    return best


def knee_table(grids: dict[str, list[tuple[float, dict]]]) -> str:
    L = ["| mode | conc | out tok/s | TTFT p50 ms | TTFT p95 ms | TPOT p50 ms | TPOT p95 ms | SLO |", "|---|---|---|---|---|---|---|---|"]
    for mode, grid in grids.items():
        for c, st in grid:
            L.append(f"| {mode} | {c:g} | {st['output_tok_s']:,.0f} | {st['ttft_ms']['p50']:,.0f} | {st['ttft_ms']['p95']:,.0f} | "
                     f"{st['tpot_ms']['p50']:.1f} | {st['tpot_ms']['p95']:.1f} | {verdict(st['passed'])} |")
    L.append("")
    L += [f"simulated max concurrency at the SLO, {mode}: {knee_of(grid)}" for mode, grid in grids.items()]
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("snapshot", nargs="*", default=[str(REAL)], help="real snapshot(s) (default: docs/results/h200-abc.json)")
    ap.add_argument("--client", choices=("auto", "v1", "v2"), default="auto",
                    help="which kvtui client to mirror: v1 = h200-abc's (shared httpx pool, window at warm-up_s, fitted send delay), "
                         "v2 = the fixed one (per-slot connections, no delay, window after every slot's first request); "
                         "auto (default) reads it from the snapshot")
    ap.add_argument("--knee", action="store_true", help="also sweep the load grid and print the simulated max concurrency at the SLO")
    ap.add_argument("--calibration", default=None, help="calibration TOML (default: the H200 / vLLM 0.26.0 fit)")
    ap.add_argument("--test-data", action="store_true", help=f"also write {TEST_DATA.relative_to(ROOT)} (the numbers the test needs)")
    a = ap.parse_args()
    cal = load_calibration(a.calibration)
    everything: list[StepSim] = []
    for snap in a.snapshot:
        doc = load_snapshot(snap)
        if a.test_data and Path(snap).resolve() == REAL.resolve():
            write_test_data(doc, real_wave_heads())
        kind, why = client_kind(doc) if a.client == "auto" else (a.client, "--client")
        client = replay_client(a.calibration, kind, doc)
        sc = scenario(doc)
        rows = simulate_run(doc, cal, client, keep=True)
        for r in rows:
            r.run = Path(snap).stem
        everything += rows
        version = next((m.get("engine_info", {}).get("version") for m in doc["modes"] if m.get("engine_info")), None)
        print(f"real: {snap} (vLLM {version}); sim: {cal.name}, same loads, warm-up {sc.ramp.warmup_s:g} s, window {sc.ramp.window_s:g} s, "
              f"{client.describe()} [{kind}: {why}]\n")
        if not rows:
            print("(no step with requests)\n")
            continue
        print(table(rows))
        print()
        print(summary_table(rows))
        print(f"\nSLO verdict (TTFT p95 ≤ {sc.slo.latency.get('ttft_p95_ms', 0):g} ms, TPOT p95 ≤ {sc.slo.latency.get('tpot_p95_ms', 0):g} ms) "
              f"agrees on {agreement(rows)} of {len(rows)} steps.\n")
        print(queue_table(rows, doc))
        print()
        rec = records_path(snap, doc)
        if rec is not None:
            print(wave_table(rows, real_wave_heads(rec), client))
            print()
        if a.knee:
            print(knee_table(knee_sweep(doc, cal, client)))
            print()
    if len(a.snapshot) > 1 and everything:
        print("All snapshots together:\n")
        print(table(everything, with_run=True))
        print()
        print(summary_table(everything))
        print(f"\nSLO verdicts agree on {agreement(everything)} of {len(everything)} steps.")
        for mode in dict.fromkeys(r.mode for r in everything):
            sel = [r for r in everything if r.mode == mode]
            print(f"\n{mode} ({len(sel)} steps):\n")
            print(summary_table(sel))
            print(f"\nSLO verdicts agree on {agreement(sel)} of {len(sel)} steps.")


if __name__ == "__main__":
    main()
