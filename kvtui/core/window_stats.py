"""A step's latency samples from its measurement window alone (the "continuous" protocol).

The classic protocol holds the load after the window closes until every request that started in
it has finished (the tail: one whole E2E at 8k/512 on the H200), so each figure is over complete
requests. This estimator needs nothing after the window's end `t1` but the first tokens of the
requests that started in it (a TTFT wait, not an E2E one):

- population: the requests that *started* in [t0, t1] (phase "window"), as in the classic step;
  the ones cut at t1 (still streaming, cancelled or carried into the next step) count too;
- TTFT: from every such request (its first token may come after t1: the step waits for it; one
  that never came before the step ended counts at the time it had waited, a lower bound, and is
  counted in `ttft_censored`);
- TPOT: per request, from its gaps that arrived by t1 (a request cut mid-way counts by its gaps so
  far: (t_k − t_first) / (k − 1) chunks, scaled to tokens by the step's tokens per chunk); a
  request with no gap by t1 gives no TPOT (its TTFT still counts);
- ITL: every gap of those requests that ended by t1;
- E2E: only the requests that ended by t1. This one *is* length-biased (the quick finish first),
  so an SLO with an E2E target keeps the classic tail (`needs_tail`);
- tokens/s: the tokens that arrived inside the window, whoever sent them.

Bias, and why it is small: in a steady closed loop a decode step's time depends on the batch, not
on a request's own position, so a request's first k gaps are a fair sample of its TPOT; a request
seen for few gaps has a noisier mean, which widens the TPOT distribution a little (p95 reads high,
toward FAIL: never a faster wrong pass). bench/window_estimator.py measures it against the full
completion on the published H200 records and on the simulator (bench/results/window_estimator.md).
Pure functions of stored records: a saved run re-evaluates the same.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field
from typing import Iterable

from kvtui.core.births import born_by
from kvtui.core.record import Record


@dataclass
class WindowSamples:
    """Latency samples (seconds, modelled) of the requests that started in one window."""

    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    requests: int = 0  # started in the window, not cancelled before sending
    failures: int = 0  # ended in a server error (count as +inf latency)
    cut: int = 0  # still streaming at the window's end: counted by their gaps so far
    ttft_censored: int = 0  # no first token before the step ended: counted at the wait so far
    per_request: dict[str, dict[str, float | None]] = field(default_factory=dict)  # id -> ttft/tpot/e2e
    itl_of: dict[str, list[float]] = field(default_factory=dict)  # id -> its gaps in `itl` (the bootstrap's unit)
    # "births" (whole=True): the requests TPOT and E2E are over, by id (sent by the cutoff)
    lived: set[str] = field(default_factory=set)


def tail_rule(metrics: Iterable[str]) -> str:
    """How long a step holds its load after the window closes, given the figures the SLO judges:
    "births" (E2E or TPOT: every window request has its first token, and every one sent by the
    births cutoff has finished: kvtui.core.births) or "first_token" (TTFT, ITL, error rate, goodput
    without those: every window request has its first token). A classic step holds "full" (every
    window request finished).

    TPOT and E2E are over whole requests, never the window estimate of a cut one: that estimate is
    biased (bench/results/window_estimator.md: on the published H200 steps +9 % median, −30 … +38 %
    at worst, even with three quarters of the requests' gaps seen): a request's early gaps run long
    behind the prefills of the requests born with it, and how much the rest of its life makes up
    for that is not in the window. So they count the window requests that lived their whole course
    in the step: those sent by one request's duration before the window's end (kvtui.core.births)."""
    ms = set(metrics)
    return "births" if ms & {"e2e", "tpot"} else "first_token"


def gap_coverage(records: Iterable[Record], t_cut: float) -> float:
    """Share of the window requests' gaps (seen or still to come: max_tokens) that arrived by t_cut."""
    seen = total = 0
    recs = window_requests(records)
    tpc = tokens_per_chunk(recs)
    for r in recs:
        if r.t_first is None or not (r.ok or r.error == "cancelled"):
            continue
        n = _chunks_expected(r, tpc) - 1
        total += n
        seen += min(n, sum(1 for t in r.token_times()[1:] if t <= t_cut))
    return seen / total if total else 1.0


def window_requests(records: Iterable[Record]) -> list[Record]:
    """The requests a window estimate is over: started in the window, not cancelled before any
    token came unless their wait for it is all there is (see ttft_censored)."""
    return [r for r in records if r.phase == "window"]


def tokens_per_chunk(records: Iterable[Record]) -> float:
    """Output tokens per token-bearing chunk over the finished requests (1.0 when none say)."""
    tok = chunks = 0
    for r in records:
        if r.ok and r.output_tokens and r.t_first is not None:
            tok += r.output_tokens
            chunks += len(r.itl) + 1
    return tok / chunks if chunks else 1.0


def window_samples(records: Iterable[Record], t0: float, t1: float, t_end: float | None = None,
                   time_scale: float = 1.0, fill: str = "mean", whole: bool = False,
                   births_end: float | None = None) -> WindowSamples:
    """The window-only samples of the requests that started in [t0, t1] (see the module's note).

    `t_end`: when the step stopped (≥ t1): a request still streaming then is cut there, by its
    gaps so far; one with no first token by then waited that long (censored); None: t1.
    `time_scale` divides every time (simulator slow motion). `fill`: how a cut
    request's unseen gaps are counted in its TPOT ("resample": drawn from the window's own gaps,
    seeded by the request's id; "mean": the window's mean gap; "none": its gaps so far only).
    `whole` (the "births" tail rule): TPOT and E2E are over the whole window requests sent by
    `births_end` (None: every window request), each as it finished; no estimate of a cut one."""
    s = 1.0 / time_scale if time_scale else 1.0
    all_recs = list(records)
    recs = window_requests(all_recs)
    tpc = tokens_per_chunk(recs)
    out = WindowSamples()
    end = t1 if t_end is None else max(t1, t_end)
    cut: list[tuple[Record, dict[str, float | None], int, float]] = []  # (record, row, gaps seen, their sum)
    for r in recs:
        cancelled = r.error == "cancelled"
        if not r.ok and not cancelled:
            if r.error != "client":
                out.requests += 1
                out.failures += 1
            continue
        out.requests += 1
        row: dict[str, float | None] = {"ttft": None, "tpot": None, "e2e": None}
        out.per_request[r.id] = row
        if r.t_first is None:  # cancelled before its first token: censored at the wait so far
            out.ttft_censored += 1
            v = max(0.0, end - r.t_intended) * s
            out.ttft.append(v)
            row["ttft"] = v
            continue
        ttft = (r.t_first - r.t_intended) * s
        row["ttft"] = ttft
        out.ttft.append(ttft)
        if r.ok and r.t_last is not None and r.t_last <= end:
            e2e = (r.t_last - r.t_intended) * s
            row["e2e"] = e2e
            out.e2e.append(e2e)
            mine = [g * s for g in r.itl]
            out.itl.extend(mine)
            out.itl_of[r.id] = mine
            if r.tpot is not None:
                tp = r.tpot * s
                row["tpot"] = tp
                out.tpot.append(tp)
            continue
        out.cut += 1
        t = r.t_first
        k = 0
        mine = out.itl_of[r.id] = []
        for g in r.itl:
            if t + g > end:
                break
            t += g
            k += 1
            mine.append(g * s)
        out.itl.extend(mine)
        cut.append((r, row, k, t - r.t_first))
    # The unseen gaps are drawn from every gap that arrived in the window, whoever's: a time slice
    # of the steady state holds gaps of every position in a request's life (the window's own
    # requests' gaps are their early ones only, which run long behind their batch-mates' prefills).
    # A gap depends on where in its life a request is (its first ones run long behind the prefills
    # of the requests born with it), so the unseen gap j of a cut request is drawn from the window's
    # gaps at positions ≥ the ones it has seen.
    pool = sorted((j, g * s) for r in all_recs if r.t_first is not None for j, g in _gaps_inside(r, t0, end))
    positions = [j for j, _ in pool]
    gaps = [g for _, g in pool]
    suffix_sum = [0.0] * (len(gaps) + 1)
    for i in range(len(gaps) - 1, -1, -1):
        suffix_sum[i] = suffix_sum[i + 1] + gaps[i]
    for r, row, k, seen in cut:
        total = _chunks_expected(r, tpc) - 1  # gaps the request will have
        left = max(0, total - k)
        lo = bisect.bisect_left(positions, k)
        if fill == "none" or lo >= len(gaps) or total <= 0:
            if k < 1:
                continue
            tpot = seen * s / k / tpc
        else:
            if fill == "mean":
                rest = left * suffix_sum[lo] / (len(gaps) - lo)
            else:
                rng = random.Random(r.id)
                rest = sum(gaps[rng.randrange(lo, len(gaps))] for _ in range(left))
            tpot = (seen * s + rest) / max(total, k) / tpc
        row["tpot"] = tpot
        out.tpot.append(tpot)
    if whole:
        _whole_requests(out, recs, births_end, s)
    return out


def _whole_requests(out: WindowSamples, recs: list[Record], births_end: float | None, s: float) -> None:
    """TPOT and E2E over the window requests sent by `births_end`, each whole (the "births" rule):
    the step held its load until every one of them finished, so none is cut unless the step was
    (a cut step has no verdict). The others keep their TTFT and ITL only."""
    out.tpot, out.e2e, out.lived = [], [], set()
    for r in recs:
        row = out.per_request.get(r.id)
        if row is None:
            continue
        if not born_by(r.t_intended, births_end):
            row["tpot"] = row["e2e"] = None
            continue
        out.lived.add(r.id)
        done = r.ok and r.t_last is not None
        row["tpot"] = r.tpot * s if done and r.tpot is not None else None
        row["e2e"] = r.e2e * s if done and r.e2e is not None else None
        if row["tpot"] is not None:
            out.tpot.append(row["tpot"])
        if row["e2e"] is not None:
            out.e2e.append(row["e2e"])


def _gaps_inside(r: Record, t0: float, t1: float) -> Iterable[tuple[int, float]]:
    """(position in the request's life, gap) for its gaps that ended inside [t0, t1]."""
    assert r.t_first is not None
    t = r.t_first
    for j, g in enumerate(r.itl):
        t += g
        if t > t1:
            return
        if t >= t0:
            yield j, g


def _chunks_expected(r: Record, tpc: float) -> int:
    """How many token-bearing chunks a request will have (its max_tokens over tokens per chunk)."""
    want = r.expected_output_tokens or r.output_tokens or 0
    return max(len(r.itl) + 1, int(round(want / tpc))) if want else len(r.itl) + 1


def window_tokens(records: Iterable[Record], t0: float, t1: float) -> tuple[float, float]:
    """(output tokens, prompt tokens) that arrived inside [t0, t1], cut requests included: each
    chunk carries the request's tokens per chunk (its usage over its chunks, else the step's)."""
    recs = list(records)
    tpc = tokens_per_chunk(recs)
    out_tok = in_tok = 0.0
    for r in recs:
        if r.t_first is None or not (r.ok or r.error == "cancelled"):
            continue
        times = r.token_times()
        inside = sum(1 for t in times if t0 <= t <= t1)
        if inside:
            per = (r.output_tokens / len(times)) if (r.ok and r.output_tokens) else tpc
            out_tok += per * inside
        prompt = r.prompt_tokens or (r.expected_prompt_tokens if r.error == "cancelled" else None)
        if prompt and t0 <= r.t_first <= t1:
            in_tok += prompt
    return out_tok, in_tok
