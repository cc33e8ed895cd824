"""Issue 31 item 5: `kvtui diff A B` fits the terminal as the run's ending does (the table's columns
chosen by width, the rest named); `--wide` gives every column, as a file does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvtui.report.text import COMPARISON_HEADERS

ROOT = Path(__file__).resolve().parents[2]
A, B = ROOT / "docs" / "results" / "h200-v2.json", ROOT / "docs" / "results" / "h200-kvb.json"


def _diff(columns: int, *extra: str) -> str:
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "kvtui", "diff", str(A), str(B), *extra], capture_output=True,
                         text=True, env=env, cwd=ROOT)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    return out.stdout


def _header(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("mode "))


@pytest.mark.parametrize("columns", [80, 120])
def test_diff_fits_the_terminal(columns):
    text = _diff(columns)
    assert max(len(line) for line in text.splitlines()) <= columns
    head = _header(text)
    assert "max conc @SLO" in head and "out tok/s @SLO" in head  # the answer's figures stay
    assert "not shown:" in text and "--wide" in text  # what was left out is named
    assert "bf16 [A]" in text and "awq-int4+fp8-kv [B]" in text  # every mode, both runs


def test_diff_wide_has_every_column():
    text = _diff(80, "--wide")
    head = _header(text)
    for h in COMPARISON_HEADERS:
        assert h in head, h
    assert "not shown:" not in text
    assert max(len(line) for line in text.splitlines()) > 120


def test_diff_to_a_file_keeps_every_column(tmp_path):
    out = tmp_path / "d.txt"
    _diff(80, "--out", str(out))
    head = _header(out.read_text())
    assert all(h in head for h in COMPARISON_HEADERS)


@pytest.mark.parametrize("columns", [80, 120])
def test_the_prediction_tables_fit_too(columns):
    # the predicted-against-measured tables were printed whole and wrapped as prose: noise at 80 columns
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(ROOT)}
    seeded = ROOT / "docs" / "results" / "h200-kvb-seeded.json"
    out = subprocess.run([sys.executable, "-m", "kvtui", "diff", str(A), str(seeded)], capture_output=True,
                         text=True, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    section = lines[lines.index("Predicted against measured (SIMULATED predictions):"):]
    head = next(line for line in section if line.startswith("mode "))
    assert "predicted knee" in head and "measured knee" in head
