"""The answer's "N failed on X" and each step's own label say one thing: for every published run,
the limits the answer names for the load above a knee are the labels of that load's failing steps
(the dashboard's rows, the Markdown step table), the last of them first said where they disagree;
and no passing step's row says a bare limit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from published import SNAPSHOTS, snapshot_path  # noqa: E402


@pytest.mark.parametrize("xz", SNAPSHOTS, ids=lambda p: p.name)
def test_the_answers_limit_is_the_steps_label(xz):
    from kvtui.core.evaluate import LIMIT_WORDS
    from kvtui.io.snapshot.file import load_snapshot
    from kvtui.report.answer import build_answer
    from kvtui.report.text import limit_cell

    doc = load_snapshot(snapshot_path(xz))
    ans = build_answer(doc)
    lines = {line.split(":")[0]: line for line in ans["lines"]}
    for r in ans["rows"]:
        mode = next(m for m in doc["modes"] if m["name"] == r["mode"])
        for s in mode.get("steps") or []:
            if s.get("passed") is True:
                assert limit_cell(s) in ("—", "near KV wall"), (r["mode"], s.get("load"), limit_cell(s))
        if not r.get("knee_limited_by"):
            continue
        failing = [s for s in mode["steps"] if s.get("load") == r["next_load"] and s.get("passed") is False
                   and s.get("limited_by")]
        assert failing, (r["mode"], r["next_load"])
        labels = {LIMIT_WORDS.get(s["limited_by"], s["limited_by"]) for s in failing}
        said = lines[r["mode"]]
        for word in labels:
            assert word in said, (r["mode"], word, said)  # every label a failing step shows, in the answer
        if len(labels) > 1:
            assert "its steps disagree" in said, said
