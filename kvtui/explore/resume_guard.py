"""What --resume refuses before anything runs: another measurement, or figures no run can give.

A journal of a run with another prompt length and SLO was once resumed: kvtui warned twice,
kept an old step as PASS under an SLO that step fails, and answered from it (exit 0). The
choice made here: a kept step is kept with its verdict, so a resume is refused when what that
verdict was judged under differs — the workload, the SLO, the model or engine, the way a step
measures — naming the first field that differs. (To judge old steps under a new SLO, `kvtui
replay SNAPSHOT` and its SLO edit re-evaluate them from their records, claiming no new run.)
Settings of one mode that changed are not refused: that mode is measured again (resume.py).

A resumed snapshot's figures are untrusted input too: a negative count, an error rate above 1,
a NaN latency, a load of 0 are refused, naming the mode, step and field — never kept as a
finished mode. So are figures that contradict each other: a step kept as PASS whose own stored
latency (or error rate, or goodput) fails this SLO — the scenario copy inside a snapshot can be
edited to match while its steps were judged under another — an answer (best_concurrency) that
is no passed step's load, and a mode measured by another engine than this run's (a vLLM mode's
steps would be kept under a simulated run's label, or the reverse).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterator

from kvtui.errors import UsageError

# What a kept verdict was judged under. Server: the model and engine (and what makes the same
# engine another one: weights format, simulated GPU and clock). Ramp: how a step measures, not
# where the search goes (start, max, step may change: the search simply continues).
SERVER_KEYS = ("engine", "model", "served_model_name", "load_format", "gpu", "time_scale", "url")
RAMP_KEYS = ("load", "arrival", "burst_size", "warmup_s", "window_s", "window_requests", "min_samples", "protocol")
# A snapshot written before ramp.protocol existed was measured the classic way.
RAMP_DEFAULTS_THEN = {"protocol": "classic"}


def retired_protocol(prev: dict[str, Any]) -> str | None:
    """Why `prev`'s steps cannot be resumed: measured with a retired protocol (the classic one, issue
    46; a snapshot from before ramp.protocol existed was), or None. A resume keeps a finished mode's
    verdicts and continues a cut one: either would put steps measured two ways in one answer (the
    classic ramp read TPOT p95 ~7 % and TTFT p95 ~2x above the steady state), so neither is done."""
    from kvtui.io.scenario.schema import RETIRED_PROTOCOLS

    ramp = (prev.get("scenario") or {}).get("ramp")
    if isinstance(ramp, dict) and ramp:
        said = ramp.get("protocol", RAMP_DEFAULTS_THEN["protocol"])
        if said in RETIRED_PROTOCOLS:
            how = "" if "protocol" in ramp else ", written before ramp.protocol existed"
            return f"ramp.protocol = {said!r} there{how}"
    for m in prev.get("modes") or []:
        for st in (m.get("steps") or []) if isinstance(m, dict) else []:
            if isinstance(st, dict) and st.get("protocol") in RETIRED_PROTOCOLS:
                return f"mode {m.get('name')!r}: step protocol = {st['protocol']!r}"
    return None
WHOLE = ("workload", "slo")


def _flat(x: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _flat(v, f"{prefix}.{k}")
    else:
        yield prefix, x


def _fields(d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in WHOLE:
        out.update(_flat(d.get(key) or {}, key))
    for key, names in (("server", SERVER_KEYS), ("ramp", RAMP_KEYS)):
        sec = d.get(key) or {}
        if isinstance(sec, dict):
            if key == "ramp" and sec:
                sec = {**RAMP_DEFAULTS_THEN, **sec}
            out.update(_flat({k: sec[k] for k in names if k in sec}, key))
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def differing_field(old: dict[str, Any], new: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first field of what a verdict was judged under that differs: (dotted name, old, new).
    A field missing on one side is unset there (None): a key an older kvtui did not write is no
    difference while this scenario leaves it unset, and a target added (an SLO on TTFT) is one."""
    a, b = _fields(old), _fields(new)
    for name in list(a) + [k for k in b if k not in a]:
        va, vb = a.get(name), b.get(name)
        if not _same(va, vb):
            return name, va, vb
    return None


# -- figures no run can give -----------------------------------------------------------------

COUNTS = ("requests", "errors", "preemptions", "running_max", "waiting_max")
FRACTIONS = ("error_rate", "goodput", "kv_cache_usage_max", "kv_cache_usage_mean", "prefix_cache_hit_rate")
RATES = ("output_tok_s", "input_tok_s", "total_tok_s", "request_s", "goodput_req_s", "window_s", "duration_s")
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


