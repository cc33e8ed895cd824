"""Equal quality without a server: TOST and the items it needs, the cost range, answers under load
against alone, the harness's per-item rows as kvtui task results, the multi-needle task, and the
[quality] suite fields' validation."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kvtui.quality.equivalence import MAX_ITEMS, _half, cost_range, items_needed, pooled_pairs, range_text, tost
from kvtui.quality.harness import EVAL_DIR, spec_for, to_task_result
from kvtui.quality.tasks import Sizer, needle_items, score
from kvtui.quality.under_load import compare_under_load, sentence


def _task(oks: list[bool], shas: list[str] | None = None) -> dict:
    items = [{"key": f"k{i}", "ok": ok, "text_sha": (shas or [str(ok)] * len(oks))[i]} for i, ok in enumerate(oks)]
    return {"n": len(oks), "correct": sum(oks), "accuracy": sum(oks) / len(oks), "items": items}


def test_tost_shows_equivalence_only_when_the_interval_fits_the_margin():
    same = tost(0, 0, 400, 2.0)  # 400 items, no discordant pair: the interval is ±1/n
    assert same["shown"] and same["items_needed"] is None and same["ci90_pt"][0] > -2.0
    small = tost(0, 0, 20, 2.0)  # 20 items cannot rule out 2 pt: one pair is 5 pt
    assert not small["shown"] and small["items_needed"] == 51  # 1/n' < 0.02 first at n' = 51
    assert tost(0, 0, small["items_needed"], 2.0)["shown"]
    assert not tost(0, 0, small["items_needed"] - 1, 2.0)["shown"]
    drop = tost(10, 0, 100, 5.0)  # Δ = −10 pt, past a 5 pt margin: no n shows it
    assert not drop["shown"] and drop["items_needed"] is None and items_needed(10, 0, 100, 5.0) is None


@settings(max_examples=60, deadline=None)
@example(3, 5, 126, 1.5)  # found by chance on a clean clone: within the margin by 0.01 pt
@given(st.integers(0, 30), st.integers(0, 30), st.integers(0, 200), st.floats(0.5, 20))
def test_items_needed_is_the_first_n_that_shows_it(b, c, same, margin):
    n = b + c + same
    if n == 0:
        return
    need = items_needed(b, c, n, margin)
    if need is None:  # no n: the observed Δ is at or past the margin, or within it by so little that
        # more than MAX_ITEMS items would be needed (b=3, c=5 of 134: Δ 1.49 pt on a 1.5 pt margin)
        d = (c - b) / n
        assert abs(d) * 100 >= margin or _half((b + c) / n, d, MAX_ITEMS) >= margin / 100 - abs(d)
        return
    # The same rates: shown at this n exactly when the first n that shows it is at most n.
    assert (need <= n) == tost(b, c, n, margin)["shown"]


def test_cost_range_carries_the_knee_and_the_quality_interval():
    exact = cost_range(1.0, 0.8, (0.0, 0.0))
    assert exact == {"lo": 1.0, "hi": 1.0, "knee_exact": True, "quality_open": False}
    assert "knee taken as exact" in range_text(exact)
    # Knee 8 within [6, 10]: $/Mtok from 8/10 to 8/6 of the plain figure; Δ in [−0.2, +0.1] of 0.8 accuracy.
    r = cost_range(1.0, 0.8, (-0.2, 0.1), knee=8, knee_interval={"lo": 6, "hi": 10})
    assert r["lo"] == pytest.approx(0.8) and r["hi"] == pytest.approx(8 / 6 * 0.8 / 0.6, rel=1e-5)
    assert not r["knee_exact"]
    assert cost_range(1.0, 0.5, (-0.6, 0.0))["hi"] is None  # the mode's accuracy could be 0: open above
    assert cost_range(None, 0.5, None) is None
    # An interval that does not hold the knee is not used (a malformed snapshot): the knee is exact.
    assert cost_range(1.0, 0.5, None, knee=8, knee_interval={"lo": 9, "hi": 12})["knee_exact"]


@settings(max_examples=60, deadline=None)
@given(st.floats(0.01, 10), st.floats(0.05, 1), st.floats(-0.5, 0), st.floats(0, 0.5), st.integers(1, 64),
       st.integers(0, 32), st.integers(0, 32))
def test_cost_range_brackets_the_point_figure(usd, acc, dlo, dhi, knee, below, above):
    r = cost_range(usd, acc, (dlo, dhi), knee=knee, knee_interval={"lo": max(1, knee - below), "hi": knee + above})
    assert r is not None and r["lo"] <= usd + 1e-6  # the figures are rounded to 6 places
    if r["hi"] is not None:
        assert r["lo"] <= r["hi"] and r["hi"] >= usd - 1e-6


def test_pooled_pairs_add_the_ground_truth_tasks():
    ref = {"a": _task([True, True, False]), "b": _task([True, False]), "agreement": {"outputs": []}}
    mode = {"a": _task([True, False, True]), "b": _task([False, False]), "agreement": {"outputs": []}}
    assert pooled_pairs(ref, mode) == (2, 1, 5)


def test_answers_under_load_against_alone():
    alone = {"t": _task([True] * 8 + [False] * 2, shas=[f"s{i}" for i in range(10)])}
    shas = [f"s{i}" for i in range(10)]
    shas[0], shas[9] = "x0", "x9"  # two answers changed: one right one turned wrong, one wrong one stayed wrong
    load = {"t": _task([False] + [True] * 7 + [False] * 2, shas=shas), "gone": {"not_run": "x"}}
    v = compare_under_load(alone, load, 2.0)
    assert v["changed"] == 2 and v["compared"] == 10 and v["tasks"]["t"]["changed"] == 2
    assert v["delta_pt"] == -10.0 and v["verdict"] == "within noise" and v["only_alone"] == 1
    s = sentence("fp8-kv", {"load": 4, "vs_alone": v, "preemptions": 3})
    assert s == "fp8-kv at its knee (4): 2 of 10 answers changed, accuracy Δ -10.0 pt within noise; 3 preemptions " \
                "while they ran"
    assert "not measured (no knee)" in sentence("m", {"skipped": "no knee"})


def test_harness_samples_become_paired_task_results():
    samples = [{"doc_id": i, "doc_hash": f"d{i}", "prompt_hash": f"p{i}", "target": "6", "answer": a, "got": a,
                "value": v, "text_sha": "h"} for i, (a, v) in enumerate([("6", 1.0), ("7", 0.0), ("9", 1.0)])]
    t = to_task_result("kvtui_arith", {"status": "ok", "metric": "exact_match", "filter": "last-number",
                                       "samples": samples, "num_fewshot": 0}, "lm-eval 0.4.13")
    assert (t["n"], t["correct"], t["accuracy"]) == (3, 2, 0.6667) and t["ci"][0] < 0.6667 < t["ci"][1]
    assert t["scoring"] == "lm-eval 0.4.13: exact_match (last-number)" and [r["ok"] for r in t["items"]] == [1, 0, 1]
    # The key pairs the same document asked the same way, and nothing else.
    again = to_task_result("kvtui_arith", {"status": "ok", "samples": samples}, "lm-eval")
    assert [r["key"] for r in again["items"]] == [r["key"] for r in t["items"]]
    other = to_task_result("kvtui_arith", {"status": "ok", "samples": [dict(samples[0], prompt_hash="q")]}, "x")
    assert other["items"][0]["key"] != t["items"][0]["key"]
    gone = to_task_result("gsm8k", {"status": "not run", "why": "its dataset is not in the local cache"}, "lm-eval")
    assert gone["not_run"].startswith("its dataset") and gone["n"] is None and gone["items"] == []


def test_the_shipped_harness_task_has_its_data_in_the_tree():
    task = EVAL_DIR / "kvtui_arith" / "kvtui_arith.yaml"
    text = task.read_text()
    assert "dataset_path: json" in text and "task: kvtui_arith" in text
    rows = [json.loads(x) for x in (task.parent / "arith.jsonl").read_text().splitlines()]
    assert len(rows) >= 200 and len({r["id"] for r in rows}) == len(rows)
    for r in rows:  # the ground truth is the arithmetic itself
        a, op, b = r["question"].removeprefix("What is ").removesuffix("?").split()
        assert str(eval(f"{int(a)} {op} {int(b)}")) == r["answer"]


def test_needle_items_hide_several_keys_and_ask_for_one():
    sizer = Sizer(lambda msgs: sum(len(m["content"]) for m in msgs) // 4 + 10)
    items = needle_items(6, [512, 2048], seed=3, sizer=sizer)
    assert len(items) == 6 and {i.meta["length"] for i in items} == {512, 2048}
    for it in items:
        text = it.messages[0]["content"]
        assert text.count("One of the special magic numbers for") == 4 and it.expected[0] in text
        assert abs(sizer.count(it.messages) - it.meta["length"]) <= 40
        others = [w for w in text.split() if w.rstrip(".").isdigit() and len(w.rstrip(".")) == 7]
        wrong = next(w.rstrip(".") for w in others if w.rstrip(".") != it.expected[0])
        assert score(it, it.expected[0]) and not score(it, wrong)  # a distractor's number is wrong
    assert [i.key() for i in needle_items(6, [512, 2048], 3, sizer)] == [i.key() for i in items]


def test_suite_fields_are_validated_with_their_names(tmp_path):
    from kvtui.errors import ScenarioError
    from kvtui.io.scenario.loader import load_scenario

    f = tmp_path / "s.toml"
    f.write_text('[quality]\nenabled = true\nsuites = ["gsm8k", "bad name", "gsm8k", "passkey"]\n'
                 'suite_paths = ["nowhere"]\nsuite_api = "chatt"\nsuite_limit = -1\nsuite_fewshot = -2\n')
    with pytest.raises(ScenarioError) as e:
        load_scenario(str(f))
    text = "\n".join(e.value.problems)
    for field in ("quality.suites", "quality.suite_paths", "quality.suite_api", "quality.suite_limit",
                  "quality.suite_fewshot"):
        assert field in text, (field, text)
    assert "'bad name'" in text and "named twice" in text and "built-in" in text and "did you mean" in text
    ok = tmp_path / "ok.toml"
    (tmp_path / "tasks").mkdir()
    ok.write_text('[quality]\nenabled = true\nsuites = ["kvtui_arith"]\nsuite_paths = ["tasks"]\nsuite_limit = 20\n')
    sc = load_scenario(str(ok))
    assert sc.quality.suite_paths == [str(tmp_path / "tasks")]

    class Ep:
        base_url, model, max_model_len = "http://127.0.0.1:1", "m", 2048

    spec = spec_for(Ep(), sc)
    assert spec["include"] == [str(EVAL_DIR), str(tmp_path / "tasks")] and spec["suites"][0]["limit"] == 20
    assert "key" not in json.dumps(spec).lower()  # the API key travels in the environment only


def _row(mode: str, usd: float, eq: dict, rng: dict | None = None) -> dict:
    return {"mode": mode, "best": 8, "usd_per_mtok_out": usd, "usd_per_mtok_out_qadj_range": rng,
            "quality": {"suite": {"equivalence": eq, "tasks": {}}}}


def test_cheapest_at_equal_quality_takes_only_modes_shown_equal():
    from kvtui.report.answer import equal_quality

    rows = [_row("bf16", 1.0, {"reference": True, "margin_pt": 2.0}),
            _row("fp8-kv", 0.6, {"shown": False, "margin_pt": 2.0, "n": 20, "items_needed": 410}),
            _row("fp8-w", 0.8, {"shown": True, "margin_pt": 2.0, "n": 400},
                 {"lo": 0.7, "hi": 0.9, "knee_exact": False, "quality_open": False})]
    q = equal_quality(rows)
    assert q is not None and q["winners"] == ["fp8-w"] and q["value"] == 0.8  # fp8-kv is cheaper, not shown equal
    assert "within 2 pt of the reference (TOST, 95 %)" in q["text"] and "$0.700–0.900" in q["text"]
    assert "fp8-kv (about 410 items needed)" in q["text"]
    assert "overlaps" not in q["text"]  # bf16's range is not known here: nothing to say
    assert equal_quality([{"mode": "a", "best": 1, "quality": None}]) is None  # no suite: the old question stands
    # The cheapest by its point figure, whose range meets another equal mode's: said, with that range.
    rows[0]["usd_per_mtok_out_qadj_range"] = {"lo": 0.85, "hi": 1.1, "knee_exact": False, "quality_open": False}
    q = equal_quality(rows)
    assert q["winners"] == ["fp8-w"] and "its range overlaps bf16's ($0.850–1.100)" in q["text"], q["text"]
    rows[0]["usd_per_mtok_out_qadj_range"] = {"lo": 0.95, "hi": 1.1, "knee_exact": False, "quality_open": False}
    assert "overlaps" not in equal_quality(rows)["text"]


def test_markdown_shows_the_knee_and_the_equal_quality_sections():
    from kvtui.report.quality_md import at_knee_section, equal_quality_section

    v = {"changed": 2, "compared": 150, "delta_pt": -0.7, "delta_ci_pt": [-2.1, 0.7], "p_value": 0.5,
         "verdict": "within noise", "tasks": {"agreement": {"top1_agreement": 0.945}}}
    doc = {"modes": [{"name": "fp8-kv", "quality": {"at_knee": {"load": 64, "generator_load": 32, "concurrency": 32,
                                                               "vs_alone": v, "preemptions": 3, "wall_s": 41}}},
                     {"name": "bf16", "quality": {"at_knee": {"skipped": "no load met the SLO: there is no knee"}}}]}
    text = "\n".join(at_knee_section(doc))
    assert "### Quality at the knee" in text and "| fp8-kv | 64 | 32 + 32 | 2 of 150 | -0.7 pt [-2.1…+0.7]" in text
    assert "fp8-kv at its knee (64): 2 of 150 answers changed, accuracy Δ -0.7 pt within noise, top-1 agreement " \
           "94.5 %; 3 preemptions while they ran" in text
    assert "not measured: no load met the SLO" in text
    rows = [_row("bf16", 1.0, {"reference": True, "margin_pt": 2.0}),
            _row("fp8-kv", 0.6, {"shown": False, "margin_pt": 2.0, "n": 20, "items_needed": None,
                                 "ci90_pt": [-9.0, 1.0]})]
    rows[1]["quality"]["suite"]["tasks"] = {
        "gsm8k": {"equivalence": tost(0, 0, 400, 2.0)}, "passkey": {"equivalence": tost(0, 0, 20, 2.0)},
        "agreement": {"exact_match_rate": 0.5}}
    eq = "\n".join(equal_quality_section(rows))
    assert "not shown at n=20" in eq and "no n shows it" in eq and "(Δ 90 % interval -9.0…+1.0 pt)" in eq
    # Per task, naming the reference: the "fp8-kv is within 1 pt of bf16 on GSM8K (TOST, 95 %)".
    assert "  - fp8-kv is within 2 pt of bf16 on gsm8k (TOST, 95 %, n = 400)" in eq
    assert ("  - fp8-kv within 2 pt of bf16 on passkey: not shown at n = 20 (Δ 90 % interval -5.0…+5.0 pt); about 51 "
            "items needed") in eq, eq
    from kvtui.report.text import quality_lines

    lines = quality_lines("fp8-kv", rows[1]["quality"], "bf16")
    assert "[fp8-kv] quality: fp8-kv is within 2 pt of bf16 on gsm8k (TOST, 95 %, n = 400)" in lines, lines
