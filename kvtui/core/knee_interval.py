"""A knee with its uncertainty (issue 28, item 4): "46 [40–52]" rather than "46, noisy".

The search's knee is the highest load whose step passed below the lowest that failed; each verdict
comes from the p95s (or other SLO percentiles) of a few hundred requests, and near the knee a
repeat can flip. How sure is each verdict, and so the knee? In the spirit of AIPerf's
smooth-isotonic recipe:

1. per judged step, a bootstrap of its SLO figures: `n_boot` resamples of the step's window
   requests (with replacement, whole requests: a request's TTFT, TPOT, E2E and its token gaps go
   together), each judged against the SLO as the step was; the share that passes is the step's
   pass probability (`step_pass_probability`);
2. per load, those probabilities pooled (a load measured twice: their mean, weighted by requests),
   then a monotone fit over load: the pass probability cannot rise with load (isotonic regression,
   pool-adjacent-violators, `isotonic_decreasing`);
3. the interval (`knee_interval`): lo, the highest measured load that still passes with fitted
   probability ≥ `confidence`; hi, the highest measured load whose fitted pass probability is
   above 1 − `confidence` (it may yet pass). The reported knee always lies inside: where every
   verdict is beyond doubt, lo = hi = the knee (as sure as the resolution allows; shown as the
   knee alone, "46", where a wider one shows as "46 [40–52]"). Where no measured load passes
   with that confidence (a knee at the lowest load measured, whose passes were near its limit),
   the lower end is not known: lo is null, shown as "26 [?–26]", never the knee itself.

Percentile targets are judged by rank, not by sorting each resample: a sample's pNN is at most the
limit exactly when enough of its values are (the same linear interpolation as kvtui.core.stats
at the boundary rank), so a resample costs one pass over its requests. ITL counts each request's
gaps above the limit (a token gap belongs to its request). Error rate and goodput are resampled
with the requests; the server's preemption count is not (it has no per-request share) and keeps
the step's own verdict.

Pure functions, a seeded generator: the same steps give the same interval.
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from kvtui.core.stats import PCTS, min_samples_for, percentile

N_BOOT = 200
CONFIDENCE = 0.9
METHOD = "bootstrap-isotonic"
PER_REQUEST = ("ttft", "tpot", "e2e")


@dataclass
class Req:
    """One window request as the SLO sees it (ms; None: not measured, e.g. a 1-token TPOT)."""

    ok: bool
    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None
    itl: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Target:
    metric: str  # ttft, tpot, itl, e2e
    pct: str  # p50, p90, p95, p99
    limit: float  # ms


def pct_passes(values: Sequence[float], q: float, limit: float) -> bool | None:
    """Whether pNN of `values` (failures as +inf) is at most `limit`; None when under-sampled."""
    if len(values) < min_samples_for(q):
        return None
    return percentile(sorted(values), q) <= limit


# A request's share of one target: (samples, samples <= limit, the largest of those, the smallest
# above the limit). Summed (counts) and max/min-ed over a resample's requests, they decide its pNN.
Tally = tuple[int, int, float, float]
NONE: Tally = (0, 0, -math.inf, math.inf)


def _tally(values: Iterable[float], limit: float) -> Tally:
    n = le = 0
    top, low = -math.inf, math.inf
    for v in values:
        n += 1
        if v <= limit:
            le += 1
            top = max(top, v)
        else:
            low = min(low, v)
    return (n, le, top, low)


def rank_passes(n: int, le: int, top: float, low: float, q: float, limit: float) -> bool | None:
    """pct_passes from the tally alone: the sorted sample's values up to index le − 1 are within the
    limit, `top` the last of them, `low` the next; the percentile interpolates at q·(n − 1)."""
    if n < min_samples_for(q):
        return None
    pos = q * (n - 1)
    i = math.floor(pos)
    frac = pos - i
    if frac == 0 or i + 1 < le:
        return i < le
    if i >= le:
        return False
    # i == le − 1: between `top` (within) and `low` (above)
    if math.isinf(low):
        return False
    return top + (low - top) * frac <= limit


def request_tallies(r: Req, targets: Sequence[Target]) -> list[Tally]:
    out = []
    for t in targets:
        if not r.ok:
            out.append((0, 0, -math.inf, math.inf) if t.metric == "itl" else (1, 0, -math.inf, math.inf))
        elif t.metric == "itl":
            out.append(_tally(r.itl, t.limit))
        else:
            v = getattr(r, t.metric)
            out.append(NONE if v is None else _tally([v], t.limit))
    return out


def _good(r: Req, targets: Sequence[Target]) -> bool:
    return r.ok and all((v := getattr(r, t.metric)) is not None and v <= t.limit
                        for t in targets if t.metric in PER_REQUEST)


def _verdict(sample: Sequence[int], tallies: Sequence[Sequence[Tally]], fails: Sequence[bool], good: Sequence[bool],
             targets: Sequence[Target], max_error_rate: float, min_goodput: float | None) -> bool | None:
    n = len(sample)
    if not n:
        return None
    verdict: bool | None = True
    for j, t in enumerate(targets):
        tn = le = 0
        top, low = -math.inf, math.inf
        for i in sample:
            a, b, c, d = tallies[i][j]
            tn += a
            le += b
            if c > top:
                top = c
            if d < low:
                low = d
        ok = rank_passes(tn, le, top, low, PCTS[t.pct], t.limit)
        if ok is False:
            return False
        if ok is None:
            verdict = None
    if sum(1 for i in sample if fails[i]) / n > max_error_rate:
        return False
    if min_goodput and sum(1 for i in sample if good[i]) / n < min_goodput:
        return False
    return verdict


def _seed(*parts: Any) -> int:
    return zlib.crc32("|".join(str(p) for p in parts).encode())


def step_pass_probability(reqs: Sequence[Req], targets: Sequence[Target], max_error_rate: float = 1.0,
                          min_goodput: float | None = None, n_boot: int = N_BOOT, seed: int = 0) -> float | None:
    """The share of `n_boot` bootstrap resamples of the step's requests that pass the SLO (an
    undecided resample, too few samples for a percentile, counts as not passing: as the search
    does). None when the step has no requests."""
    n = len(reqs)
    if not n or n_boot <= 0:
        return None
    tallies = [request_tallies(r, targets) for r in reqs]
    fails = [not r.ok for r in reqs]
    good = [_good(r, targets) for r in reqs]
    rng = random.Random(seed)
    passed = 0
    for _ in range(n_boot):
        sample = [rng.randrange(n) for _ in range(n)]
        if _verdict(sample, tallies, fails, good, targets, max_error_rate, min_goodput) is True:
            passed += 1
    return passed / n_boot


def observed_verdict(reqs: Sequence[Req], targets: Sequence[Target], max_error_rate: float = 1.0,
                     min_goodput: float | None = None) -> bool | None:
    """The verdict of the requests themselves (no resampling): the step's own, by ranks."""
    tallies = [request_tallies(r, targets) for r in reqs]
    return _verdict(range(len(reqs)), tallies, [not r.ok for r in reqs], [_good(r, targets) for r in reqs], targets,
                    max_error_rate, min_goodput)


