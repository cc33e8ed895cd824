"""Quality guard: fixed prompts at temperature 0 against a real HTTP server with a deterministic model."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from kvtui.explore.quality import SKIP_DUMMY, SKIP_SIM, collect_outputs, compare_quality, quality_prompts
from kvtui.io.scenario import load_scenario
from kvtui.report.compare import compare_modes
from kvtui.report.export import render
from kvtui.report.text import comparison_rows
from kvtui.runtime.engines.base import Endpoint
from kvtui.runtime.load.workload import TokenSpace
from kvtui.runtime.procs.servers import ServerProcess, free_port


@pytest.fixture(scope="module")
def lm():
    port = free_port()
    p = ServerProcess([sys.executable, str(Path(__file__).with_name("lm_app.py")), str(port)])
    p.start()
    base = f"http://127.0.0.1:{port}"
    p.wait_ready(base + "/health", 30, what="lm server")
    yield base
    p.stop()


def scenario(tmp_path, engine="external", extra=""):
    p = tmp_path / "q.toml"
    url = 'url = "http://127.0.0.1:1"\n' if engine == "external" else ""  # a launching engine takes no url
    p.write_text(f'[server]\nengine = "{engine}"\n{url}[quality]\nenabled = true\nprompts = 6\n'
                 f'prompt_tokens = 40\nmax_tokens = 12\n{extra}')
    return load_scenario(p)


SPACE = TokenSpace.synthetic(vocab_size=50000)


def collect(lm, sc, model):
    return collect_outputs(Endpoint(base_url=lm, model=model), sc, SPACE)


def test_prompts_are_fixed_and_the_same_in_every_mode(tmp_path):
    sc = scenario(tmp_path)
    a, b = quality_prompts(sc, SPACE), quality_prompts(sc, SPACE)
    assert a == b and len(a) == 6 and all(len(p) == 40 for p in a)
    assert len({tuple(p) for p in a}) == 6  # distinct prompts
    assert all(p[24:40] == p[0:16] for p in a)  # a 24-token phrase, repeated to the prompt length
    assert all(t in set(SPACE.ids) for p in a for t in p)


def test_same_model_matches_exactly(lm, tmp_path):
    sc = scenario(tmp_path)
    ref = collect(lm, sc, "good")
    assert ref["prompts"] == 6 and ref["logprobs"] and not ref["errors"]
    o = ref["outputs"][0]
    assert len(o["tokens"]) == 12 and o["tokens"][0].startswith("token_id:") and len(o["logprobs"]) == 12
    again = compare_quality(ref, collect(lm, sc, "good"))
    assert again["exact_match_rate"] == 1.0 and again["top1_agreement"] == 1.0
    assert again["logprob_agreement"] == 1.0 and again["mean_abs_logprob_diff"] == 0.0 and not again["flagged"]


def test_a_correct_but_slightly_different_mode_passes_and_a_wrong_one_is_flagged(lm, tmp_path):
    sc = scenario(tmp_path)
    ref = collect(lm, sc, "good")
    near = compare_quality(ref, collect(lm, sc, "near"))
    assert near["exact_match_rate"] == 1.0 and not near["flagged"]
    assert near["mean_abs_logprob_diff"] == pytest.approx(0.02, abs=1e-9)
    assert near["logprob_agreement"] == round(math.exp(-0.02), 4)
    broken = compare_quality(ref, collect(lm, sc, "broken"))
    assert broken["exact_match_rate"] == 0.0 and broken["top1_agreement"] == 0.0 and broken["flagged"]
    assert "exact match 0% < 50%" in broken["why"]
    drift = compare_quality(ref, collect(lm, sc, "drift"))
    diverged = sum(1 for p in quality_prompts(sc, SPACE) if (sum(p) // 7) % 2 == 0)
    assert 0 < diverged < 6
    assert drift["exact_match_rate"] == round((6 - diverged) / 6, 4)
    # top-1 agreement: diverged prompts agree on 8 of their 9 same-context positions, the others on all 12.
    assert drift["top1_agreement"] == round((diverged * 8 + (6 - diverged) * 12) / (diverged * 9 + (6 - diverged) * 12), 4)
    assert drift["logprob_agreement"] == 1.0


def test_a_server_without_logprobs_or_vllm_extras_still_compares_outputs(lm, tmp_path):
    sc = scenario(tmp_path)
    plain = collect(lm, sc, "plain")
    assert plain["logprobs"] is False and all(o["tokens"] is None and o["text"] for o in plain["outputs"])
    res = compare_quality(plain, collect(lm, sc, "plain"))
    assert res["exact_match_rate"] == 1.0 and res["logprob_agreement"] is None and "no logprobs" in res["note"]


def test_skips_with_a_clear_note(lm, tmp_path):
    assert collect_outputs(Endpoint(base_url=lm, model="good"), scenario(tmp_path), SPACE, dummy_weights=True) == {"skipped": SKIP_DUMMY}
    assert collect_outputs(Endpoint(base_url=lm, model="good"), scenario(tmp_path, engine="sim"), SPACE) == {"skipped": SKIP_SIM}
    down = collect_outputs(Endpoint(base_url="http://127.0.0.1:9", model="good"), scenario(tmp_path), SPACE)
    assert down["skipped"].startswith("no output for any quality prompt")


def test_quality_in_the_comparison_and_the_report(lm, tmp_path):
    sc = scenario(tmp_path)
    modes = []
    for name, model in (("baseline", "good"), ("fp8-kv", "near"), ("broken-int4", "broken"), ("dummy", None)):
        q = collect(lm, sc, model) if model else {"skipped": SKIP_DUMMY}
        modes.append({"name": name, "best_concurrency": 8, "search": {}, "server": {}, "quality": q,
                      "steps": [{"load": 8, "passed": True, "output_tok_s": 100.0, "input_tok_s": 400.0, "error_rate": 0.0}]})
    doc = {"schema": "kvtui.snapshot/1", "scenario": sc.to_dict(), "environment": {"engine": "external"}, "modes": modes}
    comp = compare_modes(doc)
    q = {r["mode"]: r["quality"] for r in comp["rows"]}
    assert comp["quality_reference"] == "baseline" and q["baseline"]["reference"]
    assert not q["fp8-kv"]["flagged"] and q["broken-int4"]["flagged"] and q["dummy"] == {"skipped": SKIP_DUMMY}
    cells = {r[0]: r[-1] for r in comparison_rows(doc)}
    assert cells == {"baseline": "reference", "fp8-kv": "ok 100% exact · lp 0.980", "broken-int4": "FLAG 0% exact", "dummy": "skipped"}
    md = render(doc, "md")
    assert "**FLAGGED**: exact match 0% < 50%" in md and f"skipped: {SKIP_DUMMY}" in md
    assert "quality flagged: broken-int4" in md
