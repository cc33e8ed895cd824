"""The knee's interval end to end (issue 28, item 4): an offline run (`kvtui run --fast`) stores
modes[].knee_interval, and the headless line, the replay text, the Markdown, the CSV and the diff
show "knee [lo–hi]"; a snapshot from before has none and its exports do not change."""

from __future__ import annotations

import copy
import csv
import io

import pytest

from kvtui.core.knee_interval import fmt_knee
from kvtui.explore.run import Run
from kvtui.io.scenario import load_scenario
from kvtui.io.snapshot.file import load_snapshot
from kvtui.report.answer import answer_text
from kvtui.report.csv_export import render_csv
from kvtui.report.diff import render_diff
from kvtui.report.markdown import render_markdown


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    path = tmp_path_factory.mktemp("ki") / "run.json"
    sc = load_scenario("sim-demo", [])
    # fp8-kv at 14-16 sits on this TPOT limit (its p95 from one step to the next straddles it): a noisy knee
    sc.slo.latency = {**sc.slo.latency, "tpot_p95_ms": 146.0}
    Run(sc, path, fast=True).run()
    return load_snapshot(path)


def test_a_new_run_has_each_modes_knee_with_its_interval_everywhere(doc):
    assert any(md["knee_interval"]["lo"] < md["knee_interval"]["hi"] for md in doc["modes"])  # fp8-kv (fixture)
    for md in doc["modes"]:
        ki = md["knee_interval"]
        assert ki["method"] == "bootstrap-isotonic" and ki["n_boot"] == 200 and ki["confidence"] == 0.9
        assert ki["lo"] <= md["best_concurrency"] <= ki["hi"]
        judged = [s for s in md["steps"] if s["passed"] is not None]
        assert all(0 <= s["pass_probability"]["p"] <= 1 for s in judged)
        # a step that passed is more often passed by its resamples than one that failed
        assert min(s["pass_probability"]["p"] for s in judged if s["passed"]) > \
            max(s["pass_probability"]["p"] for s in judged if not s["passed"])
        shown = fmt_knee(md["best_concurrency"], ki)
        assert ("[" in shown) == (ki["lo"] < ki["hi"])  # "16 [14–16]"; a knee beyond doubt alone
        assert md["search"]["describe"].startswith(shown + " ")  # the headless line's text
        assert shown in answer_text(doc) and shown in render_markdown(doc) and shown in render_diff(doc, doc)
    cols, *rows = list(csv.reader(io.StringIO(render_csv(doc))))
    assert cols[-4:] == ["knee_lo", "knee_hi", "knee_confidence", "pass_probability"]
    assert rows and all(float(r[cols.index("knee_lo")]) <= float(r[cols.index("knee_hi")]) for r in rows)


def test_a_snapshot_from_before_shows_the_knee_alone_as_it_did(doc):
    old = copy.deepcopy(doc)
    old.pop("comparison")  # the stored one carries the interval; an old snapshot's did not
    for md in old["modes"]:
        md.pop("knee_interval")
        for s in md["steps"]:
            s.pop("pass_probability", None)
    for text in (answer_text(old), render_markdown(old), render_diff(old, old)):
        assert "–" not in "".join(line for line in text.splitlines() if " at the SLO" in line)
    assert "knee_lo" not in render_csv(old).splitlines()[0]