def isotonic_decreasing(xs: Sequence[float], ys: Sequence[float], ws: Sequence[float] | None = None) -> list[float]:
    """Weighted least-squares fit of `ys` over increasing `xs` that never rises (pool adjacent
    violators): each block of neighbours that would rise is replaced by its weighted mean."""
    w = list(ws) if ws is not None else [1.0] * len(ys)
    blocks: list[list[float]] = []  # [mean, weight, count]
    for y, wi in zip(ys, w):
        blocks.append([float(y), float(wi), 1])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            b = blocks.pop()
            a = blocks[-1]
            tot = a[1] + b[1]
            a[0] = (a[0] * a[1] + b[0] * b[1]) / tot if tot else (a[0] + b[0]) / 2
            a[1] = tot
            a[2] += b[2]
    out: list[float] = []
    for mean, _, count in blocks:
        out.extend([mean] * int(count))
    return out


def pooled(points: Iterable[tuple[float, float, float]]) -> tuple[list[float], list[float], list[float]]:
    """(loads, probabilities, weights) from (load, p, weight) points, one per load (weighted mean)."""
    acc: dict[float, list[float]] = {}
    for load, p, w in points:
        a = acc.setdefault(float(load), [0.0, 0.0])
        a[0] += p * w
        a[1] += w
    loads = sorted(acc)
    return loads, [acc[x][0] / acc[x][1] if acc[x][1] else 0.0 for x in loads], [acc[x][1] for x in loads]


