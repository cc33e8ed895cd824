"""The SLO figures' samples over a set of requests, in ms, as the sequential test looks at them
(kvtui.core.sequential): one TTFT, TPOT and E2E per request (a failed one counts as +inf, a
cancelled or client-side one not at all) and every inter-token gap for ITL. The offline
simulator's looks (kvtui.simulator.engine.continuous) and a live step's look at its window's end
(kvtui.explore.live_step) take them here."""

from __future__ import annotations

from typing import Iterable

from kvtui.core.record import Record


def slo_samples(records: Iterable[Record], cut: bool = False) -> dict[str, list[float]]:
    """`cut`: also the requests the step's end cut while they streamed (a held step's cut copies,
    error "cancelled" after their first token): their TTFT and their gaps so far count,
    as the window's own statistics count them; one cut before its first token counts as +inf for
    TTFT (its wait so far is only a lower bound, so a PASS never rests on it)."""
    rs = list(records)
    fails = [float("inf")] * sum(1 for r in rs if not r.ok and r.error not in ("cancelled", "client"))
    ok = [r for r in rs if r.ok]
    cuts = [r for r in rs if cut and r.error == "cancelled"]
    ttft_cut = [(r.t_first - r.t_intended) * 1e3 if r.t_first is not None else float("inf") for r in cuts]
    return {"ttft": [r.ttft * 1e3 for r in ok if r.ttft is not None] + ttft_cut + fails,
            "tpot": [r.tpot * 1e3 for r in ok if r.tpot is not None] + fails,
            "e2e": [r.e2e * 1e3 for r in ok if r.e2e is not None] + fails,
            "itl": [g * 1e3 for r in ok + cuts for g in r.itl]}
