"""The comparison's arithmetic, checked against the step data of a real three-mode simulator run."""

from __future__ import annotations

import copy
import math

import pytest

from kvtui.report.compare import compare_modes
from kvtui.report.text import COMPARISON_HEADERS, comparison_headers, comparison_rows


def _mean(xs):
    return sum(xs) / len(xs)


def test_three_mode_comparison_matches_the_steps(three_modes):
    doc = three_modes.doc
    comp = doc["comparison"]
    assert [m["name"] for m in doc["modes"]] == ["baseline", "fp8-kv", "w-int4"]
    assert comp["baseline"] == "baseline" and comp["note"] is None
    # The knees the simulator was given: the search found each mode's own.
    assert [m["best_concurrency"] for m in doc["modes"]] == [6, 8, 4]
    assert [m["search"]["first_fail"] for m in doc["modes"]] == [7, 9, 5]
    rows = {r["mode"]: r for r in comp["rows"]}
    base = rows["baseline"]
    hourly, gpus = 3.5, 1
    for m in doc["modes"]:
        r = rows[m["name"]]
        best = m["best_concurrency"]
        at = [s for s in m["steps"] if s["load"] == best and s["passed"]]
        assert len(at) == 2  # the search step and its confirmation
        assert r["best"] == best
        out_tok = _mean([s["output_tok_s"] for s in at])
        in_tok = _mean([s["input_tok_s"] for s in at])
        assert r["output_tok_s"] == round(out_tok, 1)
        assert r["input_tok_s"] == round(in_tok, 1)
        # $/Mtok at the knee, output and input separately; no failures, so billed share 1.
        assert all(s["error_rate"] == 0 for s in at)
        assert r["usd_per_mtok_out"] == round(hourly * gpus / 3600 / out_tok * 1e6, 4)
        assert r["usd_per_mtok_in"] == round(hourly * gpus / 3600 / in_tok * 1e6, 4)
        # Ratios and changes against the baseline.
        assert r["best_x"] == round(best / 6, 3)
        assert r["tok_s_x"] == round(r["output_tok_s"] / base["output_tok_s"], 3)
        assert r["kv_tokens"] == m["server"]["kv_cache_tokens"]
        assert r["kv_tokens_x"] == round(m["server"]["kv_cache_tokens"] / doc["modes"][0]["server"]["kv_cache_tokens"], 3)
        assert r["cost_out_change"] == round(r["usd_per_mtok_out"] / base["usd_per_mtok_out"] - 1, 4)
        assert r["cost_in_change"] == round(r["usd_per_mtok_in"] / base["usd_per_mtok_in"] - 1, 4)
        # Memory and the knee's neighbourhood.
        # The peak over the steps that have a reading (a step without one is skipped, not a crash:
        # see test_metrics_ranges for the reading a starved telemetry thread falls back to).
        mems = [s["gpu_mem_used_gib_max"] for s in m["steps"] if s["gpu_mem_used_gib_max"] is not None]
        assert mems and r["peak_gpu_mem_gib"] == round(max(mems), 2)
        assert r["weights_gib"] == m["server"]["weights_gib"]
        assert r["preemptions_at_knee"] == max(s["preemptions"] for s in at)
        nxt = [s for s in m["steps"] if s["load"] == best + 1]
        assert nxt and all(s["passed"] is False for s in nxt)
        # What limited the next step, as the step says it: decode here, unless the host starved the
        # client (a loaded CI machine), which the step then says instead of blaming the server.
        # The row names the last of them (a step measured again after a starved client is the later word).
        assert r["knee_limited_by"] == nxt[-1]["limited_by"] and r["knee_limits"] == sorted({s["limited_by"] for s in nxt})
        assert all(s["limited_by"] == "decode" or (s["limited_by"] == "client" and s["client_limited"]) for s in nxt)
        # The simulator has no weights: the quality guard skipped, saying why.
        assert r["quality"] == {"skipped": "simulated engine: no model weights, outputs are noise"}
    assert rows["fp8-kv"]["best_x"] == 1.333 and rows["w-int4"]["best_x"] == 0.667
    # A mode that serves more at the SLO makes output tokens cheaper, one that serves fewer dearer.
    assert rows["fp8-kv"]["cost_out_change"] < 0 < rows["w-int4"]["cost_out_change"]
    # The stored comparison is exactly what a replay recomputes.
    assert compare_modes(doc) == comp


