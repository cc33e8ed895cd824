"""`kvtui run --fast`: the whole search per mode simulated offline, deterministic for a seed."""

import subprocess
import sys

from kvtui import SCENARIOS_DIR
from kvtui.explore.run import Run
from kvtui.io.scenario import load_scenario


def _answers(doc):
    return {m["name"]: m["best_concurrency"] for m in doc["modes"]}


def test_fast_demo_shows_fp8_kv_holding_more_concurrency(tmp_path):
    sc = load_scenario(SCENARIOS_DIR / "sim-demo.toml")
    doc = Run(sc, tmp_path / "a.json", fast=True).run()
    best = _answers(doc)
    assert best["fp8-kv"] > best["bf16"]
    bf16, fp8 = doc["modes"]
    assert fp8["server"]["kv_cache_tokens"] == 2 * bf16["server"]["kv_cache_tokens"]
    assert bf16["knee_limited_by"] == "kv_wall"  # the L4's KV pool is what binds bf16
    assert doc["environment"]["simulated"] and "fast" in bf16["engine_info"]["version"]
    for m in doc["modes"]:
        for s in m["steps"]:
            assert s["samples"]["ttft"] >= 40  # p95 has the samples it needs


def test_fast_is_deterministic_for_a_seed(tmp_path):
    sc = load_scenario(SCENARIOS_DIR / "sim-demo.toml", ["ramp.max=24"])
    a = Run(sc, tmp_path / "a.json", fast=True).run()
    b = Run(sc, tmp_path / "b.json", fast=True).run()
    strip = lambda d: [[(s["load"], s["ttft_ms"]["p95"], s["tpot_ms"]["p95"], s["output_tok_s"]) for s in m["steps"]] for m in d["modes"]]
    assert strip(a) == strip(b)


def test_fast_needs_the_sim_engine(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text('[server]\nengine = "external"\nurl = "http://127.0.0.1:9"\n')
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", str(p), "--headless", "--fast"], capture_output=True, text=True)
    assert r.returncode == 2 and "--fast" in r.stderr