MAX_COUNT = 2**53  # no run makes more requests than a float counts exactly


def _count(v: Any) -> bool:
    """A whole number ≥ 0 (an int, or a float with no fraction, as a /metrics counter gives it)."""
    return _num(v) and math.isfinite(v) and v >= 0 and float(v).is_integer() and v <= MAX_COUNT


def step_problem(st: dict[str, Any]) -> str | None:
    """Why a stored step's figures are impossible (None when each is in its range)."""
    for k in ("load", "concurrency"):
        v = st.get(k)
        if v is not None and not (_num(v) and math.isfinite(v) and v > 0):
            return f"{k} = {v!r} (a load is a finite number above 0)"
    for k in COUNTS:
        v = st.get(k)
        if v is not None and not _count(v):
            return f"{k} = {v!r} (a count is a whole number from 0 to 2**53)"
    if _num(st.get("errors")) and _num(st.get("requests")) and st["errors"] > st["requests"]:
        return f"errors = {st['errors']!r} > requests = {st['requests']!r}"
    for k in FRACTIONS:
        v = st.get(k)
        if v is not None and not (_num(v) and 0 <= v <= 1):
            return f"{k} = {v!r} (a fraction is 0–1)"
    for k in RATES:
        v = st.get(k)
        if v is not None and not (_num(v) and math.isfinite(v) and v >= 0):
            return f"{k} = {v!r} (≥ 0 and finite)"
    for grp in ("samples", "server_tokens"):
        for k, v in (st.get(grp) or {}).items() if isinstance(st.get(grp), dict) else ():
            if v is not None and not _count(v):
                return f"{grp}.{k} = {v!r} (a count is a whole number from 0 to 2**53)"
    for k in LATENCIES:
        d = st.get(k)
        if d is None:
            continue
        if not isinstance(d, dict):
            return f"{k} = {d!r} (not a latency summary)"
        for q, v in d.items():
            if v is None:
                continue
            # +inf is a failed request's latency (stored "inf"); NaN or a negative time is no latency.
            if not _num(v) or math.isnan(v) or v < 0:
                return f"{k}.{q} = {v!r} (a latency or count is ≥ 0)"
    if st.get("passed") not in (True, False, None):
        return f"passed = {st.get('passed')!r} (true, false or null)"
    return None


def verdict_problem(st: dict[str, Any], slo: Any) -> str | None:
    """Why a step stored as PASS cannot have passed `slo` by its own stored figures (None when it
    can, or is no PASS): each latency target's percentile, the error rate, the goodput."""
    if st.get("passed") is not True:
        return None
    for metric, pct, limit in slo.targets():
        d = st.get(f"{metric}_ms")
        v = d.get(pct) if isinstance(d, dict) else None
        if v is None or not _num(v) or v > limit:
            return (f"passed = true, but its {metric}_ms.{pct} = {v!r} does not meet "
                    f"{metric}_{pct}_ms ≤ {limit:g}")
    er = st.get("error_rate")
    if _num(er) and er > slo.max_error_rate:
        return f"passed = true, but its error_rate = {er!r} is above max_error_rate {slo.max_error_rate:g}"
    g = st.get("goodput")
    if slo.min_goodput and _num(g) and g < slo.min_goodput:
        return f"passed = true, but its goodput = {g!r} is below min_goodput {slo.min_goodput:g}"
    if st.get("cut"):
        return "passed = true on a step cut short (no verdict is given on one)"
    return None


def engine_problem(m: dict[str, Any], engine: str) -> str | None:
    """Why a stored mode was measured by another engine than `engine` (None when it was not)."""
    if m.get("engine") not in (None, engine):
        return f"engine = {m.get('engine')!r} there, {engine!r} in this scenario"
    sim = m.get("simulated")
    if sim is not None and sim is not (engine == "sim"):
        what = "the simulator" if engine == "sim" else "not the simulator"
        return f"simulated = {sim!r} there, but this scenario's engine {engine!r} is {what}"
    return None


def mode_problem(m: dict[str, Any], slo: Any = None) -> str | None:
    """Why a stored mode's figures are impossible or contradict each other (None when they do not).
    `slo`: the SLO its verdicts were judged under (each PASS is checked against its own figures)."""
    best = m.get("best_concurrency")
    if best is not None and not (_num(best) and math.isfinite(best) and best > 0):
        return f"best_concurrency = {best!r} (a load is a finite number above 0)"
    for i, st in enumerate(m.get("steps") or []):
        if not isinstance(st, dict):
            return f"steps[{i}] is not a step object"
        why = step_problem(st) or (verdict_problem(st, slo) if slo is not None else None)
        if why:
            return f"steps[{i}]: {why}"
    if best is not None and m.get("complete") is not False:  # a finished mode answers from it as it is
        passed = {float(st["load"]) for st in m.get("steps") or []
                  if st.get("passed") is True and not st.get("remeasured") and _num(st.get("load"))}
        if float(best) not in passed:
            return (f"best_concurrency = {best!r}, but no step passed at that load "
                    f"(passed: {', '.join(f'{x:g}' for x in sorted(passed)) or 'none'})")
    return None


