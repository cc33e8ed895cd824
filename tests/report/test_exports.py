"""Exports: JSON, CSV, Markdown, SVG; export → replay → export is unchanged; bad input is one clear line."""

from __future__ import annotations

import copy
import csv
import importlib.util
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvtui.io.snapshot.file import dumps, load_snapshot
from kvtui.report.export import render


def kvtui(*args, timeout=120, cwd=None):
    return subprocess.run([sys.executable, "-m", "kvtui", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def test_export_replay_export_round_trip_is_unchanged(three_modes, run_copy, tmp_path):
    src = run_copy
    # Through the command line, as a user would: export JSON, then export that export again.
    r = kvtui("export", src, "--format", "json", cwd=tmp_path)  # the working directory by default
    assert r.returncode == 0, r.stderr
    e1 = tmp_path / "three.export.json"
    assert str(e1.name) in r.stdout + r.stderr  # it says where
    assert oct(os.stat(e1).st_mode & 0o777) == "0o600"
    (tmp_path / "b").mkdir()
    e1_copy = tmp_path / "b" / "replayed.json"
    e1_copy.write_text(e1.read_text())
    r = kvtui("export", e1_copy, "--format", "json", "--out", tmp_path / "b" / "again.json")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "b" / "again.json").read_text() == e1.read_text()
    # Every format renders the same from the original and from its replayed export.
    original, replayed = load_snapshot(src), load_snapshot(e1_copy)
    for fmt in ("json", "md", "csv"):
        assert render(original, fmt) == render(replayed, fmt), fmt
    # The portable snapshot still honours the contract and recomputes the same comparison.
    doc = json.loads(e1.read_text())
    for key in ("schema", "scenario", "environment", "modes", "records", "comparison"):
        assert key in doc
    assert "_path" not in doc
    assert doc["comparison"] == json.loads(dumps(three_modes.doc["comparison"]))


def test_markdown_report_reads_well(three_modes):
    md = render(three_modes.doc, "md")
    assert md.startswith("# kvtui report: three modes\n")
    assert "> **SIMULATED**" in md
    for section in ("## The answer", "## Comparison", "### Caveats", "## Quality guard", "## Charts", "## Modes",
                    "### baseline", "### fp8-kv", "### w-int4", "## Environment", "## Scenario"):
        assert f"\n{section}\n" in md, section
    rows = {r["mode"]: r for r in three_modes.doc["comparison"]["rows"]}
    assert "- **fp8-kv**: 8 concurrent requests (1.33× the baseline)" in md
    assert f"${rows['fp8-kv']['usd_per_mtok_out']:.3f} per million output tokens" in md
    assert "Most concurrent requests at the SLO: **fp8-kv** (8)" in md
    assert "Skipped in every mode: simulated engine: no model weights, outputs are noise." in md
    # Labels travel with the figures: per mode and on the comparison.
    assert "*mode fp8-kv · engine sim · GPU H200 (SIMULATED) · version kvtui-sim" in md
    assert md.count("SIMULATED") >= 6
    assert "prefix-cache hit rate at the knee" in md
    # Charts as text: one bar per mode, the SLO marked.
    assert "TPOT p90 by load (│ = SLO 75 ms)" in md and "█" in md
    # Markdown tables have as many cells per row as headers.
    for block in md.split("\n\n"):
        lines = [l for l in block.splitlines() if l.startswith("| ")]
        if lines:
            n = lines[0].count(" | ")
            assert all(l.count(" | ") == n for l in lines), block[:200]


def test_csv_has_one_row_per_step_with_labels(three_modes):
    text = render(three_modes.doc, "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    steps = [(m["name"], s) for m in three_modes.doc["modes"] for s in m["steps"]]
    assert len(rows) == len(steps)
    for row, (name, s) in zip(rows, steps):
        assert row["mode"] == name and row["engine"] == "sim" and row["simulated"] == "true"
        assert row["gpu"] == "H200 (SIMULATED)" and row["version"].startswith("kvtui-sim")
        assert float(row["output_tok_s"]) == s["output_tok_s"]
        assert float(row["tpot_ms_p90"]) == s["tpot_ms"]["p90"]  # the SLO's percentile (conftest: p90)
        assert row["passed"] == ("true" if s["passed"] else "false")
        assert row["at_knee"] == ("true" if s["load"] == three_modes.doc["modes"][[m["name"] for m in three_modes.doc["modes"]].index(name)]["best_concurrency"] and s["passed"] else "false")
    assert rows[0]["ttft_ms_p99"] == ""  # too few samples for p99: empty, not zero


def test_infinite_latencies_survive_the_round_trip(three_modes, tmp_path):
    doc = copy.deepcopy(three_modes.doc)
    step = doc["modes"][0]["steps"][0]
    step["ttft_ms"]["p99"] = math.inf
    step["e2e_ms"]["p95"] = math.inf
    p = tmp_path / "inf.json"
    p.write_text(dumps({k: v for k, v in doc.items() if not k.startswith("_")}))
    assert '"p99": "inf"' in p.read_text()
    back = load_snapshot(p)
    assert back["modes"][0]["steps"][0]["ttft_ms"]["p99"] == math.inf
    md = render(back, "md")
    first_row = next(l for l in md.splitlines() if l.startswith("| 0 | 16 |"))
    assert "∞" in first_row
    row = next(csv.DictReader(io.StringIO(render(back, "csv"))))
    assert row["ttft_ms_p99"] == "inf" and float(row["ttft_ms_p99"]) == math.inf
    assert '"p99": "inf"' in render(back, "json")


def test_bad_input_is_one_clear_line_and_exit_2(three_modes, tmp_path):
    cases = {}
    cases["missing"] = tmp_path / "nope.json"
    trunc = tmp_path / "trunc.json"
    trunc.write_text(three_modes.path.read_text()[:500])
    cases["truncated"] = trunc
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "someone-else/3", "modes": []}))
    cases["unknown schema"] = other
    bench = Path(__file__).with_name("data") / "a_c32.json"
    cases["bench file"] = bench
    for what, path in cases.items():
        r = kvtui("export", path, "--format", "md")
        assert r.returncode == 2, (what, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("kvtui: "), (what, r.stderr)
        assert "Traceback" not in r.stderr
    r = kvtui("export", three_modes.path, "--format", "pdf")
    assert r.returncode == 2 and "--format pdf" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = kvtui("export", three_modes.path)
    assert r.returncode == 2
    r = kvtui("diff", three_modes.path, tmp_path / "nope.json")
    assert r.returncode == 2 and "nope.json" in r.stderr


def test_export_to_stdout_and_never_over_its_own_snapshot(three_modes, run_copy):
    r = kvtui("export", three_modes.path, "--format", "csv", "--out", "-")
    assert r.returncode == 0 and r.stdout.startswith("mode,engine,gpu,version")
    r = kvtui("export", run_copy, "--format", "json", "--out", run_copy)
    assert r.returncode == 2 and "overwrite" in r.stderr


def test_export_from_a_journal(three_modes, tmp_path):
    """An unfinished run (its journal only) exports too, and says it did not finish."""
    j = tmp_path / "cut.json.journal"
    j.write_text(three_modes.journal_copies[len(three_modes.journal_copies) // 2])
    md = render(load_snapshot(tmp_path / "cut.json"), "md")
    assert "rebuilt from the journal" in md


HAS_SVG = importlib.util.find_spec("kvtui.tui.svg") is not None


@pytest.mark.skipif(not HAS_SVG, reason="kvtui.tui.svg (the TUI engineer's dashboard renderer) is not in this tree yet")
def test_svg_export(three_modes, tmp_path):
    out = tmp_path / "dash.svg"
    r = kvtui("export", three_modes.path, "--format", "svg", "--out", out, timeout=300)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "<svg" in text[:500] and "SIMULATED" in text


@pytest.mark.skipif(HAS_SVG, reason="the SVG renderer exists: test_svg_export covers it")
def test_svg_without_its_renderer_is_one_line_and_exit_1(three_modes):
    r = kvtui("export", three_modes.path, "--format", "svg", "--out", "-")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "svg" in r.stderr
