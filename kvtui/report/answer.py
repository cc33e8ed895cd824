"""The answer of a run as data: who won each question, each mode against the baseline, and why.

One document in, one plain structure out (no drawing): the TUI's answer screen, the SVG
export of it and the tests read the same thing. The questions are the ones the comparison
answers — most concurrency at the SLO, most output tok/s at the SLO, cheapest $/Mtok,
least energy per token where the GPU reported power, quality where it was measured.
"""

from __future__ import annotations

import math
from typing import Any

from kvtui.core.evaluate import LIMIT_WORDS
from kvtui.io.snapshot.schema import ComparisonRow, CostRange, Equivalence, Mode, Run
from kvtui.report.text import FIGURE_CELLS, comparison, figure_cell, fmt_load, fmt_pct, fmt_x


def _winners(rows: list[dict[str, Any]], key: str, best: Any) -> tuple[list[str], Any]:
    vals = [r[key] for r in rows if r.get(key) is not None]
    if not vals:
        return [], None
    top = best(vals)
    return [str(r["mode"]) for r in rows if r.get(key) == top], top


def limit_sentence(r: dict[str, Any]) -> str | None:
    """What stopped the next load above the knee, in words ("decode, not the KV wall")."""
    lim = r.get("knee_limited_by")
    if not lim:
        return None
    words = LIMIT_WORDS.get(lim, lim)
    if lim == "kv_wall":
        return f"{fmt_load(r.get('next_load'))} hit the KV wall (cache full, preemptions)"
    every = [x for x in r.get("knee_limits") or [] if x]
    if len(every) > 1:  # repeats at that load failed on different limits: all of them, as the step rows say
        said = " and ".join(LIMIT_WORDS.get(x, x) for x in every)
        return f"{fmt_load(r.get('next_load'))} failed on {said} (its steps disagree; the last: {words})"
    if lim in ("decode", "prefill"):
        return f"{fmt_load(r.get('next_load'))} failed on {words}, not the KV wall"
    return f"{fmt_load(r.get('next_load'))} failed on {words}"


def mode_line(r: dict[str, Any], base: str | None, so_far: float | None = None) -> str:
    """One sentence per mode: its figures against the baseline, and why it stopped where it did."""
    if r.get("best") is None:
        if r.get("complete") is False and not r.get("error") and so_far is not None:
            return f"{r['mode']}: did not finish; {fmt_load(so_far)} met the SLO so far (unconfirmed, not compared)"
        why = r.get("error") or ("no load met the SLO" if r.get("complete", True) else "did not finish")
        lim = limit_sentence(r) if not r.get("error") and r.get("next_load") is not None else None
        # the lowest load that failed, and on what, as its step rows say (a cut mode's first fail too)
        return f"{r['mode']}: no result at the SLO ({why}; {lim})" if lim else \
            f"{r['mode']}: no result at the SLO ({why})"
    parts = [f"{figure_cell('best', r)} at the SLO"]  # "≥ 22" where the knee is a lower bound
    if r["mode"] != base and r.get("best_x") is not None:
        parts[0] += f" ({figure_cell('best_x', r)})"
    lim = limit_sentence(r)
    if lim:
        parts.append(lim)
    if (r.get("kv_tokens_x") or 0) >= 1.3 and (r.get("best_x") or 0) < 1.1 and r.get("knee_limited_by") not in (None,
        "kv_wall"):
        parts.append(f"{fmt_x(r['kv_tokens_x'])} the KV tokens bought little: "
                     f"{LIMIT_WORDS.get(r['knee_limited_by'], r['knee_limited_by'])} set the limit")
    if r.get("complete") is False:
        parts.append("search not finished")
    return f"{r['mode']}: " + "; ".join(parts)


def _so_far(modes: list[dict[str, Any]], name: Any) -> float | None:
    from kvtui.core.search import best_load

    m = next((x for x in modes if x.get("name") == name), None)
    return best_load(m.get("steps") or []) if m else None


def _equivalence(row: ComparisonRow) -> Equivalence | None:
    """A row's pooled equivalence to the reference (TOST), where its quality suite ran."""
    q = row.quality
    eq = q.suite.equivalence if q is not None and q.suite is not None else None
    return eq if eq else None