def records_source(prev: dict[str, Any]) -> Path | None:
    """The records sidecar a resumed snapshot names (beside it, or absolute), or None."""
    name, path = prev.get("records"), prev.get("_path")
    if not isinstance(name, str) or not name or not path:
        return None
    return Path(name) if Path(name).is_absolute() else Path(path).with_name(name)


def check_resumable(scenario_doc: dict[str, Any], resumes: list[dict[str, Any]]) -> None:
    """One UsageError line (exit 2) when a resumed snapshot was measured under another workload,
    SLO, model or engine, or holds figures no run can give."""
    from kvtui.safeio import input_problem

    for prev in resumes:
        src = prev.get("_path") or "(snapshot)"
        from kvtui.terminal import has_controls, printable

        names: set[str] = set()
        for m in prev.get("modes") or []:
            if not isinstance(m, dict):
                continue
            name = m.get("name")
            if not isinstance(name, str) or not name or has_controls(name):
                raise UsageError(f"--resume {src}: mode name {printable(repr(name))} is not a mode name (control or "
                                 "bidi characters, or not text): not resumed")
            if name in names:
                raise UsageError(f"--resume {src}: the mode name {name!r} appears twice: not resumed")
            names.add(name)
        rec = records_source(prev)
        why_not = input_problem(rec) if rec is not None else None
        if why_not:  # read to carry its records over: a FIFO there once hung the resume
            raise UsageError(f"--resume {src}: its records {rec} {why_not}: not read")
        retired = retired_protocol(prev)
        if retired:
            raise UsageError(f"--resume {src}: {retired}: its steps were measured with the classic protocol, "
                             "retired (issue 46), and a resume would answer from them beside steps measured "
                             "with the continuous one; run afresh (kvtui replay, export, diff and reevaluate "
                             "still read it)")
        diff = differing_field(prev.get("scenario") or {}, scenario_doc)
        if diff:
            name, a, b = diff
            raise UsageError(f"--resume {src}: {name} = {a!r} there, {b!r} in this scenario: its steps were "
                             "judged under another measurement, and a resume keeps their verdicts; run "
                             "afresh, or resume with the same settings (the SLO edit of kvtui replay "
                             "re-judges a run from its records)")
        from kvtui.io.scenario.slo_table import slo_of

        slo = slo_of(scenario_doc)
        engine = (scenario_doc.get("server") or {}).get("engine")
        for m in prev.get("modes") or []:
            if not isinstance(m, dict):
                continue
            other = engine_problem(m, engine) if isinstance(engine, str) else None
            if other:
                raise UsageError(f"--resume {src}: mode {m.get('name')!r}: {other}: its steps were measured by "
                                 "another engine; run afresh")
            why = mode_problem(m, slo)
            if why:
                raise UsageError(f"--resume {src}: mode {m.get('name')!r}: {why}: impossible figures, "
                                 "not resumed")


def facts_problem(doc: dict[str, Any]) -> str | None:
    """The one validator of a snapshot's facts, for every reader (--resume, export, diff, replay,
    whatif, calibrate, import): a step's figures out of range, a PASS its own stored figures fail
    under the snapshot's own SLO, an answer no passed step had, a mode name twice. None when the
    facts hold. A reader refuses such a file (`kvtui.report.wellformed.require_facts`) rather than
    show an impossible figure as an answer."""
    from kvtui.io.scenario.slo_table import slo_of

    sc = doc.get("scenario")
    try:
        slo = slo_of(sc if isinstance(sc, dict) else {})
    except Exception:  # an SLO table no loader reads: the figures are still checked, not the verdicts
        slo = None
    seen: set[str] = set()
    for i, m in enumerate(doc.get("modes") or []):
        if not isinstance(m, dict):
            continue
        name = m.get("name")
        if isinstance(name, str):
            if name in seen:
                return f"modes[{i}]: the mode name {name!r} appears twice"
            seen.add(name)
        try:
            why = mode_problem(m, slo)
        except (TypeError, ValueError, AttributeError, OverflowError) as e:
            why = f"unreadable figures ({type(e).__name__})"
        if why:
            return f"mode {name!r}: {why}"
    return None
