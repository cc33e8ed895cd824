"""The simulator against kvtui's own real H200 run (docs/results/h200-abc.json), step by step.

Every step of that run (vLLM 0.26.0, 8B shape, 2048 in / 256 out, prefix caching off, closed
loop, bf16 / fp8 KV / fp8 weights at c = 32-256) is replayed offline with the calibrated model
and that run's client (bench/sim_vs_h200.py prints the full table; docs/SIMULATOR.md, "Against
kvtui's own H200 run", explains it). The numbers compared with are copied, small, into
tests/sim/data/h200_abc_run.json (bench/sim_vs_h200.py --test-data writes them).

Asserted within stated tolerances: the figures the fit rests on (out tok/s, TPOT p50/p95,
ITL p50, ITL p99 at c >= 64, and the TTFT of the first request of every wave, on which the
replayed client's send delay is fitted). Not the TTFT percentiles: the run's own repeats of a
step differ by up to 2.4x there; only what the replay must show (a prefill queue at c=256, none
at c=32) and the SLO verdict agreement are checked.
"""

from __future__ import annotations

import json
import statistics
import tomllib
from pathlib import Path

import pytest

from kvtui.core.evaluate import StepContext, evaluate_step
from kvtui.io.scenario.schema import Mode, Server, Slo
from kvtui.simulator.engine.fast import simulate_step
from kvtui.simulator.engine.scheduler import SchedulerSim
from kvtui.simulator.model.catalog import load_gpu, load_model
from kvtui.simulator.model.roofline import DEFAULT_CALIBRATION

DATA = json.loads((Path(__file__).parent / "data" / "h200_abc_run.json").read_text())
CLIENT = tomllib.loads(DEFAULT_CALIBRATION.read_text())["replay_client"]

# Tolerances (relative error, simulated / real - 1). Fitted values and the worst step are in docs/SIMULATOR.md.
TOL_TOK = 0.08
TOL_TPOT_P95 = 0.10
TOL_TPOT_P50, TOL_TPOT_P50_MEAN = 0.30, 0.15
TOL_ITL_P50, TOL_ITL_P50_MEAN = 0.35, 0.10  # worst: fp8 weights at c=256 (real 34 ms: not a decode step the model knows)
TOL_ITL_P99 = 0.08  # the full 8192-token prefill step; c >= 64 (at c=32 two prompts met by the real client's jitter)
TOL_WAVE_HEAD = 0.25
MIN_SLO_AGREEMENT = 19  # of 25; the run's own repeats flipped verdict at bf16 c=96 (2 of 4) and fp8 KV c=64 (1 of 4)


def _wave_heads(records, skip_s=3.0, quiet_s=0.5, gap_s=1.0):
    """Same rule as bench/sim_vs_h200.py wave_heads: TTFT of the first send of every wave."""
    sel = sorted((r for r in records if r.t_first is not None), key=lambda r: r.t_sent)
    firsts = sorted(r.t_first for r in sel)
    out, last = [], -1e9
    for r in sel:
        if r.t_sent - sel[0].t_sent < skip_s:
            continue
        prev = max((f for f in firsts if f < r.t_sent), default=-1e9)
        if r.t_sent - prev > quiet_s:
            if r.t_sent - last > gap_s:
                out.append(r.t_first - r.t_sent)
            last = r.t_sent
    return out


