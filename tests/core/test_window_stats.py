"""The window-only estimator (kvtui.core.window_stats) on records whose truth is known."""

from __future__ import annotations

import pytest

from kvtui.core.evaluate import StepContext, evaluate_step, reevaluate
from kvtui.core.record import Record
from kvtui.core.window_stats import gap_coverage, tail_rule, window_samples, window_tokens
from kvtui.io.scenario.schema import Slo


def rec(i: int, sent: float, ttft: float, gap: float, n: int, phase: str = "window", cut_at: float | None = None,
        ) -> Record:
    """A request of n tokens, one per chunk, `gap` apart; cut_at: cancelled then (its tokens so far)."""
    r = Record(id=f"r{i}", mode="m", step=0, load=8, phase=phase, t_intended=sent, t_sent=sent,
               expected_output_tokens=n, expected_prompt_tokens=100)
    times = [sent + ttft + k * gap for k in range(n)]
    if cut_at is not None:
        times = [t for t in times if t <= cut_at]
    if times:
        r.t_first = times[0]
        r.itl = [b - a for a, b in zip(times, times[1:])]
        r.t_last = times[-1]
    if cut_at is None:
        r.output_tokens, r.prompt_tokens = n, 100
    else:
        r.status, r.error = "error", "cancelled"
    return r


def test_requests_cut_at_the_window_end_count_by_their_gaps_so_far() -> None:
    # 10 requests started in [0, 10], 100 tokens 50 ms apart: most are still streaming at t1 = 10.
    recs = [rec(i, float(i), 0.2, 0.05, 100) for i in range(10)]
    w = window_samples(recs, 0.0, 10.0)
    assert w.requests == 10 and w.cut == 5  # started at 0..4 finished by 10 (0.2 + 4.95 s after)
    assert sorted(w.ttft) == pytest.approx([0.2] * 10)
    assert w.tpot == pytest.approx([0.05] * len(w.tpot)) and len(w.tpot) == 10
    assert all(g == pytest.approx(0.05) for g in w.itl)
    assert len(w.e2e) == 5  # only the ended ones


def test_a_cancelled_request_keeps_its_tokens_and_a_censored_ttft() -> None:
    done = [rec(i, float(i), 0.2, 0.05, 100) for i in range(5)]
    cut = rec(9, 9.5, 0.2, 0.05, 100, cut_at=11.0)  # cancelled at the step's end, tokens so far kept
    never = rec(8, 9.9, 5.0, 0.05, 100, cut_at=11.0)  # no first token by the step's end
    w = window_samples(done + [cut, never], 0.0, 10.0, t_end=11.0)
    assert w.ttft_censored == 1
    assert max(w.ttft) == pytest.approx(11.0 - 9.9)  # the wait so far: a lower bound
    assert w.per_request["r9"]["tpot"] == pytest.approx(0.05)
    assert w.per_request["r8"]["tpot"] is None


def test_window_tokens_count_cut_requests() -> None:
    recs = [rec(0, 0.0, 0.0, 0.1, 50), rec(1, 0.0, 0.0, 0.1, 200, cut_at=10.0)]
    out, _ = window_tokens(recs, 1.0, 2.0)
    assert out == pytest.approx(2 * 11)  # tokens at 1.0, 1.1, …, 2.0 from both


def test_coverage_and_the_tail_rule() -> None:
    recs = [rec(i, float(i), 0.0, 0.1, 101) for i in range(4)]  # 100 gaps each, 10 s of life
    assert gap_coverage(recs, 100.0) == pytest.approx(1.0)
    assert 0 < gap_coverage(recs, 5.0) < 1
    assert tail_rule(["ttft", "itl"]) == "first_token"
    assert tail_rule(["ttft", "tpot"]) == "births"
    assert tail_rule(["e2e"]) == "births"


def test_a_window_step_says_so_and_reevaluates_the_same() -> None:
    recs = [rec(i, float(i) / 4, 0.2, 0.05, 100) for i in range(40)]
    recs += [rec(100 + i, 10.0 + i / 4, 0.2, 0.05, 100, phase="tail", cut_at=12.0) for i in range(4)]
    slo = Slo(latency={"ttft_p95_ms": 300.0, "itl_p95_ms": 60.0})
    ctx = StepContext(load=8, t_window_start=0.0, t_window_end=10.0, window_stats=True, t_end=12.0)
    st = evaluate_step(recs, ctx, slo)
    assert st["stats_from"] == "window" and st["passed"] is True
    st.update({"t_window_start": 0.0, "t_window_end": 10.0, "t_end": 12.0})
    again = reevaluate(st, recs, slo)
    assert again["ttft_ms"] == st["ttft_ms"] and again["stats_from"] == "window"
    classic = evaluate_step(recs, StepContext(load=8, t_window_start=0.0, t_window_end=10.0), slo)
    assert "stats_from" not in classic  # older snapshots' steps evaluate as they always did
