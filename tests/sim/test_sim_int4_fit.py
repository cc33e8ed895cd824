"""The simulator's int4 (AWQ) factors against kvtui's two real H200 AWQ runs.

bench/fit_int4.py fitted them on the whole-GPU run (docs/results/h200-v2.json) and held the
KV-bound run out (docs/results/h200-kvb.json). Both are replayed here step by step with the
shipped calibration and the replay of bench/sim_vs_h200.py (same loads, client and windows).
Tolerances sit a little above what docs/SIMULATOR.md §7 ("The int4 fit") reports, so a refit
or a scheduler change that undoes the fit fails here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from kvtui.io.snapshot.file import load_snapshot
from kvtui.simulator.model.roofline import load_calibration

ROOT = Path(__file__).resolve().parents[2]
MODE = "awq-int4+fp8-kv"


@pytest.fixture(scope="module")
def replay():
    spec = importlib.util.spec_from_file_location("sim_vs_h200", ROOT / "bench" / "sim_vs_h200.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("snapshot,tok,tpot,agree", [
    ("h200-v2.json", 0.12, 0.05, 11),   # fitted on: 13 steps
    ("h200-kvb.json", 0.08, 0.05, 7),   # held out: 7 steps
])
def test_int4_steps_replay_within_the_fit(replay, snapshot, tok, tpot, agree):
    doc = load_snapshot(ROOT / "docs" / "results" / snapshot)
    client = replay.replay_client(None, replay.client_kind(doc)[0], doc)
    rows = replay.simulate_run(doc, load_calibration(), client, modes=[MODE])
    assert rows and all(r.mode == MODE for r in rows)
    s = replay.summary(rows)
    assert s["out tok/s"]["mean_abs"] <= tok, s["out tok/s"]
    assert s["TPOT p95"]["mean_abs"] <= tpot, s["TPOT p95"]
    assert s["ITL p99"]["mean_abs"] <= 0.06, s["ITL p99"]  # the 8k-token prefill step: the GEMM factor
    assert replay.agreement(rows) >= agree


def test_the_held_out_knee(replay):
    doc = load_snapshot(ROOT / "docs" / "results" / "h200-kvb.json")
    awq = next(m for m in doc["modes"] if m["name"] == MODE)
    client = replay.replay_client(None, replay.client_kind(doc)[0], doc)
    grid = replay.knee_sweep(doc, load_calibration(), client, loads=[160.0, 176.0, 192.0], modes=[MODE])
    assert awq["best_concurrency"] == 175
    assert replay.knee_of(grid[MODE]) == 176  # the 16-wide grid's load next to the real 175 (188 failed there)