def knee_interval(points: Iterable[tuple[float, float, float]], knee: float | None,
                  confidence: float = CONFIDENCE, n_boot: int = N_BOOT) -> dict[str, Any] | None:
    """The knee's interval from (load, pass probability, weight) points; None without a knee."""
    loads, ps, ws = pooled(points)
    if knee is None or not loads:
        return None
    fit = isotonic_decreasing(loads, ps, ws)
    sure = [x for x, p in zip(loads, fit) if p >= confidence]
    maybe = [x for x, p in zip(loads, fit) if p > 1 - confidence]
    # no measured load is sure: the knee's lower end lies below every load measured (unknown)
    lo = min(max(sure), knee) if sure else None
    hi = max(max(maybe), knee) if maybe else knee
    return {"lo": lo, "hi": hi, "method": METHOD, "confidence": confidence, "n_boot": n_boot,
            "pass_probability": [[x, round(p, 3)] for x, p in zip(loads, fit)]}


def fmt_knee(best: Any, interval: Any, fmt: Any = None, floor: bool = False) -> str:
    """'46 [40–52]' where the mode's interval is wider than its knee; the knee alone where every
    verdict around it is beyond doubt (lo = hi: the snapshot keeps that, the line stays short) or
    where the mode has no interval (a snapshot from before: its exports are unchanged).
    `floor`: no measured load failed above the knee, so it is a lower bound: '≥ 22', never an
    interval that would read as bounded above."""
    f = fmt or (lambda x: "—" if x is None else f"{x:g}")
    s = f(best)
    if floor and best is not None:
        return f"≥ {s}"
    if best is None or not isinstance(interval, dict) or interval.get("hi") is None:
        return s
    if interval.get("lo") is None:  # no measured load passes with the interval's confidence
        return f"{s} [?–{f(interval['hi'])}]"
    if interval["lo"] == interval["hi"] == best:
        return s
    return f"{s} [{f(interval['lo'])}–{f(interval['hi'])}]"


def describe(text: str, best: float | None, interval: dict[str, Any] | None) -> str:
    """The search's one-line answer ("16 (next 18 fails), confirmed") with the knee's interval
    after the knee ("16 [14–16] (next 18 fails), confirmed"); unchanged without one."""
    head = "—" if best is None else f"{best:g}"
    if interval is None or best is None or not text.startswith(head):  # "≥ 22 …" (a floor) included
        return text
    return fmt_knee(best, interval) + text[len(head):]


# --- from kvtui's own records and steps -------------------------------------------------------

def reqs_from_records(records: Iterable[Any], time_scale: float | None = None) -> list[Req]:
    """The window requests of a step (kvtui.core.record.Record) in ms, as evaluate_step counts
    them: counted ones, the client's own errors left out (they are not the server's)."""
    s = 1000.0 / time_scale if time_scale else 1000.0
    out = []
    for r in records:
        if not r.counted or (not r.ok and r.error == "client"):
            continue
        ms = [None if v is None else v * s for v in (r.ttft, r.tpot, r.e2e)]
        out.append(Req(ok=r.ok, ttft=ms[0], tpot=ms[1], e2e=ms[2], itl=[g * s for g in r.itl]))
    return out