def test_comparison_rows_are_the_table_the_tui_shows(three_modes):
    doc = three_modes.doc
    rows = comparison_rows(doc)
    assert len(rows) == 3 and all(len(r) == len(COMPARISON_HEADERS) == len(comparison_headers(doc)) for r in rows)
    by = {r[0]: r for r in rows}
    h = list(COMPARISON_HEADERS)
    assert by["fp8-kv"][h.index("max conc @SLO")] == "8" and by["fp8-kv"][2] == "1.33×"
    assert by["w-int4"][2] == "0.67×"
    r = {x["mode"]: x for x in doc["comparison"]["rows"]}["fp8-kv"]
    assert by["fp8-kv"][h.index("$/Mtok out")] == f"{r['usd_per_mtok_out']:,.3f}"
    assert by["fp8-kv"][12] == f"{r['cost_out_change']:+.1%}"
    assert by["baseline"][-1] == "skipped"
    # A document without a stored comparison (a run still going) gets the same rows.
    live = copy.deepcopy(doc)
    del live["comparison"]
    assert comparison_rows(live) == rows


def _doc(steps_by_mode, count_failed=True, hourly=2.0, gpus=2):
    modes = []
    for name, (best, steps) in steps_by_mode.items():
        modes.append({"name": name, "best_concurrency": best, "search": {"first_fail": None}, "steps": steps,
                      "server": {"kv_cache_tokens": 1000, "weights_gib": 1.0}})
    return {"scenario": {"modes": [{"name": n} for n in steps_by_mode], "cost": {"gpu_hourly_usd": hourly, "gpus": gpus,
                                                                                 "count_failed": count_failed}},
            "modes": modes}


STEP = {"load": 8, "passed": True, "output_tok_s": 1000.0, "input_tok_s": 4000.0, "error_rate": 0.2, "preemptions": 3}


@pytest.mark.parametrize("count_failed,share", [(True, 1.0), (False, 0.8)])
def test_failed_requests_are_billed_as_the_scenario_says(count_failed, share):
    doc = _doc({"m": (8, [dict(STEP)])}, count_failed=count_failed)
    r = compare_modes(doc)["rows"][0]
    # 2 GPUs at $2/h = $0.001111/s over 1000 good output tok/s.
    assert r["usd_per_mtok_out"] == round(2.0 * 2 / 3600 / 1000.0 * 1e6 * share, 4)
    assert r["usd_per_mtok_in"] == round(2.0 * 2 / 3600 / 4000.0 * 1e6 * share, 4)
    assert r["billed_share"] == share and r["error_rate_at_knee"] == 0.2


def test_baseline_follows_the_scenario_order_and_says_when_it_has_no_result():
    s = dict(STEP)
    doc = _doc({"first": (None, []), "second": (8, [s]), "third": (4, [dict(s, load=4, output_tok_s=500.0)])})
    comp = compare_modes(doc)
    assert comp["baseline"] == "second" and "first" in comp["note"]
    rows = {r["mode"]: r for r in comp["rows"]}
    assert rows["third"]["best_x"] == 0.5 and rows["first"]["best_x"] is None
    # Modes listed in another order (a journal rebuilt mid-resume) keep the scenario's baseline.
    doc2 = _doc({"b": (4, [dict(s, load=4)]), "a": (8, [s])})
    doc2["scenario"]["modes"] = [{"name": "a"}, {"name": "b"}]
    assert compare_modes(doc2)["baseline"] == "a"
    # Nothing passed anywhere: said, not invented.
    none = compare_modes(_doc({"x": (None, [])}))  # no step finished at all: nothing was measured (issue 49)
    assert none["baseline"] is None and "stopped before any step finished" in none["note"]
    assert comparison_rows({"modes": none["rows"], "comparison": none})[0][1] == "—"
    failed = compare_modes(_doc({"x": (None, [dict(s, passed=False)])}))  # steps measured, none passed
    assert failed["baseline"] is None and "no mode met the SLO" in failed["note"]


def test_an_undecided_or_failed_step_at_the_best_load_is_not_averaged_in():
    steps = [dict(STEP), dict(STEP, passed=None, output_tok_s=1.0), dict(STEP, passed=False, output_tok_s=2.0)]
    r = compare_modes(_doc({"m": (8, steps)}))["rows"][0]
    assert r["output_tok_s"] == 1000.0 and r["knee_steps"] == 1
    assert math.isclose(r["usd_per_mtok_out"], 2.0 * 2 / 3.6, rel_tol=1e-4)
