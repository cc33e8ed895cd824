"""The "births" tail rule's cutoff: which window requests a step's TPOT and E2E count.

TPOT and E2E are figures of whole requests. A step that waited for every request sent in its
window to finish would hold its load one whole request's duration past the window's end (the
tail). Under the "births" rule (kvtui.core.window_stats.tail_rule) they count the window
requests sent by one request's duration before the window's end instead: those that lived their
whole course inside the step. The step holds its load until each of *those* has finished (and every
window request has its first token), so the tail is only the spread of request durations around
the estimate. Which requests count depends on their send times alone, never on how fast they were
served, so no quick request is favoured; the later ones still count for TTFT, ITL and tokens/s.

Shared by the load generator (live steps: counts from its workers) and the simulator's continuous
client (modelled steps), and read back by the evaluation (`Record.t_intended <= cutoff`).
"""

from __future__ import annotations

from typing import Iterable

# The cutoff takes in at least this many times the classic rule's sample count: TPOT and E2E are then
# a p95 over a subset of the window's requests (chosen by send time, so unbiased), and a subset of
# just the classic count is noisy where request lengths vary. On the published H200 steps the
# continuous protocol measured, against every window request run to its end: at 1× (40 for a p95)
# median −0.00 %, worst −17 % (real weights, lengths set by EOS); at 2× (80) worst −5.4 %, 27 of 28
# within 2 %, the tail held after the window 2.8 s at the median against 11.7 s for every request
# (bench/window_estimator.py; bench/results/window_estimator.md).
SAMPLE_FACTOR = 2


def born_by(t_intended: float, cutoff: float | None) -> bool:
    """Whether a window request sent at `t_intended` counts for TPOT and E2E (None: every one does)."""
    return cutoff is None or t_intended <= cutoff


def births_cutoff(t1: float, e2e_est_s: float | None, births: Iterable[float], need: int) -> float | None:
    """The send time by which a window request counts for TPOT and E2E, or None: every one counts.

    One request's duration (`e2e_est_s`, in the records' seconds) before the window's end `t1`; where
    fewer than SAMPLE_FACTOR × `need` window requests were sent by then (a window hardly longer than
    a request), the send time of that many-th one instead: a knee step is never judged on fewer
    samples than the SLO's percentiles ask (`need`, the classic rule), and the tail waits for those
    requests only. None where no duration is known or the cutoff would take in every window request
    anyway. `births`: the window requests' send times (t_intended)."""
    if e2e_est_s is None or e2e_est_s <= 0:
        return None
    sent = sorted(births)
    least = max(1, need) * SAMPLE_FACTOR
    cut = t1 - e2e_est_s
    if sum(1 for t in sent if t <= cut) < least:
        if len(sent) < least:
            return None
        cut = sent[least - 1]
    return None if not sent or cut >= sent[-1] else cut