@pytest.fixture(scope="module")
def replay() -> list[tuple[dict, dict, list[float]]]:
    sc = DATA["scenario"]
    server = Server(max_model_len=sc["max_model_len"], gpu_memory_utilization=sc["gpu_memory_utilization"],
                    enable_prefix_caching=sc["enable_prefix_caching"])
    slo = Slo(latency=dict(sc["slo"]))
    a, p = CLIENT["send_delay_s_at_ref"], CLIENT["send_delay_exponent"]
    delay = lambda streams: a * (streams / 256) ** p  # noqa: E731
    stagger = min(2.0, max(0.2, sc["warmup_s"] / 2))
    model, gpu = load_model("llama-3.1-8b"), load_gpu("H200")
    out = []
    for m in DATA["modes"]:
        sched = SchedulerSim(model, gpu, Mode(m["name"], kv_cache_dtype=m["kv_cache_dtype"], quantization=m["quantization"]), server, seed=sc["seed"])
        counter = 0
        for real in (s for s in DATA["steps"] if s["mode"] == m["name"]):
            res = simulate_step(sched, lambda i: (sc["prompt_tokens"], sc["output_tokens"]), real["load"], True, sc["warmup_s"], sc["window_s"],
                                0, sc["seed"], m["name"], real["index"], counter_start=counter, stagger_s=stagger,
                                warm_wait_s=CLIENT["warm_wait_s"], send_delay=delay)
            counter += len(res.records) + 1
            sim = evaluate_step(res.records, StepContext(load=real["load"], t_window_start=res.window_start, t_window_end=res.window_end), slo)
            out.append((real, sim, _wave_heads(res.records)))
    return out


def _errs(replay, real_key, sim_key, pct, pred=lambda real: True):
    out = []
    for real, sim, _ in replay:
        if not pred(real):
            continue
        s = sim[sim_key] if pct is None else sim[sim_key][pct]
        out.append((f"{real['mode']}@{real['load']:g}#{real['index']}", s / real[real_key] - 1))
    return out


def test_replays_every_step(replay):
    assert len(replay) == 25


def test_output_throughput(replay):
    for name, e in _errs(replay, "output_tok_s", "output_tok_s", None):
        assert abs(e) <= TOL_TOK, (name, e)


def test_tpot(replay):
    for name, e in _errs(replay, "tpot_p95_ms", "tpot_ms", "p95"):
        assert abs(e) <= TOL_TPOT_P95, (name, e)
    e50 = _errs(replay, "tpot_p50_ms", "tpot_ms", "p50")
    for name, e in e50:
        assert abs(e) <= TOL_TPOT_P50, (name, e)
    assert statistics.mean(abs(e) for _, e in e50) <= TOL_TPOT_P50_MEAN


def test_itl(replay):
    e50 = _errs(replay, "itl_p50_ms", "itl_ms", "p50")
    for name, e in e50:
        assert abs(e) <= TOL_ITL_P50, (name, e)
    assert statistics.mean(abs(e) for _, e in e50) <= TOL_ITL_P50_MEAN
    for name, e in _errs(replay, "itl_p99_ms", "itl_ms", "p99", lambda r: r["load"] >= 64):
        assert abs(e) <= TOL_ITL_P99, (name, e)


def test_wave_heads(replay):
    """The TTFT of the first request of every wave, per mode and load (median over its repeats'
    waves): the engine's path for a lone request plus the replayed client's send delay."""
    groups: dict[tuple[str, float], tuple[list, list]] = {}
    for real, _sim, heads in replay:
        if real["wave_head_ttft_ms"]:
            g = groups.setdefault((real["mode"], real["load"]), ([], []))
            g[0].extend(real["wave_head_ttft_ms"])
            g[1].extend(h * 1e3 for h in heads)
    assert len(groups) == 9  # bf16 at 64-256, fp8 KV at 32-256: the modes whose records were kept
    for key, (real, sim) in groups.items():
        assert sim, key
        e = statistics.median(sim) / statistics.median(real) - 1
        assert abs(e) <= TOL_WAVE_HEAD, (key, e)


def test_prefill_queue_at_c256_none_at_c32(replay):
    """What the replay was wrong about before: a real prefill queue at c=256 (TTFT p50 4.7 s,
    up to 166 waiting) and none at c=32 (125 ms)."""
    for real, sim, _ in replay:
        if real["load"] == 256 and real["mode"] in ("bf16", "fp8-kv"):
            assert sim["ttft_ms"]["p50"] >= 2000, real
        if real["load"] == 32:
            assert sim["ttft_ms"]["p50"] <= 300, real


def test_slo_verdicts_mostly_agree(replay):
    agree = sum(1 for real, sim, _ in replay if sim["passed"] == real["passed"])
    assert agree >= MIN_SLO_AGREEMENT
