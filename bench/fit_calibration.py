"""Fit the simulator's efficiency factors to the real vLLM 0.26 / H200 measurements.

    .venv/bin/python bench/fit_calibration.py            # fit, write the TOML and the docs tables
    .venv/bin/python bench/fit_calibration.py --check    # no fit: evaluate the current TOML
    .venv/bin/python bench/fit_calibration.py --speed    # step() cost and fast-mode speed

Data, two sets: (1) bench/data/h200-vllm-0.26.0/ (a copy of ../shared/calibration/h200-vllm-0.26.0
and the key lines of the four startup logs): `vllm bench serve` sweeps; (2) kvtui's own run on
the same H200 (docs/results/h200-abc.json and its per-request records), replayed step by step
through bench/sim_vs_h200.py. Needs numpy and scipy (fit only; kvtui does not).

How: every measured session is replayed through the real `SchedulerSim`, in the order it
ran (16-prompt warm-up, then c=128, 512, 32, 256 with `--seed 0` prompts, so prompt i of
one run is prompt i of the next and the simulated prefix cache decides what hits; the clean
rerun: prefix caching off, c=512, 256, 64). In these closed-loop replays every arrival
happens at a step boundary, so *which* requests run in which step does not depend on the
step durations: one replay gives a trace of per-step features, and any set of efficiency
factors turns it into times with numpy. The fit minimises squared log errors of output
tok/s, mean TTFT, mean TPOT and median ITL over the cells; then the written calibration is
checked through the real scheduler again, and the error table is written into
docs/SIMULATOR.md between the fit markers.

kvtui's run is traced the same way (bench/sim_vs_h200.py replays every step with that run's
client; `RunTrace` keeps which requests ran in which step) and adds, per step, out tok/s,
TPOT p50/p95 and ITL p50/p99 to the same least squares. That run's client delayed its own
sends as more streams were open (one shared httpx pool); the delay law is fitted first, by
itself, on the TTFT of the first request of every wave (`fit_client_delay`), and written to
`[replay_client]`: it is part of the replay, not of the simulated vLLM. Rounds alternate the
two fits until the factors settle. Its table goes between the h200run markers.

The published runs' records archives left the tree (docs/RESULTS.md); restore them first:
    git checkout 5cedb2d -- 'docs/results/*.records.jsonl.cols.xz'
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvtui.simulator.model.catalog import load_gpu, load_model  # noqa: E402
from kvtui.simulator.model.estimator import activation_peak_bytes, resolve_settings  # noqa: E402
from kvtui.simulator.engine.fast import bench_serve  # noqa: E402
from kvtui.simulator.model.roofline import DEFAULT_CALIBRATION, Calibration, Roofline, load_calibration, weight_bytes  # noqa: E402
from kvtui.simulator.engine.scheduler import SchedulerSim, SimRequest  # noqa: E402
from kvtui.io.scenario.schema import Mode, Server  # noqa: E402

from bench.sim_vs_h200 import STEP_FIT_WEIGHTS  # noqa: E402

DATA = ROOT / "bench" / "data" / "h200-vllm-0.26.0"
DOC = ROOT / "docs" / "SIMULATOR.md"
GIB = 1024**3

MODES = {
    "a": Mode("a"),
    "b": Mode("b", kv_cache_dtype="fp8"),
    "c": Mode("c", quantization="fp8"),
    "d": Mode("d", quantization="fp8", kv_cache_dtype="fp8"),
}
MODE_DESC = {"a": "bf16 / KV auto", "b": "bf16 / KV fp8", "c": "fp8 weights / KV auto", "d": "fp8 weights / KV fp8"}
STARTUP = {"a": "startup-bf16", "b": "startup-kv-fp8", "c": "startup-w-fp8", "d": "startup-w-fp8-kv-fp8"}
PREFIX_ORDER = (128, 512, 32, 256)  # run order per mode, 2 x C prompts each, after a 16-prompt warm-up
NOPREFIX_ORDER = (512, 256, 64)  # clean rerun, mode a only, 3 x C prompts each
ISL, OSL = 2048, 256
SLO_TTFT_P99_MS, SLO_TPOT_P99_MS = 5000.0, 40.0
FRONTEND_S = 0.006  # vLLM's API server: ~6 ms per 2048-token request (noprefix c=512 /metrics series)
FIGURES = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")
FIT_WEIGHTS = {"output_throughput": 1.0, "mean_ttft_ms": 1.0, "mean_tpot_ms": 1.0, "median_itl_ms": 0.5}

# the parameters fitted: (calibration attribute, key or None, lower, upper, prior).
# Priors are physical guesses (fraction of datasheet bandwidth/peak a kernel reaches); a weak
# pull towards them keeps directions the data cannot separate from wandering off.
PARAMS = [
    ("weights_bw_eff", "bf16", 0.4, 0.95, 0.85),
    ("weights_bw_eff", "fp8", 0.3, 0.95, 0.75),
    ("gemm_eff", "bf16", 0.3, 0.9, 0.65),
    ("gemm_eff", "fp8", 0.2, 0.9, 0.5),
    ("kv_bw_eff", "auto", 0.3, 0.95, 0.8),
    ("kv_bw_eff", "fp8", 0.2, 0.95, 0.6),
    ("step_overhead_s", None, 0.0, 0.01, 0.0015),
    ("seq_overhead_s", None, 0.0, 1e-4, 1e-5),
    # engine-core CPU per scheduled sequence, overlapped with the GPU (async scheduling): the
    # step takes the longer of the two. Seen as the decode-step floor at >= 128 streams.
    ("cpu_seq_s", None, 0.0, 3e-4, 1e-4),
]
PRIOR_WEIGHT = 0.05
FIXED = {"attn_eff": 0.6, "mixed_overhead_s": 0.0,  # prefill attention is ~4 % of a 2k prefill: not identifiable here
         "cpu_step_s": 0.0}  # the CPU floor is seen only at >= 96 streams, where it is proportional to them


# --- data ------------------------------------------------------------------------------------
def _metrics(path: Path) -> dict[str, float]:
    d: dict[str, float] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"(vllm:\w+)(\{[^}]*\})? ([-\d.e+]+)$", line.strip())
        if m and not m.group(1).endswith("_created"):
            labels = m.group(2) or ""
            key = m.group(1) + (labels if ("source=" in labels or "reason=" in labels) else "")
            d[key] = float(m.group(3))
    return d


def load_capacity() -> dict[str, dict]:
    out = {}
    for mode, stem in STARTUP.items():
        text = (DATA / "startup" / f"{stem}.txt").read_text()
        g = lambda rx: re.search(rx, text)  # noqa: E731
        usage = g(r"Actual usage is ([\d.]+) GiB for weight, ([\d.]+) GiB for peak activation, ([\d.]+) GiB for non-torch memory, and ([\d.]+) GiB for CUDAGraph")
        free = g(r"Free memory on device \(([\d.]+)/([\d.]+) GiB\)")
        # "GPU mem used ready / peak MiB" column of the README's capacity table (nvidia-smi)
        row = re.search(rf"^\| {mode} \|.*\| ([\d,]+) / ([\d,]+) \|$", (DATA / "README.md").read_text(), re.M)
        nv = [int(row.group(1).replace(",", "")), int(row.group(2).replace(",", ""))]
        out[mode] = {
            "weights_gib": float(g(r"Model loading took ([\d.]+) GiB").group(1)),
            "kv_cache_gib": float(g(r"Available KV cache memory: ([\d.]+) GiB").group(1)),
            "kv_tokens": int(g(r"GPU KV cache size: ([\d,]+) tokens").group(1).replace(",", "")),
            "max_concurrency": float(g(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x").group(1)),
            "cuda_graph_gib": float(g(r"Graph capturing finished in \d+ secs, took ([\d.]+) GiB").group(1)),
            "activation_gib": float(usage.group(2)),
            "non_torch_gib": float(usage.group(3)),
            "gpu_total_gib": float(free.group(2)),
            "num_gpu_blocks": int(re.search(r'num_gpu_blocks="(\d+)"', (DATA / "metrics" / f"{mode}_ready.txt").read_text()).group(1)),
            "nvml_ready_mib": nv[0],
        }
    return out


@dataclass
class Cell:
    mode: str
    conc: int
    prefix: bool  # prefix caching on (the flattered sweep) or the clean rerun
    num_prompts: int
    measured: dict
    hit_rate: float | None = None  # measured share of prompt tokens from the prefix cache
    preemptions: int | None = None
    steps: int | None = None

    @property
    def key(self) -> str:
        return f"{self.mode}{'' if self.prefix else '-noprefix'}@{self.conc}"


def load_cells() -> list[Cell]:
    cells: list[Cell] = []
    for mode in MODES:
        prev = _metrics(DATA / "metrics" / f"{mode}_ready.txt")
        for c in PREFIX_ORDER:
            cur = _metrics(DATA / "metrics" / f"{mode}_after_c{c}.txt")
            dl = lambda k: cur.get(k, 0.0) - prev.get(k, 0.0)  # noqa: E731
            b = json.loads((DATA / "bench" / f"{mode}_c{c}.json").read_text())
            q = dl("vllm:prefix_cache_queries_total")
            cells.append(Cell(mode, c, True, b["num_prompts"], b, dl("vllm:prefix_cache_hits_total") / q if q else 0.0,
                              int(dl("vllm:num_preemptions_total")), int(dl("vllm:iteration_tokens_total_count"))))
            prev = cur
    for c in NOPREFIX_ORDER:
        b = json.loads((DATA / "noprefix" / f"a_c{c}.json").read_text())
        cells.append(Cell("a", c, False, b["num_prompts"], b, 0.0, {512: 82, 256: 0, 64: 0}[c], None))
    return cells


# --- replay and traces -------------------------------------------------------------------------
def prompt_hashes(i: int) -> list[int]:
    """Prompt i of `vllm bench serve --seed 0 --dataset-name random`: the same in every run."""
    base = (i + 1) << 20
    return list(range(base, base + ISL // 16))


class Tracer:
    """Runs a session through a SchedulerSim and records what every step did.

    Arrivals pass through the modelled API server (frontend_s_per_request, serialised), so
    the schedule depends a little on step durations: the fit re-traces until it settles."""

    def __init__(self, sched: SchedulerSim):
        self.s = sched
        self.feats: list[tuple] = []
        self.cells: dict[str, dict] = {}

    def run(self, key: str, num_prompts: int, conc: int, hashes, output_len: int = OSL) -> None:
        s = self.s
        fe = s.cal.frontend_s_per_request
        start = len(self.feats)
        sent: dict[str, int] = {}
        tok_steps: dict[str, list[int]] = {}
        nxt = 0
        q0, h0, p0 = s.pc_queries, s.pc_hits, s.preemptions_total
        ingest: deque = deque()
        fe_free = s.now

        def launch(step_idx: int) -> None:
            nonlocal nxt, fe_free
            rid = f"{key}/{nxt}"
            fe_free = max(s.now, fe_free) + fe
            ingest.append((fe_free, SimRequest(rid, ISL, output_len, hashes(nxt) if hashes else None)))
            sent[rid] = step_idx
            tok_steps[rid] = []
            nxt += 1

        for _ in range(min(conc, num_prompts)):
            launch(start - 1)  # sent at the cell's t=0: the end of the step before its first
        gap = 0.0
        while s.has_work() or ingest:
            while ingest and ingest[0][0] <= s.now:
                s.add(ingest.popleft()[1])
            if not s.has_work():
                gap += ingest[0][0] - s.now
                s.idle_until(ingest[0][0])
                continue
            o = s.step()
            idx = len(self.feats)
            self.feats.append((o.scheduled_tokens, o.seqs, o.sampled, o.ctx_read, o.attn_pairs, 1 if o.prefill_tokens else 0, gap))
            gap = 0.0
            for rid in o.tokens:
                tok_steps[rid].append(idx)
            for _rid in o.finished:
                if nxt < num_prompts:
                    launch(idx)  # sent at the end of this step
        end = len(self.feats)
        self.cells[key] = {
            "start": start,
            "end": end,
            "sent": np.array([sent[r] for r in sent]),
            "tok": [np.array(tok_steps[r]) for r in sent],
            "hit_rate": (s.pc_hits - h0) / (s.pc_queries - q0) if s.pc_queries > q0 else 0.0,
            "preemptions": s.preemptions_total - p0,
            "steps": end - start,
        }

    def arrays(self) -> np.ndarray:
        return np.array(self.feats, dtype=float)


def make_sched(mode: str, prefix: bool, cal: Calibration) -> SchedulerSim:
    m, g = load_model("llama-3.1-8b"), load_gpu("H200")
    srv = Server(max_model_len=8192, gpu_memory_utilization=0.9, enable_prefix_caching=prefix)
    return SchedulerSim(m, g, MODES[mode], srv, calibration=cal, seed=0)


def replay_session(mode: str, prefix: bool, cal: Calibration) -> Tracer:
    tr = Tracer(make_sched(mode, prefix, cal))
    h = prompt_hashes if prefix else None
    tr.run("warmup", 16, 16, h, output_len=32)  # the bench's warm-up: 16 prompts, 32 tokens out
    for c in (PREFIX_ORDER if prefix else NOPREFIX_ORDER):
        tr.run(f"c{c}", (2 if prefix else 3) * c, c, h)
    return tr


# --- vectorised step time (mirrors Roofline.time) ------------------------------------------------
class VecModel:
    def __init__(self, mode: str):
        m, g = load_model("llama-3.1-8b"), load_gpu("H200")
        md = MODES[mode]
        r = Roofline(m, g, md.weights, md.kv_bytes, Calibration())
        self.r, self.g, self.fmt, self.kv = r, g, md.weights, "fp8" if md.kv_bytes == 1 else "auto"

    def durations(self, F: np.ndarray, p: dict) -> np.ndarray:
        r, g = self.r, self.g
        tokens, seqs, sampled, ctx, pairs, prefill, gap = F.T
        bw = g.bandwidth
        peak = g.peak_flops(self.fmt if self.fmt in ("fp8", "int8") else "bf16")
        t_w = r.w_static / (bw * p["weights_bw_eff"][self.fmt])
        t_c = (tokens * r.lin_flops_per_token + sampled * r.lm_flops_per_sample) / (peak * p["gemm_eff"][self.fmt])
        t = np.maximum(t_w, t_c)
        t = t + ctx * r.kv_bytes_per_token / (bw * p["kv_bw_eff"][self.kv])
        t = t + pairs * r.attn_flops_per_pair / (g.bf16_tflops * 1e12 * p["attn_eff"])
        t = t + p["step_overhead_s"] + p["seq_overhead_s"] * seqs + p["mixed_overhead_s"] * prefill
        t = np.maximum(t, p["cpu_step_s"] + p["cpu_seq_s"] * seqs)
        return np.where(tokens > 0, t, p["step_overhead_s"]) + gap


def cell_metrics(tr_cell: dict, cum: np.ndarray) -> dict[str, float]:
    """Figures of one cell from its trace and the cumulative step end times."""
    s0, s1 = tr_cell["start"], tr_cell["end"]
    t_start = cum[s0 - 1] if s0 > 0 else 0.0
    sent = tr_cell["sent"]
    sent_t = np.where(sent >= 0, cum[np.maximum(sent, 0)], 0.0)
    firsts = np.array([cum[t[0]] for t in tr_cell["tok"]])
    lasts = np.array([cum[t[-1]] for t in tr_cell["tok"]])
    n_out = np.array([len(t) for t in tr_cell["tok"]])
    ttft = (firsts - sent_t) * 1e3
    tpot = (lasts - firsts) / np.maximum(n_out - 1, 1) * 1e3
    itl = np.concatenate([np.diff(cum[t]) for t in tr_cell["tok"]]) * 1e3
    dur = cum[s1 - 1] - t_start
    return {
        "output_throughput": n_out.sum() / dur,
        "mean_ttft_ms": ttft.mean(),
        "p99_ttft_ms": float(np.percentile(ttft, 99)),
        "mean_tpot_ms": tpot.mean(),
        "p99_tpot_ms": float(np.percentile(tpot, 99)),
        "median_itl_ms": float(np.median(itl)),
        "p99_itl_ms": float(np.percentile(itl, 99)),
        "duration": dur,
    }


# --- kvtui's own run (docs/results/h200-abc.json), replayed with that run's client ------------------
KV_WEIGHTS = STEP_FIT_WEIGHTS
KV_FIGS = tuple(KV_WEIGHTS)
KV_STEP_WEIGHT = 0.6  # 25 steps, many of them repeats of the same load: about the bench sweep's weight in all


def kv_rests_on(mode: str, load: float, f: tuple[str, str | None]) -> bool:
    """Figures of kvtui's run the fit rests on (asserted in tests/sim/test_sim_h200_run.py).
    Not the TTFTs (the replayed client's waves decide them; validation only), and not ITL p99
    at c=32: there it is a step carrying two prompts that met by the real client's timing
    jitter, which the deterministic replay does not have."""
    return not (f[0] == "itl_ms" and f[1] == "p99" and load <= 32)


class RunTrace:
    """kvtui's run replayed through SchedulerSim (bench/sim_vs_h200.py), with what every engine
    step did and which step every token came from, so that a set of step-time factors gives all
    the times again with numpy (the schedule is kept: rounds re-trace)."""

    def __init__(self, doc: dict, cal: Calibration, client):
        from bench.sim_vs_h200 import simulate_run

        self.feats: dict[str, list] = {}
        self.ends: dict[str, list] = {}

        def hook(name: str, s: SchedulerSim) -> None:
            feats, ends = [], []
            self.feats[name], self.ends[name] = feats, ends
            step = s.step

            def traced():
                before = s.now
                o = step()
                feats.append((o.scheduled_tokens, o.seqs, o.sampled, o.ctx_read, o.attn_pairs, 1 if o.prefill_tokens else 0,
                              before - (ends[-1] if ends else 0.0)))
                ends.append(s.now)
                return o

            s.step = traced

        self.rows = simulate_run(doc, cal, client, on_sched=hook, keep=True)
        self.window_s = float(doc["scenario"]["ramp"]["window_s"])
        self.steps = [self._index(r) for r in self.rows]
        self.F = {m: np.array(v, dtype=float) for m, v in self.feats.items()}
        self.ends_arr = {m: np.array(v) for m, v in self.ends.items()}

    def _anchor(self, ends: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each time as (index of the last step that ended at or before it, offset after that end)."""
        a = np.searchsorted(ends, t + 1e-9, side="right") - 1
        off = t - np.where(a >= 0, ends[np.maximum(a, 0)], 0.0)
        return a, off

    def _index(self, row) -> dict:
        ends = np.array(self.ends[row.mode])
        recs = [r for r in row.res.records if r.ok and r.t_first is not None]
        tok_idx, owner, sent = [], [], []
        for k, r in enumerate(recs):
            times = np.array(r.token_times())
            tok_idx.append(np.searchsorted(ends, times - 1e-9))
            owner.append(np.full(len(times), k))
            sent.append(r.t_sent)
        tok_idx = np.concatenate(tok_idx)
        owner = np.concatenate(owner)
        sa, so = self._anchor(ends, np.array(sent))
        wa, wo = self._anchor(ends, np.array([row.res.window_start]))
        first = np.r_[True, owner[1:] != owner[:-1]]
        last = np.r_[owner[1:] != owner[:-1], True]
        return {"mode": row.mode, "tok": tok_idx, "owner": owner, "first": first, "last": last, "sa": sa, "so": so,
                "wa": int(wa[0]), "wo": float(wo[0]), "n": len(recs)}

    def figures(self, p: dict) -> list[dict]:
        cum = {}
        if not hasattr(self, "_vm"):
            self._vm = {m: VecModel({"bf16": "a", "fp8-kv": "b", "fp8-w": "c", "fp8-w+kv": "d"}[m]) for m in self.F}
        for m, F in self.F.items():
            cum[m] = np.cumsum(self._vm[m].durations(F, p))
        out = []
        for st in self.steps:
            T = cum[st["mode"]]
            at = lambda a, o: np.where(a >= 0, T[np.maximum(a, 0)], 0.0) + o  # noqa: E731
            ws = float(at(np.array([st["wa"]]), np.array([st["wo"]]))[0])
            we = ws + self.window_s
            sent = at(st["sa"], st["so"])
            win_rec = (sent >= ws) & (sent < we)
            tt = T[st["tok"]]
            in_win_tok = win_rec[st["owner"]]
            out_tok = np.count_nonzero((tt >= ws) & (tt <= we))
            t_first, t_last = tt[st["first"]], tt[st["last"]]
            n_tok = np.bincount(st["owner"], minlength=st["n"])
            tpot = ((t_last - t_first) / np.maximum(n_tok - 1, 1))[win_rec & (n_tok > 1)] * 1e3
            itl_mask = ~st["first"] & in_win_tok
            itl = np.diff(tt, prepend=tt[0])[itl_mask] * 1e3
            out.append({
                "output_tok_s": out_tok / self.window_s,
                "tpot_ms": {"p50": float(np.percentile(tpot, 50)), "p95": float(np.percentile(tpot, 95))} if len(tpot) else {},
                "itl_ms": {"p50": float(np.percentile(itl, 50)), "p99": float(np.percentile(itl, 99))} if len(itl) else {},
            })
        return out

    def check(self, p: dict) -> float:
        """Largest relative gap between the vectorised figures and evaluate_step's at the traced factors."""
        worst = 0.0
        for row, v in zip(self.rows, self.figures(p)):
            for key, pct in KV_FIGS:
                a = row.sim[key] if pct is None else row.sim[key][pct]
                b = v[key] if pct is None else v[key].get(pct)
                if a and b:
                    worst = max(worst, abs(b / a - 1))
        return worst


def kv_residuals(trace: RunTrace, p: dict) -> list[float]:
    res = []
    for row, v in zip(trace.rows, trace.figures(p)):
        for f in KV_FIGS:
            if not kv_rests_on(row.mode, row.load, f):
                continue
            key, pct = f
            meas = row.real[key] if pct is None else row.real[key][pct]
            pred = v[key] if pct is None else v[key].get(pct)
            if meas and pred:
                res.append(KV_STEP_WEIGHT * KV_WEIGHTS[f] * math.log(pred / meas))
    return res


def fit_client_delay(doc: dict, cal: Calibration, heads_real: dict, exponent: float = 2.0, lo: float = 0.0, hi: float = 1.5):
    """The replayed client's send delay at STREAMS_REF streams: golden-section search on the log
    error of the wave heads' TTFT (per step: the median over its waves), full replays each time."""
    from bench.sim_vs_h200 import ReplayClient, simulate_run, wave_heads

    modes = sorted({m for m, _ in heads_real})

    def cost(d: float) -> float:
        rows = simulate_run(doc, cal, ReplayClient(d, exponent), modes=modes, keep=True)
        e = []
        for r in rows:
            hr = heads_real.get((r.mode, r.index)) or []
            hs = wave_heads(r.res.records)
            if hr and hs:
                e.append(math.log(float(np.median([t for _, t in hs])) / float(np.median([t for _, t in hr]))))
        return float(np.sum(np.square(e)))

    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = cost(c), cost(d)
    while b - a > 0.01:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = cost(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = cost(d)
    best = (a + b) / 2
    return ReplayClient(round(best, 3), exponent), cost(best)


def params_to_dict(x: np.ndarray, base: Calibration) -> dict:
    p = {"weights_bw_eff": dict(base.weights_bw_eff), "gemm_eff": dict(base.gemm_eff), "kv_bw_eff": dict(base.kv_bw_eff)}
    p["attn_eff"] = base.attn_eff
    p["step_overhead_s"] = base.step_overhead_s
    p["seq_overhead_s"] = base.seq_overhead_s
    p["mixed_overhead_s"] = base.mixed_overhead_s
    p["cpu_step_s"] = base.cpu_step_s
    p["cpu_seq_s"] = base.cpu_seq_s
    p.update(FIXED)
    for v, (attr, key, _lo, _hi, _pr) in zip(x, PARAMS):
        if key is None:
            p[attr] = float(v)
        else:
            p[attr][key] = float(v)
    return p


def calibration_from(p: dict, base: Calibration) -> Calibration:
    cal = Calibration(**{k: getattr(base, k) for k in base.__dataclass_fields__})
    for k, v in p.items():
        setattr(cal, k, dict(v) if isinstance(v, dict) else v)
    return cal


# --- memory ------------------------------------------------------------------------------------
def fit_memory(cap: dict) -> dict:
    m, g = load_model("llama-3.1-8b"), load_gpu("H200")
    s = resolve_settings(m, g, max_model_len=8192)
    base = Calibration()
    extra = [cap[k]["weights_gib"] - weight_bytes(m, MODES[k].weights) / GIB for k in MODES]
    # scale: bf16 activation figure / formula (without the quantized-input term)
    unit = Calibration(activation_scale=1.0)
    act_bf16 = activation_peak_bytes(m, "bf16", s, unit) / GIB
    graphs = {"bf16": np.mean([cap[k]["cuda_graph_gib"] for k in ("a", "b")]) / m.layers,
              "fp8": np.mean([cap[k]["cuda_graph_gib"] for k in ("c", "d")]) / m.layers}
    nvml = [cap[k]["nvml_ready_mib"] / 1024 - (cap[k]["weights_gib"] + cap[k]["activation_gib"] + cap[k]["non_torch_gib"]
                                                + cap[k]["kv_cache_gib"] + cap[k]["cuda_graph_gib"]) for k in MODES]
    # vLLM 0.26 does not subtract CUDA graphs: check it on the bf16 log's own figures
    a = cap["a"]
    budget = a["gpu_total_gib"] * 0.9
    without = budget - a["weights_gib"] - a["activation_gib"] - a["non_torch_gib"]
    in_budget = abs(without - a["cuda_graph_gib"] - a["kv_cache_gib"]) < abs(without - a["kv_cache_gib"])
    return {
        "non_torch_gib": round(float(np.mean([cap[k]["non_torch_gib"] for k in MODES])), 3),
        "weights_extra_gib": round(float(np.mean(extra)), 4),
        "activation_scale": round(cap["a"]["activation_gib"] / act_bf16, 4),
        "cuda_graph_gib_per_layer": {k: round(float(v), 5) for k, v in graphs.items()},
        "cuda_graphs_in_budget": bool(in_budget),
        "nvml_overhead_gib": round(float(np.mean(nvml)), 3),
        "_base": base,
    }


# --- the fit -------------------------------------------------------------------------------------
def build_traces(cal: Calibration) -> dict[tuple[str, bool], Tracer]:
    traces = {}
    for mode in MODES:
        traces[(mode, True)] = replay_session(mode, True, cal)
    traces[("a", False)] = replay_session("a", False, cal)
    return traces


def predict_all(traces, p: dict, cells: list[Cell]) -> dict[str, dict]:
    out = {}
    cache = {}
    for (mode, prefix), tr in traces.items():
        F = tr.arrays()
        cache[(mode, prefix)] = (tr, np.cumsum(VecModel(mode).durations(F, p)))
    for c in cells:
        tr, cum = cache[(c.mode, c.prefix)]
        tc = tr.cells[f"c{c.conc}"]
        res = cell_metrics(tc, cum)
        res["hit_rate"] = tc["hit_rate"]
        res["preemptions"] = tc["preemptions"]
        res["steps"] = tc["steps"] + (tr.cells["warmup"]["steps"] if (c.prefix and c.conc == PREFIX_ORDER[0]) else 0)
        out[c.key] = res
    return out


def residuals(x, traces, cells, base, weights_by_cell, kv_trace=None) -> np.ndarray:
    p = params_to_dict(x, base)
    pred = predict_all(traces, p, cells)
    res = []
    for c in cells:
        w = weights_by_cell[c.key]
        for f, fw in FIT_WEIGHTS.items():
            if f == "mean_ttft_ms" and c.prefix and c.conc >= 128:
                fw *= 0.3  # flattered by prefix hits whose placement in time is unknown; one run
            res.append(w * fw * math.log(pred[c.key][f] / c.measured[f]))
        if c.conc == 32:  # the full 8192-token prefill step (+ 32 decodes): a clean anchor for GEMMs
            res.append(w * math.log(pred[c.key]["p99_itl_ms"] / c.measured["p99_itl_ms"]))
    if kv_trace is not None:
        res.extend(kv_residuals(kv_trace, p))
    for v, (_a, _k, _lo, _hi, pr) in zip(x, PARAMS):
        res.append(PRIOR_WEIGHT * math.log(max(v, 1e-9) / pr))
    return np.array(res)


def cell_weight(c: Cell) -> float:
    """The clean rerun counts most; the prefix-flattered cells are replayed with the simulated cache."""
    if not c.prefix:
        return 2.0
    return 1.0


def fmt_err(p: float, m: float) -> str:
    return f"{(p / m - 1) * 100:+.1f}%"


def error_table(cells: list[Cell], pred: dict, cap: dict, mem_pred: dict) -> str:
    L = []
    L.append("### Capacity (startup facts) — predicted vs measured\n")
    L.append("| mode | weights GiB (pred / meas / err) | KV cache GiB | KV tokens | num_gpu_blocks | max conc @8192 |")
    L.append("|---|---|---|---|---|---|")
    for k in MODES:
        mp, mc = mem_pred[k], cap[k]
        L.append(f"| {k} ({MODE_DESC[k]}) | {mp['weights_gib']:.2f} / {mc['weights_gib']:.2f} / {fmt_err(mp['weights_gib'], mc['weights_gib'])} "
                 f"| {mp['kv_cache_gib']:.2f} / {mc['kv_cache_gib']:.2f} / {fmt_err(mp['kv_cache_gib'], mc['kv_cache_gib'])} "
                 f"| {mp['kv_tokens']:,} / {mc['kv_tokens']:,} / {fmt_err(mp['kv_tokens'], mc['kv_tokens'])} "
                 f"| {mp['num_gpu_blocks']:,} / {mc['num_gpu_blocks']:,} "
                 f"| {mp['max_concurrency']:.2f}x / {mc['max_concurrency']:.2f}x |")
    L.append("")
    L.append("### Load sweep — predicted vs measured (signed error = predicted / measured − 1)\n")
    L.append("SLO for the pass/fail columns: TTFT p99 ≤ 5 s and TPOT p99 ≤ 40 ms. "
             "`fit` = the cell is one the fit rests on (asserted within 15 % in tests/sim).\n")
    L.append("| cell | out tok/s pred / meas (err) | TTFT mean ms | TPOT mean ms | ITL median ms | engine steps pred / meas | prefix hits pred / meas | preempt pred / meas | SLO pred / meas | fit |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    for c in cells:
        p, m = pred[c.key], c.measured
        sp = p["p99_ttft_ms"] <= SLO_TTFT_P99_MS and p["p99_tpot_ms"] <= SLO_TPOT_P99_MS
        sm = m["p99_ttft_ms"] <= SLO_TTFT_P99_MS and m["p99_tpot_ms"] <= SLO_TPOT_P99_MS
        fit = "yes" if rests_on(c) else "no"
        L.append(
            f"| {c.key} | {p['output_throughput']:.0f} / {m['output_throughput']:.0f} ({fmt_err(p['output_throughput'], m['output_throughput'])}) "
            f"| {p['mean_ttft_ms']:.0f} / {m['mean_ttft_ms']:.0f} ({fmt_err(p['mean_ttft_ms'], m['mean_ttft_ms'])}) "
            f"| {p['mean_tpot_ms']:.1f} / {m['mean_tpot_ms']:.1f} ({fmt_err(p['mean_tpot_ms'], m['mean_tpot_ms'])}) "
            f"| {p['median_itl_ms']:.1f} / {m['median_itl_ms']:.1f} ({fmt_err(p['median_itl_ms'], m['median_itl_ms'])}) "
            f"| {p['steps']} / {c.steps if c.steps is not None else '?'} "
            f"| {p['hit_rate'] * 100:.1f}% / {(c.hit_rate or 0) * 100:.1f}% "
            f"| {p['preemptions']} / {c.preemptions if c.preemptions is not None else '?'} "
            f"| {'pass' if sp else 'fail'} / {'pass' if sm else 'fail'} | {fit} |"
        )
    errs = {f: [abs(pred[c.key][f] / c.measured[f] - 1) for c in cells] for f in FIGURES}
    rest = [c for c in cells if rests_on(c)]
    errs_rest = {f: [abs(pred[c.key][f] / c.measured[f] - 1) for c in rest] or [float("nan")] for f in FIGURES}
    L.append("")
    L.append("| figure | mean abs error, all 19 cells | max abs error, all | mean abs error, cells the fit rests on | max, those |")
    L.append("|---|---|---|---|---|")
    for f in FIGURES:
        L.append(f"| {f} | {np.mean(errs[f]) * 100:.1f}% | {np.max(errs[f]) * 100:.1f}% | {np.mean(errs_rest[f]) * 100:.1f}% | {np.max(errs_rest[f]) * 100:.1f}% |")
    agree = sum(1 for c in cells if (pred[c.key]["p99_ttft_ms"] <= SLO_TTFT_P99_MS and pred[c.key]["p99_tpot_ms"] <= SLO_TPOT_P99_MS)
                == (c.measured["p99_ttft_ms"] <= SLO_TTFT_P99_MS and c.measured["p99_tpot_ms"] <= SLO_TPOT_P99_MS))
    L.append("")
    L.append(f"SLO pass/fail agrees in {agree} of {len(cells)} cells.")
    return "\n".join(L)


def series_table(cal: Calibration) -> str:
    """The clean c=512 run's /metrics every 8 s next to the simulator's state at the same moments.
    Clocks are aligned on the first scrape that saw requests running (measured t=28 s)."""
    rows = []
    for line in (DATA / "noprefix" / "a_c512_metrics_every_8s.txt").read_text().splitlines():
        t = int(re.match(r"t=(\d+)s", line).group(1))
        vals = re.findall(r"(vllm:\w+) ([\d.e+-]+)", line)
        d = {}
        for k, v in vals:
            d.setdefault(k, float(v))
        rows.append((t, d))
    s = make_sched("a", False, cal)
    tr = Tracer(s)
    tr.run("warmup", 16, 16, None, output_len=32)
    t0 = s.now
    samples = []
    step = s.step

    def sampling_step():
        out = step()
        samples.append((s.now - t0, len(s.running), len(s.waiting) + len(s.incoming), s.kv_usage(), s.preemptions_total))
        return out

    s.step = sampling_step
    tr.run("c512", 3 * 512, 512, None)
    first = next(t for t, d in rows if d["vllm:num_requests_running"] > 0)
    n_first = next(d["vllm:num_requests_running"] for t, d in rows if t == first)
    sim_first = next(x[0] for x in samples if x[1] >= n_first)
    L = ["| measured t | running meas / sim | waiting meas / sim | KV usage meas / sim | preemptions meas / sim |", "|---|---|---|---|---|"]
    for t, d in rows:
        ts = t - first + sim_first
        if ts < 0:
            continue
        x = min(samples, key=lambda x: abs(x[0] - ts))
        L.append(f"| {t} s | {d['vllm:num_requests_running']:.0f} / {x[1]} | {d['vllm:num_requests_waiting']:.0f} / {x[2]} "
                 f"| {d['vllm:kv_cache_usage_perc']:.2f} / {x[3]:.2f} | {d['vllm:num_preemptions_total']:.0f} / {x[4]} |")
    return "\n".join(L)


def rests_on(c: Cell) -> bool:
    """Cells the fit rests on: see docs/SIMULATOR.md (kept in one place: tests import it)."""
    return c.key in RESTS_ON


# The cells whose three figures the tests assert within 15 % (chosen after looking at which
# cells the data can support: see docs/SIMULATOR.md, "Which figures the fit rests on").
# The clean anchors: the rerun with prefix caching off (mode a) and the c=32 cells of every mode
# (0 % prefix-cache hits measured: the c=512 run before them had evicted those prompts).
RESTS_ON: set[str] = {"a@32", "b@32", "c@32", "d@32", "a-noprefix@64", "a-noprefix@256", "a-noprefix@512"}


def memory_predictions(cal: Calibration) -> dict:
    out = {}
    for k in MODES:
        s = make_sched(k, True, cal)
        f = s.facts()
        out[k] = {"weights_gib": s.est.weights_gib, "kv_cache_gib": s.est.kv_cache_gib, "kv_tokens": f.kv_cache_tokens,
                  "num_gpu_blocks": f.num_gpu_blocks, "max_concurrency": s.est.max_concurrency_reported}
    return out


def write_toml(cal: Calibration, mem: dict, fit_info: dict, path: Path, client=None) -> None:
    def d(x: dict) -> str:
        return "{ " + ", ".join(f"{k} = {v:.6g}" for k, v in x.items()) + " }"

    lines = [
        "# Simulator calibration: vLLM 0.26.0 on one NVIDIA H200, Llama-3.1-8B shape (dummy weights).",
        "# Written by bench/fit_calibration.py from bench/data/h200-vllm-0.26.0/ (a copy of",
        "# ../shared/calibration/h200-vllm-0.26.0 and the startup logs in ../shared/fixtures/vllm-0.26.0-h200).",
        "# Do not edit by hand: rerun the script. docs/SIMULATOR.md explains every factor and the fit's limits.",
        "",
        "[meta]",
        'name = "h200-vllm-0.26.0"',
        'gpu = "H200"',
        'vllm = "0.26.0"',
        'model = "llama-3.1-8b"',
        'source = "4 precision modes x 4 concurrencies (2048 in / 256 out, 2 x C prompts, prefix caching on) + clean rerun of mode a (prefix caching off, c=64/256/512) + kvtui\'s own run (docs/results/h200-abc.json: bf16, fp8 KV, fp8 weights, 25 closed-loop steps at c=32-256, prefix caching off)"',
        "",
        "[memory]",
        "# from the four startup logs (vLLM's own memory profile lines)",
        f"non_torch_gib = {mem['non_torch_gib']}",
        f"weights_extra_gib = {mem['weights_extra_gib']}  # measured weights - parameter bytes (buffers counted with the weights)",
        f"activation_scale = {mem['activation_scale']}  # bf16 peak activation / the formula's value",
        f"cuda_graph_gib_per_layer = {d(mem['cuda_graph_gib_per_layer'])}",
        f"cuda_graphs_in_budget = {'true' if mem['cuda_graphs_in_budget'] else 'false'}  # 0.26: KV = util x total - weights - activation - non-torch",
        f"nvml_overhead_gib = {mem['nvml_overhead_gib']}  # nvidia-smi used at ready - the profiled terms",
        "",
        "[step]",
        "# fitted: least squares on log errors, the 19 bench cells (out tok/s, TTFT mean, TPOT mean, ITL median) and",
        "# the 25 steps of kvtui's run (out tok/s, TPOT p50/p95, ITL p50/p99): see [fit] and docs/SIMULATOR.md",
        f"weights_bw_eff = {d(cal.weights_bw_eff)}",
        f"gemm_eff = {d(cal.gemm_eff)}",
        f"kv_bw_eff = {d(cal.kv_bw_eff)}",
        f"attn_eff = {cal.attn_eff:.6g}",
        f"step_overhead_s = {cal.step_overhead_s:.6g}",
        f"seq_overhead_s = {cal.seq_overhead_s:.6g}",
        f"mixed_overhead_s = {cal.mixed_overhead_s:.6g}",
        f"cpu_step_s = {cal.cpu_step_s:.6g}",
        f"cpu_seq_s = {cal.cpu_seq_s:.6g}  # engine CPU per sequence, overlapped with the GPU: a step takes max(GPU, CPU)",
        f"frontend_s_per_request = {cal.frontend_s_per_request:.6g}  # not fitted: the noprefix c=512 series (see docs)",
        "step_jitter = 0.0",
        "# int8 is NOT fitted (no such measurements): fp8's factors. int4 (AWQ, Marlin W4A16) is fitted by",
        "# bench/fit_int4.py on kvtui's H200 AWQ run (docs/results/h200-v2.json); see docs/SIMULATOR.md §7.",
        "",
        "[fit]",
    ]
    for k, v in fit_info.items():
        lines.append(f"{k} = {json.dumps(v)}")
    if client is not None:
        lines += [
            "",
            "[replay_client]",
            "# NOT the simulated vLLM: the client of kvtui's real H200 run (docs/results/h200-abc.json), which",
            "# bench/sim_vs_h200.py mirrors to compare with it. That client shared one httpx pool between all",
            "# slots; its sends waited longer the more streams were open. Fitted on the first request of every",
            "# wave (see docs/SIMULATOR.md): delay = send_delay_s_at_ref x (streams / 256) ** send_delay_exponent.",
            f"send_delay_s_at_ref = {client.send_delay_s_at_ref:.6g}",
            f"send_delay_exponent = {client.send_delay_exponent:.6g}",
            f"warm_wait_s = {client.warm_wait_s:.6g}  # that run's window opened at warm-up_s (window_timeout_s = 0)",
        ]
    path.write_text("\n".join(lines) + "\n")


def update_doc(table: str, marker: str = "fit") -> None:
    if not DOC.exists():
        return
    text = DOC.read_text()
    a, b = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    if a in text and b in text:
        head, rest = text.split(a, 1)
        _, tail = rest.split(b, 1)
        DOC.write_text(head + a + "\n" + table + "\n" + b + tail)


def speed() -> None:
    m, g = load_model("llama-3.1-8b"), load_gpu("H200")
    for caching in (True, False):
        s = SchedulerSim(m, g, MODES["b"], Server(max_model_len=8192, enable_prefix_caching=caching))
        for i in range(512):
            s.add(SimRequest(f"r{i}", 2048, 4000, list(range(i << 20, (i << 20) + 128)) if caching else None))
        while s.waiting or any(r.computed < r.prompt for r in s.running):
            s.step()
        n = 2000
        t = time.process_time()
        for _ in range(n):
            s.step()
        el = (time.process_time() - t) / n
        print(f"step() with 512 running, all decoding, prefix caching {'on' if caching else 'off'}: {el * 1e6:.0f} us CPU")
        s = SchedulerSim(m, g, MODES["b"], Server(max_model_len=8192, enable_prefix_caching=caching))
        for i in range(2048):
            s.add(SimRequest(f"r{i}", 2048, 256, list(range(i << 20, (i << 20) + 128)) if caching else None))
        costs = []
        while s.has_work():
            t = time.process_time()
            o = s.step()
            dt = time.process_time() - t
            if len(s.running) >= 500 and o.prefill_tokens:
                costs.append(dt)
        print(f"step() mixed (>=500 running + a prefill chunk), prefix caching {'on' if caching else 'off'}: "
              f"{np.mean(costs) * 1e6:.0f} us CPU mean, {np.max(costs) * 1e6:.0f} us max over {len(costs)} steps")
    from kvtui.simulator.engine.fast import simulate_step

    for mode in ("a", "d"):
        s = SchedulerSim(m, g, MODES[mode], Server(max_model_len=8192))
        t = time.process_time()
        r = simulate_step(s, lambda i: (2048, 256), 512, True, 2.0, 20.0, 0, 0, mode, 0)
        print(f"fast mode, mode {mode}, 512 concurrent 2048/256, warm-up 2 s + window 20 s: {time.process_time() - t:.2f} s CPU, "
              f"{r.steps} engine steps, {len(r.records)} requests, {r.t_end - r.t_start:.0f} s simulated")


def main() -> int:
    from bench.sim_vs_h200 import (REAL, ReplayClient, agreement, real_wave_heads, replay_client, simulate_run,
                                   summary_table, wave_table, write_test_data)
    from bench.sim_vs_h200 import table as run_table
    from kvtui.io.snapshot.file import load_snapshot

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="evaluate the current calibration file, no fit")
    ap.add_argument("--speed", action="store_true", help="measure step() cost and fast-mode speed")
    ap.add_argument("--out", default=str(DEFAULT_CALIBRATION))
    args = ap.parse_args()
    if args.speed:
        speed()
        return 0
    cap = load_capacity()
    cells = load_cells()
    mem = fit_memory(cap)
    doc = load_snapshot(REAL)
    heads = real_wave_heads()
    base = load_calibration(args.out) if Path(args.out).exists() else Calibration()
    for k in ("non_torch_gib", "weights_extra_gib", "activation_scale", "cuda_graph_gib_per_layer", "cuda_graphs_in_budget", "nvml_overhead_gib"):
        setattr(base, k, mem[k])
    base.frontend_s_per_request = FRONTEND_S
    x0 = np.array([pr for _a, _k, _lo, _hi, pr in PARAMS]) if not args.check else np.array([(getattr(base, a)[k] if k else getattr(base, a)) for a, k, _, _, _ in PARAMS])
    lo = np.array([q[2] for q in PARAMS])
    hi = np.array([q[3] for q in PARAMS])
    x = np.clip(x0, lo + 1e-9, hi - 1e-9)
    wcell = {c.key: cell_weight(c) for c in cells}
    client = replay_client(args.out) if args.check else ReplayClient(0.5, 2.0)
    rounds = 1 if args.check else 5
    for rnd in range(rounds):
        t0 = time.time()
        cur = calibration_from(params_to_dict(x, base), base)
        if not args.check:
            client, ccost = fit_client_delay(doc, cur, heads)
            print(f"round {rnd}: replayed client's send delay {client.send_delay_s_at_ref * 1e3:.0f} ms at 256 streams "
                  f"(cost {ccost:.3f}, {time.time() - t0:.0f} s)", flush=True)
        t0 = time.time()
        traces = build_traces(cur)
        kv = RunTrace(doc, cur, client)
        print(f"round {rnd}: traces {time.time() - t0:.1f} s, steps per session: " + ", ".join(f"{k[0]}{'' if k[1] else '-noprefix'} {len(v.feats)}" for k, v in traces.items())
              + f"; kvtui run {sum(len(v) for v in kv.F.values())} steps, vectorised figures within {kv.check(params_to_dict(x, base)) * 100:.2f} % of evaluate_step's", flush=True)
        if args.check:
            break
        t0 = time.time()
        r = least_squares(residuals, x, bounds=(lo, hi), args=(traces, cells, base, wcell, kv), x_scale=(hi - lo) / 4, diff_step=1e-3)
        moved = np.max(np.abs(r.x - x) / (hi - lo))
        x = r.x
        print(f"  fit {time.time() - t0:.1f} s, cost {r.cost:.4f}, largest move {moved:.4f} of range", flush=True)
        if moved < 0.005 and rnd > 0:
            break
    p = params_to_dict(x, base)
    # not measured here: int8 (W8A8, CUTLASS like fp8) takes fp8's factors; int4 (Marlin W4A16)
    # keeps what bench/fit_int4.py fitted on kvtui's AWQ runs (the file's own values; run that
    # script after this one if the bf16/fp8 factors moved much)
    p["weights_bw_eff"]["int8"] = p["weights_bw_eff"]["fp8"]
    p["gemm_eff"]["int8"] = p["gemm_eff"]["fp8"]
    p["weights_bw_eff"]["int4"] = base.weights_bw_eff["int4"]
    p["gemm_eff"]["int4"] = base.gemm_eff["int4"]
    cal = calibration_from(p, base)
    for a, k, _, _, _ in PARAMS:
        print(f"  {a}{'[' + k + ']' if k else ''} = {(p[a][k] if k else p[a]):.4g}")
    # the final figures: a fresh replay through SchedulerSim with the final factors (its own
    # durations decide the schedule, so the vectorised times equal the scheduler's exactly)
    if not args.check:
        traces = build_traces(cal)
    pred = predict_all(traces, p, cells)
    fit_info = {
        "objective": "sum of squared log errors: bench sweep out tok/s, TTFT mean, TPOT mean (weight 1), ITL median (0.5), clean-rerun "
                     "cells weight 2; kvtui run (0.6 per step) out tok/s, TPOT p50/p95, ITL p99 (1), ITL p50 (0.5)",
        "cells": len(cells),
        "rests_on": sorted(RESTS_ON),
        "kvtui_run": "docs/results/h200-abc.json",
        "kvtui_rests_on": ["out tok/s", "TPOT p50", "TPOT p95", "ITL p50", "ITL p99 (c >= 64)", "wave-head TTFT (the replayed client's delay)"],
    }
    if not args.check:
        write_toml(cal, mem, fit_info, Path(args.out), client)
        cal = load_calibration(args.out)
    # cross-check the vectorised times against SchedulerSim's own durations on the clean session
    s = make_sched("a", False, cal)
    tr2 = Tracer(s)
    tr2.run("x", 64, 32, None)
    F = tr2.arrays()
    own = s.now
    vect = VecModel("a").durations(F, p).sum()
    assert abs(own - vect) < 1e-6 * max(1.0, own), (own, vect)
    mem_pred = memory_predictions(cal)
    table = error_table(cells, pred, cap, mem_pred)
    table += "\n\n### The clean c=512 run over time (mode a, prefix caching off)\n\n" + series_table(cal)
    table += "\n\nFitted factors: " + ", ".join(f"{a}{'[' + k + ']' if k else ''} = {(p[a][k] if k else p[a]):.4g}" for a, k, *_ in PARAMS)
    table += f"; fixed: attn_eff = {FIXED['attn_eff']}, cpu_step_s = {FIXED['cpu_step_s']}, frontend_s_per_request = {FRONTEND_S}."
    print(table)
    update_doc(table)
    # kvtui's own run, replayed with the written file (what bench/sim_vs_h200.py prints)
    rows = simulate_run(doc, cal, client, keep=True)
    run = (f"Replayed client: staggered start over 2 s, window from 5 s (that run's rule), send delay "
           f"{client.send_delay_s_at_ref * 1e3:.0f} ms × (streams / 256)^{client.send_delay_exponent:g}.\n\n")
    run += run_table(rows) + "\n\n"
    run += summary_table(rows, {"out tok/s", "TPOT p50", "TPOT p95", "ITL p50", "ITL p99"}) + "\n\n"
    run += (f"SLO verdict (TTFT p95 ≤ 2 s, TPOT p95 ≤ 50 ms) agrees on {agreement(rows)} of {len(rows)} steps.\n\n"
            "First request of every wave (bf16 and fp8-kv: the modes whose per-request records were kept):\n\n")
    run += wave_table(rows, heads, client)
    print(run)
    update_doc(run, "h200run")
    write_test_data(doc, heads)  # the real run's figures tests/sim/test_sim_h200_run.py compares with
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