def equal_quality(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The cheapest $/Mtok out among the modes shown equal in quality to the reference (TOST), with its range;
    None where no mode ran the quality suite."""
    from kvtui.quality.equivalence import range_text

    # Each judged row with its typed view and its equivalence, read once.
    judged = [(r, typed, eq) for r in rows if (eq := _equivalence(typed := ComparisonRow.of(r)))]
    if not judged:
        return None
    equal = [j for j in judged if j[2].reference or j[2].shown]
    names, top = _winners([r for r, _, _ in equal], "usd_per_mtok_out", min)
    if not names:
        return None
    win, win_typed, eq = next(j for j in equal if j[0]["mode"] == names[0])
    rng = win_typed.usd_per_mtok_out_qadj_range
    text = f"${top:.3f}/Mtok" + range_text(rng)
    text += (" (the reference)" if eq.reference
             else f", within {eq.margin_pt:g} pt of the reference (TOST, 95 %)")
    close = [(r, typed) for r, typed, _ in equal
             if r is not win and _overlaps(rng, typed.usd_per_mtok_out_qadj_range)]
    if close:  # cheapest by its point figure, not beyond the knees' and the Δs' uncertainty
        text += "; its range overlaps " + ", ".join(
            f"{r['mode']}'s" + range_text(typed.usd_per_mtok_out_qadj_range).replace(" (q-adjusted ", " (")
            for r, typed in close)
    others = [(r, e) for r, _, e in judged if not (e.reference or e.shown)]
    if others:
        text += "; not shown equal: " + ", ".join(
            f"{r['mode']}" + (f" (about {e.items_needed:,} items needed)" if e.items_needed
                              else " (not at any n: Δ past the margin)")
            for r, e in others)
    return {"question": "cheapest at equal quality", "key": "usd_per_mtok_out_qadj", "winners": names, "value": top,
            "text": text, "tie": len(names) == len(done_of(rows)) and len(names) > 1}


def _overlaps(a: CostRange | None, b: CostRange | None) -> bool:
    """Do two q-adjusted $/Mtok ranges meet? (an open top reaches every higher figure)"""
    if not a or not b or a.lo is None or b.lo is None:
        return False
    a_hi = math.inf if a.hi is None else a.hi
    b_hi = math.inf if b.hi is None else b.hi
    return a.lo <= b_hi and b.lo <= a_hi


def done_of(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("best") is not None]


def at_knee_lines(doc: dict[str, Any]) -> list[str]:
    """'fp8-kv at its knee (64): 2 of 150 answers changed, accuracy Δ −0.7 pt within noise' per mode that ran it."""
    from kvtui.quality.under_load import sentence

    out = []
    for m in doc.get("modes") or []:
        if not isinstance(m, dict):
            continue
        md = Mode.of(m)
        if md.quality is not None and md.quality.at_knee is not None:  # a dict reads as one, `{}` included
            out.append(sentence(str(md.stored("name")), m["quality"]["at_knee"]))
    return out


def traffic_questions(done: list[dict[str, Any]], comp: dict[str, Any]) -> list[dict[str, Any]]:
    """A trace replay's answer in a capacity owner's words (`[ramp] load = "trace"`: the knee is the
    largest speed-up factor of the trace's own arrival times within the SLO): "this GPU serves your
    traffic at 2.3× its recorded rate in fp8-kv, 1.4× in bf16", and the GPUs the trace needs at 1×
    per mode, ceil(1 / factor) servers' GPUs, with its $/Mtok. A knee that is a floor (no factor
    failed above it) is "≥ 2.3×", and its GPUs "≤ N"."""
    if not done:
        return []
    gpus = int((comp.get("cost") or {}).get("gpus") or 1)
    ranked = sorted(done, key=lambda r: -float(r["best"]))

    def factor(r: dict[str, Any]) -> str:
        return f"{'≥ ' if r.get('best_lower_bound') else ''}{float(r['best']):.3g}×"

    who = "this GPU" if gpus == 1 else f"this {gpus}-GPU server"
    parts = [f"{factor(ranked[0])} its recorded rate in {ranked[0]['mode']}"]
    parts += [f"{factor(r)} in {r['mode']}" for r in ranked[1:]]
    need = []
    for r in ranked:
        n = math.ceil(1.0 / float(r["best"]) - 1e-9) * gpus
        usd = r.get("usd_per_mtok_out")
        need.append(f"{r['mode']} {'≤ ' if r.get('best_lower_bound') else ''}{n} GPU{'s' if n != 1 else ''}"
                    + (f" (${usd:.3f}/Mtok out)" if isinstance(usd, (int, float)) else ""))
    top = [str(ranked[0]["mode"])]
    return [{"question": "your traffic at the SLO", "key": "best", "winners": top, "value": ranked[0]["best"],
             "text": f"{who} serves your traffic at " + ", ".join(parts), "tie": False},
            {"question": "GPUs your traffic needs at 1×", "key": "gpus_at_1x", "winners": top,
             "value": None, "text": "; ".join(need), "tie": False}]


def build_answer(doc: dict[str, Any]) -> dict[str, Any]:
    """{"baseline", "load_kind", "questions": [...], "rows": [...], "lines": [...], "caveats": [...]}."""
    whole = comparison(doc)  # every figure, from the one place (kvtui.report.figures); rows copied, not changed
    comp = dict(whole, rows=[dict(r) for r in whole.get("rows") or []])
    rows = comp.get("rows") or []
    base = comp.get("baseline")
    done = [r for r in rows if r.get("best") is not None]
    unit = {"rate": "req/s", "trace": "× your traffic's recorded rate"}.get(str(comp.get("load_kind")),
                                                                           "concurrent requests")
    questions: list[dict[str, Any]] = []

    def ask(question: str, key: str, pick: Any, show: Any) -> None:
        names, top = _winners(done, key, pick)
        if names:
            q = {"question": question, "key": key, "winners": names, "value": top, "text": show(top),
                 "tie": len(names) == len(done) and len(done) > 1}
            if key == "best" and any(r.get("best_lower_bound") for r in done if r["mode"] in names):
                # a winner's knee is a floor: "≥ 22", and no tie is known between floors
                q.update(text=f"≥ {q['text']}", lower_bound=True, tie=False)
                if any(r.get("best_lower_bound") and r["mode"] not in names for r in done):
                    q["text"] += " (other modes' knees are lower bounds too)"
            questions.append(q)

    cell = FIGURE_CELLS  # each figure written by its one rule (report/text.py), as in the tables
    if comp.get("load_kind") == "trace":  # the knee in the capacity owner's words (the "best" question)
        questions += traffic_questions(done, comp)
    else:
        ask(f"most {unit} at the SLO", "best", max, cell["best"])
    ask("most output tok/s at the SLO", "output_tok_s", max, lambda v: f"{cell['output_tok_s'](v)} tok/s")
    ask("cheapest output tokens", "usd_per_mtok_out", min, lambda v: f"${cell['usd_per_mtok_out'](v)}/Mtok")
    equal = equal_quality(done)  # where a suite ran: only the modes shown equal (TOST), with the cost's range
    if equal is not None:
        questions.append(equal)
    else:
        ask("cheapest at equal quality", "usd_per_mtok_out_qadj", min,
            lambda v: f"${cell['usd_per_mtok_out_qadj'](v)}/Mtok quality-adjusted")
    ask("least energy per output token", "j_per_token_out", min, lambda v: f"{cell['j_per_token_out'](v)} J/token")
    quality = [(r, q) for r in rows if (q := ComparisonRow.of(r).quality)]
    if quality:
        flagged = [str(r["mode"]) for r, q in quality if q.flagged]
        text = ("flagged: " + ", ".join(flagged)) if flagged else "no mode flagged"
        # The largest accuracy change of any mode on any ground-truth task, with its verdict:
        # "fp8-w quotation −3.3 pt (within noise, n=150)".
        worst = None
        for r, q in quality:
            for task, t in ((q.suite.tasks if q.suite else None) or {}).items():
                if task != "agreement" and isinstance(t, dict) and isinstance(t.get("delta_pt"), (int, float)):
                    if worst is None or t["delta_pt"] < worst[2]["delta_pt"]:
                        worst = (r["mode"], task, t)
        if worst is not None:
            m, task, t = worst
            text += f"; largest drop: {m} {task} {t['delta_pt']:+.1f} pt ({t.get('verdict')}, n={t.get('n')})"
        questions.append({"question": "quality against the reference", "key": "quality", "winners": flagged,
                          "value": None, "text": text, "tie": False})
    knee_lines = at_knee_lines(doc)
    if knee_lines:
        questions.append({"question": "quality at the knee", "key": "quality_at_knee", "winners": [],
                          "value": None, "text": "; ".join(knee_lines), "tie": False})
    from kvtui.report.outcome import stopped_parts
    from kvtui.report.text import caveats as every_caveat

    # ONE list, from ONE place: the Markdown export's caveats are the TUI's, the headless answer's
    # and --json's (the simulator's extrapolations and "this host limited the live run" among them).
    caveats = every_caveat(doc)
    typed = Run.view(doc).all_modes
    modes = [m for m in doc.get("modes") or [] if isinstance(m, dict)]  # for _so_far (core.search reads dicts)
    predicted = []
    for tm in typed:
        row: dict[str, Any] = next((x for x in rows if x.get("mode") == tm.name), {})
        pk = tm.predicted_kv_concurrency
        if pk and row.get("best") is not None and comp.get("load_kind") not in ("rate", "trace"):
            predicted.append({"mode": tm.name, "what": "KV-bound", "predicted": pk, "measured": row["best"]})
    note = comp.get("note")
    from kvtui.report.outcome import no_mode_started

    if no_mode_started(doc):  # not "no mode met the SLO": none was measured at all
        note = "no mode started: each failed before its first step (why: below)"
    elif modes and not any(Mode.of(m).measured_steps for m in modes):  # stopped before a step finished
        from kvtui.explore.compare import NOTHING_MEASURED

        note = NOTHING_MEASURED
    return {
        "baseline": base,
        "note": note,
        "load_kind": comp.get("load_kind"),
        "questions": questions,
        "rows": rows,
        "lines": [mode_line(r, base, _so_far(modes, r["mode"])) for r in rows],
        "caveats": caveats,
        "predicted": predicted,
        "finished": bool((doc.get("run") or {}).get("finished")),
        "stopped": stopped_parts(doc),  # None, or "cut short: …; not run: …" (run.outcome = "stopped")
    }


def headline(ans: dict[str, Any]) -> str:
    """The answer in one line: the winner of the first question and by how much."""
    partial = f" — partial run ({ans['stopped']})" if ans.get("stopped") else ""
    if not ans["questions"]:
        return (ans.get("note") or "no mode met the SLO") + partial
    q = ans["questions"][0]
    if ans.get("load_kind") == "trace" and q["key"] == "best":  # "this GPU serves your traffic at 2.3× …"
        return q["text"] + partial
    if q["tie"]:
        return f"every mode reaches {q['text']} at the SLO{partial}"
    rows = {r["mode"]: r for r in ans["rows"]}
    w = q["winners"][0]
    x = rows[w].get("best_x")
    more = (f" ({figure_cell('best_x', rows[w])} {ans['baseline']})"
            if x is not None and w != ans["baseline"] and q["key"] == "best" else "")
    return (f"{' & '.join(q['winners'])}: {q['text']} {q['question'].split(' at ')[0].replace('most ', '')}{more}"
            + partial)


__all__ = ["build_answer", "headline", "mode_line", "limit_sentence", "fmt_pct"]


def answer_text(doc: dict[str, Any], width: int | None = None) -> str:
    """The answer as plain lines (no escapes): for a terminal that cannot show the screen (TERM=dumb).
    With `width` (the terminal's), it fits there as the headless ending does: lines wrapped under
    their own indent, the tables' columns chosen by width and the rest named (kvtui.report.fit_table);
    without, every column (the published runs' pinned text)."""
    from kvtui.report.text import comparison, comparison_headers, comparison_rows, comparison_table, labels

    ans = build_answer(doc)
    out = [f"ANSWER: {headline(ans)}", f"({labels(doc)})"]
    for q in ans["questions"]:
        out.append(f"  {q['question']}: {'every mode' if q['tie'] else ', '.join(q['winners']) or '—'} ({q['text']})")
    out.append("why:")
    out += [f"  - {line}" for line in ans["lines"]]
    if ans["caveats"]:
        out.append("caveats:")
        out += [f"  - {c}" for c in ans["caveats"]]
    out.append("")
    from kvtui.report.prediction_report import HEADERS, has_prediction, prediction_table, row

    if width is None:
        out.append(comparison_table(doc))
        if has_prediction(doc):
            out += ["", "predicted against measured (SIMULATED predictions):", prediction_table(doc)]
        return "\n".join(out) + "\n"
    from kvtui.report.fit_table import fitted_table

    out = [w for line in out for w in _wrapped(line, width)]
    comp = comparison(doc)
    out += _wrapped(f"Modes vs baseline {comp.get('baseline') or '—'} ({labels(doc)})", width)
    out.append(fitted_table(comparison_headers(doc), comparison_rows(doc), width))
    if comp.get("note"):
        out += _wrapped(f"note: {comp['note']}", width)
    if has_prediction(doc):
        modes = [m for m in doc.get("modes") or [] if isinstance(m, dict) and isinstance(m.get("prediction"), dict)]
        out += ["", "predicted against measured (SIMULATED predictions):",
                fitted_table(list(HEADERS), [row(m) for m in modes], width)]
    return "\n".join(out) + "\n"


def _wrapped(line: str, width: int) -> list[str]:
    """`line` in lines of at most `width`, the rest under its own text ("  - " keeps its indent)."""
    import textwrap

    hang = " " * (len(line) - len(line.lstrip(" ")) + 2)
    return textwrap.wrap(line, max(40, width), subsequent_indent=hang, break_long_words=False,
                         break_on_hyphens=False) or [""]
