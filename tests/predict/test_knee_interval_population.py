"""A step's pass probability (the knee's interval) is a bootstrap of the very requests its verdict
is over. A continuous-protocol step takes its figures from its window alone: every request that
started in it, most still streaming at its end. Before 2026-12-05 the bootstrap resampled only the
window requests that had finished, fewer than the 40 a p95 needs at 8k / 512, so every resample
was undecided and every step, a pass at a third of its limit included, read 0 %: every knee's
interval collapsed onto the knee, the noisy ones too (docs/results/h200-8k512-itl100.md).

The invariant, on published H200 runs (window figures; whole-request figures) and on an offline
run whose TPOT target counts whole requests (the births rule): the requests the bootstrap draws
from give, unresampled, the step's own verdict; a pass far from every limit is sure."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from kvtui.cli.entry import main as kvtui_main
from kvtui.core import knee_interval as ki
from kvtui.io.records import read_records
from kvtui.io.scenario.loader import scenario_from_snapshot
from kvtui.io.snapshot.file import load_snapshot

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"


def _by_request_alone(step: dict) -> bool:
    """A judged verdict that its requests carry alone (no server-side count, no flag, not cut)."""
    pre = [c for c in step.get("checks") or [] if c.get("target") == "preemptions_per_request"]
    return (ki.judged(step) and not step.get("error_burst") and not step.get("flags") and not step.get("cut")
            and all(c.get("ok") is not False for c in pre))


def _far(step: dict, reqs: list[ki.Req], targets: list[ki.Target]) -> bool:
    """A pass with at most 80 % of the tail its percentiles allow above each limit (p95: ≤ 4 % of the
    samples). Not "its p95 at half its limit": at 8k / 512 the token gaps are bimodal (a prefill
    stalls every stream ~170 ms), and fp8-kv's p95 of 40 ms at 26 concurrent had 4.86 % of its gaps
    over 100 ms; a resample of its requests fails a quarter of the time (so did the careful run's
    repeat of that load, at 162 ms)."""
    if step["passed"] is not True:
        return False
    for j, t in enumerate(targets):
        n = le = 0
        for r in reqs:
            a, b, _, _ = ki.request_tallies(r, targets)[j]
            n, le = n + a, le + b
        if not n or (n - le) / n > 0.8 * (1 - ki.PCTS[t.pct]):
            return False
    return True


def _check(doc: dict, records_path: Path) -> tuple[int, int, int]:
    slo = scenario_from_snapshot(doc["scenario"]).slo
    targets = ki.slo_targets(slo)
    grouped: dict[tuple[str, int], list] = collections.defaultdict(list)
    for r in read_records(records_path):
        grouped[(r.mode, r.step)].append(r)
    judged = window = far = 0
    for m in doc["modes"]:
        for s in m["steps"]:
            if not _by_request_alone(s):
                continue
            recs = grouped[(m["name"], s["index"])]
            reqs = ki.reqs_for_step(s, recs)
            assert ki.observed_verdict(reqs, targets, slo.max_error_rate, slo.min_goodput or None) is s["passed"], \
                (m["name"], s["index"], s["load"])
            judged += 1
            window += s.get("stats_from") == "window"
            if _far(s, reqs, targets):
                pp = ki.for_step(s, recs, slo, f"{m['name']}#{s['index']}")
                assert pp is not None and pp["p"] >= 0.95, (m["name"], s["index"], pp)
                far += 1
    return judged, window, far


@pytest.mark.parametrize("name, window_steps", [
    # ITL p95 ≤ 300 ms at 8k / 512: each step's window requests and their gaps (the fixture keeps those alone)
    ("h200-8k512-w", True),
    ("h200-cont", False),  # whole requests (each step held its load until its window's requests ended)
])
def test_the_bootstrap_draws_from_the_requests_a_published_verdict_is_over(name, window_steps):
    """The published runs' requests as tests/fixtures/records keeps them (build.py there: the window's
    requests of the 8k / 512 run, no token gaps where no target is on ITL; the full archives, those
    of the ITL p95 ≤ 100 ms runs too, are in git history)."""
    doc = load_snapshot(RESULTS / f"{name}.json.xz")
    judged, window, far = _check(doc, RECORDS / f"{name}.records.jsonl")
    assert judged >= 4 and far >= 1
    assert (window == judged) if window_steps else window == 0


def test_an_offline_run_with_whole_request_tpot_draws_from_its_births(tmp_path):
    """The published 2k / 256 workload (TPOT p95 ≤ 50 ms: TPOT over the window requests sent by the
    births cutoff, each whole; TTFT over every window request), its first mode, offline."""
    out = tmp_path / "run.json"
    rc = kvtui_main(["run", "h200-llama8b", "--headless", "--fast", "--mode", "bf16", "--out", str(out),
                     "--set", "ramp.confirm_when=doubt", "--set", "server.engine=sim",
                     "--set", "server.model=llama-3.1-8b"])
    assert rc == 0
    doc = load_snapshot(out)
    steps = doc["modes"][0]["steps"]
    assert any(isinstance(s.get("births"), dict) and s.get("stats_from") == "window" for s in steps)
    judged, window, far = _check(doc, out.with_name(doc["records"]))
    assert judged >= 3 and window == judged and far >= 1
