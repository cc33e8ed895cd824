"""The capacity the prefix cache gives each mode (kvtui.explore.prefix_gain): on the simulator, with a
cache that binds, fp8 KV hits more than bf16 and each mode names its knee against the knee the offline
simulator finds with prefix caching off; no prompt sharing or no prefix caching, no gain named."""

from __future__ import annotations

import csv
import io
import json

import pytest

from kvtui.io.scenario import load_scenario


@pytest.fixture(scope="module")
def trace_doc(tmp_path_factory):
    from kvtui.explore.run import Run

    out = tmp_path_factory.mktemp("gain") / "s.json"
    return json.loads(json.dumps(Run(load_scenario("sim-trace"), out, fast=True).run()))


def test_each_mode_names_the_capacity_the_prefix_cache_gives(trace_doc):
    from kvtui.report.text import caveats, comparison

    rows = {r["mode"]: r for r in comparison(trace_doc)["rows"]}
    assert rows["fp8-kv"]["prefix_cache_hit_rate_at_knee"] > rows["bf16"]["prefix_cache_hit_rate_at_knee"]
    words = []
    for m in trace_doc["modes"]:
        g = m["prefix_cache_gain"]
        assert g["simulated"] is True and g["basis"] == "simulated"
        assert g["knee"] == m["best_concurrency"]
        assert g["knee_no_cache"] is not None and g["gain"] > 0
        assert g["gain"] == pytest.approx(m["best_concurrency"] - g["knee_no_cache"])
        assert g["gain_pct"] == pytest.approx(g["gain"] / g["knee_no_cache"], abs=1e-4)
        words.append(f"{m['name']} {m['best_concurrency']:g} vs {g['knee_no_cache']:g} without")
    line = [c for c in caveats(trace_doc) if c.startswith("prefix cache, capacity gained")]
    assert len(line) == 1 and "SIMULATED" in line[0], line
    assert all(w in line[0] for w in words), (words, line)


def test_the_exports_carry_the_gain(trace_doc):
    from kvtui.report.csv_export import render_csv
    from kvtui.report.markdown import render_markdown

    rows = list(csv.DictReader(io.StringIO(render_csv(trace_doc))))
    by_mode = {m["name"]: m["prefix_cache_gain"] for m in trace_doc["modes"]}
    for r in rows:
        assert float(r["knee_no_prefix_cache"]) == by_mode[r["mode"]]["knee_no_cache"]
        assert float(r["prefix_cache_gain"]) == by_mode[r["mode"]]["gain"]
    assert "capacity gained" in render_markdown(trace_doc)


def test_a_real_servers_gain_says_it_is_predicted(trace_doc):
    from kvtui.report.text import caveats

    doc = json.loads(json.dumps(trace_doc))
    for m in doc["modes"]:
        m["prefix_cache_gain"]["basis"] = "predicted"
    line = [c for c in caveats(doc) if c.startswith("prefix cache, capacity gained")]
    assert line and "predicted by the simulator" in line[0] and "not measured" in line[0]


def test_no_prompt_sharing_names_no_gain(tmp_path):
    from kvtui.explore.run import Run
    from kvtui.report.csv_export import render_csv
    from kvtui.report.text import caveats

    doc = Run(load_scenario("sim-demo", ["ramp.max=12"]), tmp_path / "s.json", fast=True).run()
    assert doc["scenario"]["server"].get("enable_prefix_caching") is not False  # the cache is on: nothing shared
    assert not any("prefix_cache_gain" in m for m in doc["modes"])
    assert not any("capacity gained" in c for c in caveats(doc))
    assert "prefix_cache_gain" not in render_csv(doc).splitlines()[0]


def test_prefix_caching_off_names_no_gain():
    from kvtui.explore.prefix_gain import prefix_gain
    from kvtui.simulator.model.roofline import Calibration

    sc = load_scenario("sim-trace", ["server.enable_prefix_caching=false"])
    assert prefix_gain(sc, sc.modes[0], Calibration(), 20.0, None) is None


def test_a_real_server_gets_both_knees_from_the_simulator():
    """On a real server the no-cache knee is not measured: the gain is the simulator's knee with the cache
    against its knee without, never the measured knee against a simulated one."""
    from kvtui.explore.prediction import Target
    from kvtui.explore.prefix_gain import prefix_gain
    from kvtui.simulator.model.roofline import Calibration

    sc = load_scenario("sim-trace")
    sc.server.engine = "vllm"
    g = prefix_gain(sc, sc.modes[0], Calibration(), 999.0, None, Target("L4", "llama-3.1-8b"))
    assert g is not None and g["basis"] == "predicted" and g["simulated"] is True
    assert g["knee"] != 999.0 and g["knee_no_cache"] is not None
    assert g["gain"] == pytest.approx(g["knee"] - g["knee_no_cache"]) and g["gain"] > 0
