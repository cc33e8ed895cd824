"""`kvtui import` of real `vllm bench serve` results (H200, vLLM 0.26.0) and `kvtui diff` of two snapshots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvtui.errors import UsageError
from kvtui.io.scenario import load_scenario
from kvtui.io.snapshot.file import load_snapshot
from kvtui.report.diff import compare_docs, render_diff
from kvtui.report.export import render
from kvtui.report.importers import ENGINE, import_vllm_bench

DATA = Path(__file__).with_name("data")
BENCH = sorted(DATA.glob("*_c*.json"))


def kvtui(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "kvtui", *map(str, args)], capture_output=True, text=True, timeout=timeout)


def raw(name):
    return json.loads((DATA / name).read_text())


def test_import_vllm_bench_results_into_a_snapshot(tmp_path):
    out = tmp_path / "h200.json"
    r = kvtui("import", *BENCH, "--out", out, "--set", "slo.ttft_p99_ms=2000", "--set", "slo.tpot_p99_ms=50",
              "--log", f"b={DATA / 'b_startup.log'}", "--gpu", "NVIDIA H200")
    assert r.returncode == 0, r.stderr
    doc = load_snapshot(out)
    assert [m["name"] for m in doc["modes"]] == ["a", "b"]
    a, b = doc["modes"]
    for m in (a, b):
        assert m["engine"] == ENGINE and m["engine_info"]["engine"] == "vllm bench serve (imported)"
        assert [s["concurrency"] for s in m["steps"]] == [32, 128]
    # The scenario says what the files say (mean lengths) and the SLO given; nothing of kvtui's defaults.
    assert doc["scenario"]["workload"]["prompt_tokens"] == {"dist": "measured mean", "mean": 2048.0}
    assert doc["scenario"]["slo"]["latency"] == {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 50.0}
    # Figures straight from the files.
    s = a["steps"][0]
    src = raw("a_c32.json")
    assert s["output_tok_s"] == src["output_throughput"] and s["total_tok_s"] == src["total_token_throughput"]
    assert s["input_tok_s"] == round(src["total_input_tokens"] / src["duration"], 2)
    assert s["ttft_ms"]["p99"] == src["p99_ttft_ms"] and s["tpot_ms"]["p50"] == src["p50_tpot_ms"]
    assert s["requests"] == 64 and s["errors"] == 0 and s["request_s"] == src["request_throughput"]
    # What a bench file does not say stays None — never invented.
    for key in ("preemptions", "kv_cache_usage_max", "prefix_cache_hit_rate", "gpu_mem_used_gib_max", "limited_by", "started_at"):
        assert s[key] is None, key
    assert s["ttft_ms"]["p95"] is None and s["samples"]["itl"] is None
    assert a["server"]["weights_gib"] is None and a["server"]["kv_cache_tokens"] is None and a["engine_info"]["version"] is None
    assert a["engine_info"]["dummy_weights"] is None
    # ... unless the server's startup log was given: then its facts, version and warnings.
    assert b["server"]["weights_gib"] == 15.0 and b["server"]["kv_cache_tokens"] == 1793840
    assert b["engine_info"]["version"] == "0.26.0" and b["engine_info"]["dummy_weights"] is True
    assert "uncalibrated fp8 KV scales" in b["server"]["warnings"][0]
    # Judged against the SLO given: TTFT p99 1572 ms passes at 32, 5753 ms fails at 128.
    assert [x["passed"] for x in a["steps"]] == [True, False] and a["best_concurrency"] == 32
    assert a["search"]["first_fail"] == 128
    comp = doc["comparison"]
    rb = {r["mode"]: r for r in comp["rows"]}["b"]
    assert rb["tok_s_x"] == round(raw("b_c32.json")["output_throughput"] / src["output_throughput"], 3)
    assert rb["kv_tokens_x"] is None  # a has no startup log: no KV size to divide by
    assert "vllm bench serve (imported)" in r.stdout  # the comparison table, labelled
    md = render(doc, "md")
    assert "Imported from vllm bench serve" in md and "uncalibrated fp8 KV scales" in md and "dummy weights" in md


def test_import_grouping_undecided_steps_and_refusals(tmp_path):
    doc = import_vllm_bench([DATA / "a_c32.json", DATA / "b_c32.json"], mode="one")
    assert [m["name"] for m in doc["modes"]] == ["one"] and len(doc["modes"][0]["steps"]) == 2
    # kvtui's default SLO is on p95, which a default bench run does not report: undecided, and said so.
    m = doc["modes"][0]
    assert all(s["passed"] is None for s in m["steps"]) and m["best_concurrency"] is None
    assert m["search"]["describe"].startswith("undecided")
    sc = load_scenario(None, ["slo.tpot_p99_ms=13"])
    d2 = import_vllm_bench([DATA / "a_c32.json", DATA / "b_c32.json"], scenario=sc, mode="one")
    assert [s["passed"] for s in d2["modes"][0]["steps"]] == [True, True]  # 12.69 and 12.2 ms
    guidellm = tmp_path / "benchmarks.json"
    guidellm.write_text(json.dumps({"benchmarks": []}))
    with pytest.raises(UsageError, match="GuideLLM"):
        import_vllm_bench([guidellm])
    r = kvtui("import", guidellm, "--out", tmp_path / "x.json")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    r = kvtui("import", tmp_path / "missing.json", "--out", tmp_path / "x.json")
    assert r.returncode == 2 and "no such file" in r.stderr
    r = kvtui("import", DATA / "a_c32.json", "--out", tmp_path / "x.json", "--log", "zz=/dev/null")
    assert r.returncode == 2 and "--log zz" in r.stderr


def test_diff_two_snapshots(three_modes):
    a, b = three_modes.first_doc, three_modes.doc
    comp = compare_docs(a, b)
    rows = {r["mode"]: r for r in comp["rows"]}
    assert list(rows) == ["baseline [A]", "baseline [B]", "fp8-kv [B]", "w-int4 [B]"]
    ra, rb = rows["baseline [A]"], rows["baseline [B]"]
    # The kept baseline is the same measurement: exactly 1.00× and no cost change.
    assert ra["best_x"] == rb["best_x"] == 1.0 and rb["cost_out_change"] == 0.0
    assert rows["fp8-kv [B]"]["best_x"] is None and "only in one run" in comp["note"]
    assert comp["differences"] == []
    text = render_diff(a, b, title_a="first.json", title_b="three.json")
    assert "A = first.json: engine sim" in text and "SIMULATED" in text and "Same environment" in text
    r = kvtui("diff", three_modes.first, three_modes.path, "--format", "md")
    assert r.returncode == 0 and r.stdout.startswith("# kvtui diff") and "| baseline [B] |" in r.stdout


def test_diff_across_gpus_and_versions_shows_ratios_and_what_differs(tmp_path):
    """A: the H200 results imported; B: the same files labelled as another GPU with a scaled throughput."""
    a = import_vllm_bench(BENCH, scenario=load_scenario(None, ["slo.tpot_p99_ms=50"]), gpu="NVIDIA H200", version="0.26.0")
    b = json.loads(json.dumps(a))
    b["environment"]["gpu_names"] = ["NVIDIA H100"]
    for m in b["modes"]:
        m["engine_info"]["version"] = "0.27.0"
        for s in m["steps"]:
            s["output_tok_s"] = s["output_tok_s"] * 0.5
    comp = compare_docs(a, b)
    rows = {r["mode"]: r for r in comp["rows"]}
    assert rows["a [B]"]["tok_s_x"] == 0.5 and rows["a [B]"]["cost_out_change"] == pytest.approx(1.0, abs=1e-3)
    assert rows["a [A]"]["tok_s_x"] == 1.0
    assert "GPU: ['NVIDIA H200'] → ['NVIDIA H100']" in comp["differences"]
    assert "server version: 0.26.0 → 0.27.0" in comp["differences"]
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    from kvtui.io.snapshot.file import dumps

    pa.write_text(dumps(a))
    pb.write_text(dumps(b))
    r = kvtui("diff", pa, pb)
    assert r.returncode == 0, r.stderr
    assert "What differs between the runs:" in r.stdout and "0.50×" in r.stdout


def test_diff_names_a_changed_mode_setting_on_the_real_h200_runs():
    """The H200 session's AWQ mode ran first with float16 activations (crashed), then bfloat16:
    a diff of the two snapshots must not call them the same settings."""
    from kvtui.io.snapshot.file import load_snapshot

    root = Path(__file__).resolve().parents[2] / "docs" / "results"
    a, b = load_snapshot(root / "h200-v2-b.json"), load_snapshot(root / "h200-v2-d.json")
    comp = compare_docs(a, b)
    assert "mode awq-int4+fp8-kv: dtype 'float16' → 'bfloat16'" in comp["differences"]
    assert not [d for d in comp["differences"] if d.startswith("mode bf16")]  # bf16 is only in A
    assert "Same environment" not in render_diff(a, b)


def test_import_out_into_a_missing_folder_creates_it(tmp_path):
    """Issue 20: `import --out dir/x.json` with no dir/ made it, and says so (it used to fail with
    "cannot write the export")."""
    out = tmp_path / "new" / "deeper" / "x.json"
    r = kvtui("import", *BENCH, "--out", out)
    assert r.returncode == 0, r.stderr
    assert load_snapshot(out)["modes"] and f"created the folder {out.parent}" in r.stderr
