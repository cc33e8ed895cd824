"""The "births" tail rule (kvtui.core.births, kvtui.core.window_stats): TPOT and E2E over the
window requests sent by one request's duration before the window's end, each whole; on records
whose truth is known."""

from __future__ import annotations

import pytest
from test_window_stats import rec

from kvtui.core.births import SAMPLE_FACTOR, births_cutoff
from kvtui.core.evaluate import StepContext, evaluate_step, reevaluate
from kvtui.io.scenario.schema import Slo


def test_the_cutoff_needs_a_duration_and_takes_in_twice_the_rules_samples() -> None:
    sends = [float(i) for i in range(40)]  # one a second over a 40 s window
    assert SAMPLE_FACTOR == 2
    assert births_cutoff(40.0, None, sends, 5) is None  # no request duration known: every one counts
    assert births_cutoff(40.0, 0.0, sends, 5) is None
    assert births_cutoff(40.0, 8.0, sends, 5) == 32.0  # 33 sent by 32 s ≥ 2 × 5
    # 33 < 2 × 17 sent by 32 s: the cutoff moves to the 34th send
    assert births_cutoff(40.0, 8.0, reversed(sends), 17) == 33.0
    assert births_cutoff(40.0, 8.0, sends, 20) is None  # the 40th send: that takes in every window request
    assert births_cutoff(40.0, 8.0, sends, 21) is None  # fewer sent than that: every one counts


def _step() -> list:
    # 80 requests sent in [0, 20) s, 100 tokens each: 50 ms apart, except request 75 (sent at 18.75 s,
    # after the cutoff) that streams at 500 ms a token and request 3 (sent by the cutoff) at 80 ms.
    recs = []
    for i in range(80):
        gap = 0.5 if i == 75 else (0.08 if i == 3 else 0.05)
        end = 20.0 + 5.5  # the step ended 5.5 s after the window: request 75 was still streaming
        recs.append(rec(i, i / 4, 0.2, gap, 100, cut_at=end if i == 75 else None))
    return recs


def test_tpot_and_e2e_count_the_requests_sent_by_the_cutoff_whole_and_only_those() -> None:
    recs = _step()
    slo = Slo(latency={"ttft_p95_ms": 300.0, "tpot_p95_ms": 60.0})
    ctx = StepContext(load=8, t_window_start=0.0, t_window_end=20.0, window_stats=True, t_end=25.5, births=True,
                      t_births_end=14.8)  # one request's duration (~5.2 s) before the window's end
    st = evaluate_step(recs, ctx, slo)
    lived = [r for r in recs if r.t_intended <= 14.8]
    assert st["births"] == {"cutoff": 14.8, "requests": len(lived)} == {"cutoff": 14.8, "requests": 60}
    assert st["samples"]["tpot"] == st["samples"]["e2e"] == 60
    assert st["samples"]["ttft"] == 80  # every window request has its TTFT
    # Request 3 (80 ms) is one of the 60; the slow request 75, sent after the cutoff, is in no TPOT
    # (its gaps so far would have read 500 ms).
    assert st["tpot_ms"]["mean"] == pytest.approx((59 * 50 + 80) / 60, 1e-3)
    assert st["tpot_ms"]["p95"] == pytest.approx(50.0, 1e-3)
    assert st["e2e_ms"]["p50"] == pytest.approx(200 + 99 * 50, 1e-3)
    assert st["passed"] is True
    # re-evaluated from the stored step, the same figures (the cutoff is in the step)
    st.update({"t_window_start": 0.0, "t_window_end": 20.0, "t_end": 25.5})
    again = reevaluate(st, recs, slo)
    assert again["tpot_ms"] == st["tpot_ms"] and again["births"] == st["births"]


def test_a_slow_request_sent_by_the_cutoff_fails_the_step() -> None:
    # 60 requests sent by the cutoff, 4 of them slow (6.7 %): p95 is theirs
    recs = [rec(i, i / 4, 0.2, 0.09 if i in (2, 7, 30, 41) else 0.05, 100) for i in range(80)]
    slo = Slo(latency={"tpot_p95_ms": 60.0})
    ctx = StepContext(load=8, t_window_start=0.0, t_window_end=20.0, window_stats=True, t_end=26.0, births=True,
                      t_births_end=14.8)
    st = evaluate_step(recs, ctx, slo)
    assert st["passed"] is False and st["tpot_ms"]["p95"] == pytest.approx(90.0, 1e-3)


def test_no_cutoff_counts_every_window_request_and_goodput_follows_the_counted_ones() -> None:
    recs = _step()
    recs[75] = rec(75, 75 / 4, 0.2, 0.5, 100)  # ran to its end: 500 ms a token
    slo = Slo(latency={"tpot_p95_ms": 60.0}, min_goodput=0.9)
    every = evaluate_step(recs, StepContext(load=8, t_window_start=0.0, t_window_end=20.0, window_stats=True,
                                            t_end=80.0, births=True, t_births_end=None), slo)
    assert every["births"] == {"cutoff": None, "requests": 80} and every["samples"]["tpot"] == 80
    assert every["tpot_ms"]["mean"] == pytest.approx((78 * 50 + 80 + 500) / 80, 1e-3)
    assert every["goodput"] == pytest.approx(78 / 80, abs=1e-4)  # requests 3 and 75 miss 60 ms
    cut = evaluate_step(recs, StepContext(load=8, t_window_start=0.0, t_window_end=20.0, window_stats=True,
                                          t_end=80.0, births=True, t_births_end=14.8), slo)
    assert cut["goodput"] == pytest.approx(59 / 60, abs=1e-4)  # over the 60 requests TPOT counts