def reqs_for_step(step: dict[str, Any], records: Sequence[Any]) -> list[Req]:
    """The requests a step's verdict is over, each as the step's figures count it. A step whose
    figures come from its window alone (`stats_from = "window"`, the continuous protocol) counts
    every request that started in the window: its TTFT, its gaps that arrived by the step's end,
    its TPOT and E2E where it lived its whole course (kvtui.core.window_stats); most of those
    had not finished, so its completed requests alone are too few for a p95 (40: every resample
    undecided, so every pass read 0 %; the H200 8k / 512 runs of 2026-12-05). Any other step: its
    counted requests, whole."""
    if step.get("stats_from") != "window" or "t_window_start" not in step or "t_window_end" not in step:
        return reqs_from_records(records, step.get("time_scale") or None)
    from kvtui.core.evaluate import step_context, window_of
    from kvtui.core.window_stats import window_requests

    win = window_of(records, step_context(step))  # the very samples the step's figures come from

    def ms(v: float | None) -> float | None:
        return None if v is None else v * 1000.0

    out = []
    for r in window_requests(records):
        row = win.per_request.get(r.id)
        if row is None:  # a server error counts against every target; the client's own is not the server's
            if not r.ok and r.error not in ("cancelled", "client"):
                out.append(Req(ok=False))
            continue
        out.append(Req(ok=True, ttft=ms(row["ttft"]), tpot=ms(row["tpot"]), e2e=ms(row["e2e"]),
                       itl=[g * 1000.0 for g in win.itl_of.get(r.id, ())]))
    return out


def slo_targets(slo: Any) -> list[Target]:
    return [Target(m, p, float(lim)) for m, p, lim in slo.targets()]


def judged(step: dict[str, Any]) -> bool:
    # `remeasured`: a replica died in it and its load was measured again on the others: not a verdict
    return (step.get("why", "search") in ("search", "confirm") and step.get("passed") is not None
            and not step.get("remeasured"))


def for_step(step: dict[str, Any], records: Sequence[Any], slo: Any, mode: str = "", n_boot: int = N_BOOT) -> \
        dict[str, Any] | None:
    """The step's pass probability, for its snapshot entry (step["pass_probability"]); None for a
    step the search does not judge. A step whose verdict the requests do not carry (a preemption
    count over the limit, an error burst) keeps its verdict: probability 0 or 1."""
    if not judged(step):
        return None
    reqs = reqs_for_step(step, records)
    p = step_pass_probability(reqs, slo_targets(slo), slo.max_error_rate, slo.min_goodput or None, n_boot,
                              _seed(mode, step.get("index"), step.get("load")))
    if p is None:
        return None
    others = [c for c in step.get("checks") or [] if c.get("target") == "preemptions_per_request"]
    if step.get("error_burst") or any(c.get("ok") is False for c in others):
        p = 0.0
    return {"p": round(p, 3), "n_boot": n_boot, "requests": len(reqs)}


def for_mode(steps: Iterable[dict[str, Any]], knee: float | None) -> dict[str, Any] | None:
    """modes[].knee_interval from the steps' pass probabilities; None where none has one (a
    snapshot from before this: it shows the knee alone, as it did)."""
    pts = []
    n_boot = N_BOOT
    for s in steps:
        pp = s.get("pass_probability")
        if not judged(s) or not isinstance(pp, dict) or pp.get("p") is None or s.get("load") is None:
            continue
        pts.append((float(s["load"]), float(pp["p"]), float(max(1, pp.get("requests") or 1))))
        n_boot = int(pp.get("n_boot") or n_boot)
    if not pts:
        return None
    return knee_interval(pts, knee, n_boot=n_boot)
