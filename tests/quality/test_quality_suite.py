"""The quality suite's parts without a server: items, scoring, statistics, verdicts, task files."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtui.errors import UsageError
from kvtui.quality.stats import mcnemar_p, paired_difference, wilson
from kvtui.quality.tasks import Item, Sizer, load_task_file, passkey_items, quotation_items, score
from kvtui.quality.verdict import compare_suites, compare_task


def _sizer() -> Sizer:
    # 1 token per 4 characters plus a template of 10: a stand-in tokenizer with a known rule.
    return Sizer(lambda msgs: sum(len(m["content"]) for m in msgs) // 4 + 10)


def test_passkey_items_hit_their_lengths_and_depths_and_hold_their_key():
    items = passkey_items(6, [512, 1024], seed=7, sizer=_sizer())
    assert [i.meta["length"] for i in items] == [512] * 3 + [1024] * 3
    assert [i.meta["depth"] for i in items[:3]] == pytest.approx([1 / 6, 0.5, 5 / 6], abs=1e-3)
    for it in items:
        n = _sizer().count(it.messages)
        assert abs(n - it.meta["length"]) <= 25  # within one filler sentence
        key = it.expected[0]
        assert len(key) == 5 and key in it.messages[0]["content"]
        # the key sits at its depth of the filler
        text = it.messages[0]["content"]
        assert abs(text.index(key) / len(text) - it.meta["depth"]) < 0.1
    again = passkey_items(6, [512, 1024], seed=7, sizer=_sizer())
    assert [i.key() for i in again] == [i.key() for i in items]  # the same items every mode and run
    assert [i.key() for i in passkey_items(6, [512, 1024], seed=8, sizer=_sizer())] != [i.key() for i in items]


def test_quotation_items_ask_for_a_sentence_that_is_in_the_prompt():
    for it in quotation_items(10, seed=3):
        assert it.expected[0] in it.messages[0]["content"]
        assert f"sentence number {it.meta['line']}" in it.messages[0]["content"]
        assert score(it, f"Sure: {it.expected[0]}")
        assert not score(it, "The old farmer sold a red kettle near the bridge, probably.")


def test_scoring_rules():
    it = Item(task="t", id="1", messages=[], expected=["42"], scoring="number")
    assert score(it, "The answer is 42.") and not score(it, "41 or 43")
    it.scoring, it.expected = "exact", ["Paris"]
    assert score(it, " paris. ") and not score(it, "It is Paris")
    it.scoring = "contains"
    assert score(it, "It is Paris") and not score(it, "Lyon")
    it.scoring, it.expected = "regex", [r"\bPar\w+"]
    assert score(it, "Paris!") and not score(it, "par")
    it.scoring, it.expected = "choice", ["B"]
    assert score(it, "B) the second") and not score(it, "A")


def test_wilson_interval_brackets_the_rate_and_narrows_with_n():
    assert wilson(0, 10)[0] == 0.0 and 0 < wilson(0, 10)[1] < 0.35
    assert wilson(10, 10)[1] == 1.0 and wilson(10, 10)[0] > 0.65
    lo, hi = wilson(50, 100)
    lo2, hi2 = wilson(500, 1000)
    assert lo < 0.5 < hi and hi2 - lo2 < hi - lo


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.integers(0, 40))
def test_paired_difference_interval_holds_its_estimate(b, c, same):
    n = b + c + same
    if n == 0:
        return
    d, lo, hi = paired_difference(b, c, n)
    assert lo <= d <= hi and -1 <= lo and hi <= 1
    assert d == pytest.approx((c - b) / n)
    p = mcnemar_p(b, c)
    assert 0 <= p <= 1
    assert mcnemar_p(c, b) == p


def test_mcnemar_exact_values():
    assert mcnemar_p(0, 0) == 1.0
    assert mcnemar_p(5, 0) == pytest.approx(2 / 32)  # 0.0625: five discordant pairs one way is not yet p < .05
    assert mcnemar_p(6, 0) == pytest.approx(2 / 64)


def _task(oks: list[bool]) -> dict:
    items = [{"id": str(i), "key": f"k{i}", "ok": ok} for i, ok in enumerate(oks)]
    k = sum(oks)
    return {"n": len(oks), "correct": k, "accuracy": k / len(oks), "ci": list(wilson(k, len(oks))), "items": items}


def test_verdicts_noise_tolerance_and_regression():
    ref = _task([True] * 40)
    assert compare_task(ref, _task([True] * 39 + [False]), 2.0)["verdict"] == "within noise"
    reg = compare_task(ref, _task([True] * 30 + [False] * 10), 2.0)
    assert reg["verdict"] == "regression" and reg["flagged"] and reg["delta_pt"] == -25.0
    assert reg["delta_ci_pt"][0] < -25.0 < reg["delta_ci_pt"][1] < 0
    small = compare_task(ref, _task([True] * 30 + [False] * 10), 30.0)
    assert small["verdict"] == "drop within tolerance" and not small["flagged"]
    better = compare_task(_task([False] * 40), _task([True] * 10 + [False] * 30), 2.0)
    assert better["verdict"] == "better"


def test_quality_adjusted_cost_factor():
    ref = {"passkey": _task([True] * 20), "quotation": _task([True] * 10 + [False] * 10)}
    same = compare_suites(ref, ref, 2.0)
    assert same["cost_factor"] == 1.0 and not same["flagged"]
    worse = {"passkey": _task([True] * 10 + [False] * 10), "quotation": ref["quotation"]}
    out = compare_suites(ref, worse, 2.0)
    assert out["cost_factor"] == pytest.approx(30 / 20)  # 30 of 40 right against 20 of 40
    assert out["flagged"] and out["tasks"]["passkey"]["verdict"] == "regression"
    better = {"passkey": ref["passkey"], "quotation": _task([True] * 20)}
    assert compare_suites(ref, better, 2.0)["cost_factor"] == 1.0  # never credited for beating the reference


def test_user_task_file_loads_and_every_problem_names_file_and_line(tmp_path):
    good = tmp_path / "capitals.jsonl"
    good.write_text(json.dumps({"prompt": "Capital of France?", "expected": "Paris"}) + "\n\n"
                    + json.dumps({"messages": [{"role": "user", "content": "2+2?"}], "expected": 4, "scoring": "number",
                                  "max_tokens": 8, "id": "sum"}) + "\n")
    items = load_task_file(good)
    assert [(i.task, i.id, i.scoring, i.expected) for i in items] == [
        ("capitals", "1", "contains", ["Paris"]), ("capitals", "sum", "number", ["4"])]
    cases = {
        "not json": "{",
        # valid JSON syntax that json.loads still refuses with a plain ValueError (no .msg)
        "too many digits": '{"prompt": "p", "expected": ' + "1" * 5000 + "}",
        "not an object": "[1]", "no prompt": '{"expected": "x"}',
        "bad expected": '{"prompt": "p", "expected": {}}', "bad scoring": '{"prompt": "p", "expected": "x", "scoring": "fuzzy"}',
        "bad regex": '{"prompt": "p", "expected": "(", "scoring": "regex"}',
        "bad max_tokens": '{"prompt": "p", "expected": "x", "max_tokens": 0}',
    }
    for what, line in cases.items():
        f = tmp_path / "bad.jsonl"
        f.write_text(json.dumps({"prompt": "ok", "expected": "ok"}) + "\n" + line + "\n")
        with pytest.raises(UsageError) as e:
            load_task_file(f)
        assert str(e.value).startswith(f"{f}:2: "), what
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(UsageError, match="no task items"):
        load_task_file(empty)


def test_scenario_quality_fields_are_validated(tmp_path):
    from kvtui.errors import ScenarioError
    from kvtui.io.scenario.loader import load_scenario

    f = tmp_path / "s.toml"
    f.write_text('[quality]\nenabled = true\ntasks = ["passkey", "trivia"]\nitems = -1\nlengths = [32]\n'
                 'task_files = ["nope.jsonl"]\ntolerance_pt = 200\n')
    with pytest.raises(ScenarioError) as e:
        load_scenario(str(f))
    text = "\n".join(e.value.problems)
    for field in ("quality.tasks", "quality.items", "quality.lengths", "quality.task_files", "quality.tolerance_pt"):
        assert field in text, (field, text)
    assert "trivia" in text and "nope.jsonl" in text


def test_agreement_never_flags_a_mode_only_ground_truth_does():
    ref = {"passkey": _task([True] * 20), "agreement": {"outputs": []}}
    mode = {"passkey": _task([True] * 20), "agreement": {"outputs": []}}
    out = compare_suites(ref, mode, 2.0, agreement=lambda a, b: {"exact_match_rate": 0.1, "flagged": True})
    assert not out["flagged"] and out["tasks"]["agreement"]["exact_match_rate"] == 0.1
    assert out["tasks"]["agreement"]["flagged"] is False
