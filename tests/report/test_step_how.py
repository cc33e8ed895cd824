"""How a step ended, in every view: a step whose verdict was decided before its full window says
"early (by)", and one on the KV wall's noisy side says how much of its watch it watched — in the
headless line, the exports' step table and the TUI's (kvtui.report.text.step_how). Read from a
published H200 run (docs/results/h200-8k512-watch.md) that has both kinds."""

from __future__ import annotations

import json
import lzma
from pathlib import Path
from types import SimpleNamespace

from kvtui.cli.headless_print import step_line
from kvtui.report.text import step_how, step_row
from kvtui.tui.steptable import StepTable

RUN = Path(__file__).resolve().parents[2] / "docs" / "results" / "h200-8k512-watch.json.xz"


def _steps() -> list[dict]:
    doc = json.loads(lzma.decompress(RUN.read_bytes()))
    return [s for m in doc["modes"] for s in m["steps"]]


def test_every_view_says_an_early_stop_and_a_watch_as_the_step_records_them():
    steps = _steps()
    th = SimpleNamespace(success="green", error="red", warning="yellow")
    kinds = set()
    for s in steps:
        how = step_how(s)
        early = bool(s.get("stopped_early"))
        watch = isinstance((s.get("ramp") or {}).get("window_s"), (int, float))
        assert [h for h in how if h.startswith("early")] == ([f"early ({s['early_stop']['by']})"] if early else [])
        assert [h for h in how if h.startswith("watched")] == (
            [f"watched {s['ramp']['watched_s']:,.1f} s of {s['ramp']['window_s']:.1f} s"] if watch else [])
        kinds |= {"early"} if early else set()
        kinds |= {"watch"} if watch else set()
        why = step_row(s)[2]  # the exports' step table
        tui = StepTable.row_cells(None, s, None, th)["why"]  # the TUI's (a row reads only the step)
        line = step_line("m", {**s, "load": s["concurrency"]}, [])
        for h in how:
            assert h in why and h in str(tui)
            assert (("[early]" in line) if h.startswith("early") else f"[{h}]" in line)
        if not how:
            assert "early" not in why and "watched" not in why and "[early]" not in line
    assert kinds == {"early", "watch"}  # the run has both
