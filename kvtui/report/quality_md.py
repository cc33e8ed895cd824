"""The Markdown report's quality sections: the fixed-prompt guard per mode against the reference
mode, then the quality suite (accuracy with its interval per task, Δ, verdict, q-adjusted cost)."""

from __future__ import annotations

from typing import Any

from kvtui.io.snapshot.schema import ComparisonRow, Mode, QualityAtKnee, QualityTask, RowQuality, RowSuite
from kvtui.report.text import fmt, fmt_share, table


def _quality(r: dict[str, Any]) -> RowQuality:
    """A comparison row's quality verdict, typed; empty (falsy) where the row has none."""
    return ComparisonRow.of(r).quality or RowQuality()


def quality_section(doc: dict[str, Any], comp: dict[str, Any]) -> list[str]:
    rows = comp.get("rows", [])
    sc = doc.get("scenario") or {}
    q = sc.get("quality") or {}
    quals = [_quality(r) for r in rows]
    if not any(quals):
        why = "Not run (`[quality] enabled = false`)." if not q.get("enabled") else "No mode collected quality outputs."
        return [why]
    notes = {qq.skipped for qq in quals}
    if len(notes) == 1 and None not in notes:
        return [f"Skipped in every mode: {notes.pop()}."]
    out = [f"{q.get('prompts', '?')} fixed prompts of {q.get('prompt_tokens', '?')} tokens, "
           f"{q.get('max_tokens', '?')} output tokens, temperature 0, one at a time; "
           f"reference mode: {comp.get('quality_reference') or '—'}.", ""]
    heads = ["mode", "exact match", "top-1 agreement", "logprob agreement", "mean |Δ logprob|", "verdict"]
    trows = []
    for r, qq in zip(rows, quals):
        if not qq:
            trows.append([r["mode"], "—", "—", "—", "—", "not collected"])
        elif qq.skipped:
            trows.append([r["mode"], "—", "—", "—", "—", f"skipped: {qq.skipped}"])
        elif qq.reference:
            trows.append([r["mode"], "—", "—", "—", "—", f"reference ({qq.prompts} prompts)"])
        else:
            lp = qq.logprob_agreement
            d = qq.mean_abs_logprob_diff
            verdict = f"**FLAGGED**: {qq.why}" if qq.flagged else "ok"
            if qq.note:
                verdict += f" ({qq.note})"
            trows.append([r["mode"], fmt_share(qq.exact_match_rate), fmt_share(qq.top1_agreement, 1),
                          "—" if lp is None else f"{lp:.3f}", "—" if d is None else f"{d:.3f}", verdict])
    out.append(table(heads, trows, markdown=True))
    th = next((t for t in (qq.thresholds for qq in quals) if t), None)
    if th:
        out += ["", f"Flagged below {th['min_exact_match']:.0%} exact match or "
                    f"{th['min_logprob_agreement']:.2f} logprob agreement."]
    return out + suite_section(doc, rows)


def suite_section(doc: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """The quality suite (kvtui.quality): accuracy ± CI and n per task and mode, Δ and verdict."""
    suites = [(r, _quality(r).suite) for r in rows]
    if not any(s for _, s in suites):
        return []
    names = []
    for _, s in suites:
        for n in (s.tasks if s else None) or {}:
            if n != "agreement" and n not in names:
                names.append(n)
    q = ((doc.get("scenario") or {}).get("quality") or {})
    out = ["", "### Quality suite", "",
           f"Tasks with ground truth, generated from the scenario's seed ({q.get('items', '?')} items a task; the same "
           f"items in every mode), chat API, temperature 0, {q.get('concurrency', '?')} at a time, before each mode's "
           "load (none counted in a step). Accuracy with its 95 % Wilson interval and n; Δ against the reference mode "
           "with the paired 95 % interval; *beyond noise* = McNemar's exact test p < 0.05; a **regression** is beyond "
           f"noise and larger than the tolerance ({q.get('tolerance_pt', '?')} pt).", ""]
    heads = ["mode"] + names + ["agreement (exact / top-1 / mean |Δ logprob|)", "q-adj $/Mtok out", "phase"]
    trows = []
    for r, s in suites:
        if not s:
            continue
        cells = [r["mode"]]
        tasks = s.tasks or {}  # each task's verdict: a plain object (kvtui.quality.verdict)
        for n in names:
            t = tasks.get(n)
            if not t:
                cells.append("—")
                continue
            if t.get("not_run"):
                cells.append("not run: " + str(t["not_run"]).split(" (")[0])  # the whole line under the table
                continue
            ci = t.get("ci") or [None, None]
            cell = f"{fmt_share(t.get('accuracy'))} [{fmt_share(ci[0])}–{fmt_share(ci[1])}] n={t.get('n')}"
            if t.get("delta_pt") is not None:
                cell += f", Δ {t['delta_pt']:+.1f} pt, {'**REGRESSION**' if t.get('flagged') else t.get('verdict')}"
            cells.append(cell)
        a = tasks.get("agreement")
        if a:
            d = a.get("mean_abs_logprob_diff")
            cells.append(f"{fmt_share(a.get('exact_match_rate'))} / {fmt_share(a.get('top1_agreement'), 1)} / "
                         + ("—" if d is None else f"{d:.3f}"))
        else:
            cells.append("reference" if _quality(r).reference else "—")
        cells.append(fmt(r.get("usd_per_mtok_out_qadj"), 3))
        cells.append("—" if s.wall_s is None else f"{s.wall_s:.0f} s")
        trows.append(cells)
    out.append(table(heads, trows, markdown=True))
    out += ["", "*quality-adjusted $/Mtok*: the plain $/Mtok × reference accuracy ÷ the mode's, pooled over the "
                "ground-truth tasks (a wrong answer is asked again); never below the plain figure."]
    out += harness_notes(doc)
    return out + equal_quality_section(rows) + at_knee_section(doc)


def equal_quality_section(rows: list[dict[str, Any]]) -> list[str]:
    """Per mode: equivalence to the reference (TOST) and the q-adjusted $/Mtok out as a range."""
    from kvtui.quality.equivalence import range_text, task_statements

    suites = [(r, _quality(r).suite or RowSuite()) for r in rows]
    reference = next((r["mode"] for r, s in suites if s.equivalence and s.equivalence.reference), None)
    lines = []
    for r, s in suites:
        eq = s.equivalence
        if not eq:
            continue
        cost = fmt(r.get("usd_per_mtok_out"), 3) + range_text(ComparisonRow.of(r).usd_per_mtok_out_qadj_range)
        if eq.reference:
            lines.append(f"- {r['mode']}: the reference; $/Mtok out {cost}")
        elif eq.shown:
            ci = eq.ci90_pt or [None, None]
            lines.append(f"- {r['mode']}: within {eq.margin_pt:g} pt of the reference over n={eq.n} items "
                         f"(TOST, 95 %; Δ 90 % interval {ci[0]:+.1f}…{ci[1]:+.1f} pt); "
                         f"$/Mtok out {cost}")
        else:
            need = (f"about {eq.items_needed:,} items needed" if eq.items_needed
                    else "no n shows it: the observed Δ is at or past the margin")
            ci = eq.ci90_pt or [None, None]
            ci_s = f" (Δ 90 % interval {ci[0]:+.1f}…{ci[1]:+.1f} pt)" if ci[0] is not None else ""
            lines.append(f"- {r['mode']}: equal quality within {eq.margin_pt:g} pt not shown at n={eq.n}"
                         f"{ci_s}; {need}; $/Mtok out {cost}")
        if not eq.reference:  # and per task: "fp8-kv is within 2 pt of bf16 on gsm8k (TOST, 95 %, n = 300)"
            lines += [f"  - {t}" for t in task_statements(r["mode"], reference, s)]
    if not lines:
        return []
    return ["", "### Cost at equal quality", "",
            "Equivalence: the paired Δ's 90 % interval inside ±tolerance_pt (two one-sided tests at 5 %). The "
            "q-adjusted range carries the Δ's 95 % interval and the knee's interval (`knee_interval`; "
            "without one the knee is taken as exact, and the line says so).", ""] + lines


def at_knee_section(doc: dict[str, Any]) -> list[str]:
    """Quality at the operating point: the answers under the knee's load against the same mode's alone."""
    from kvtui.quality.under_load import sentence

    modes: list[tuple[Mode, QualityAtKnee, dict[str, Any]]] = []
    for m in doc.get("modes") or []:
        md = Mode.of(m)
        if md.quality is not None and md.quality.at_knee is not None:
            modes.append((md, md.quality.at_knee, m["quality"]["at_knee"]))
    if not modes:
        return []
    out = ["", "### Quality at the knee", "",
           "The same items again while the knee's load runs (the knee's concurrency in flight in all, the items "
           "among them; none counted in a step), against the same mode's answers alone: answers changed (greedy "
           "both times), accuracy under load against alone (paired, McNemar), the preemptions the server counted "
           "while they ran.", ""]
    heads = ["mode", "knee", "in flight (load + items)", "changed", "accuracy Δ (95 %)", "p", "verdict",
             "top-1 agreement", "preemptions", "phase"]
    trows = []
    for md, k, _ in modes:
        if k.skipped:
            trows.append([md.stored("name"), "—", "—", "—", "—", "—", f"not measured: {k.skipped}", "—", "—", "—"])
            continue
        v = k.vs_alone or {}
        ci = v.get("delta_ci_pt") or [None, None]
        agree = (v.get("tasks") or {}).get("agreement") or {}
        trows.append([md.stored("name"), fmt(k.load), f"{k.generator_load} + {k.concurrency}",
                      f"{v.get('changed', 0)} of {v.get('compared', 0)}",
                      "—" if v.get("delta_pt") is None else f"{v['delta_pt']:+.1f} pt [{ci[0]:+.1f}…{ci[1]:+.1f}]",
                      "—" if v.get("p_value") is None else f"{v['p_value']:.3g}", v.get("verdict") or "—",
                      fmt_share(agree.get("top1_agreement"), 1), fmt(k.preemptions),
                      "—" if k.wall_s is None else f"{k.wall_s:.0f} s"])
    out.append(table(heads, trows, markdown=True))
    out += [""] + [f"- {sentence(str(md.stored('name')), raw)}" for md, _, raw in modes]
    return out


def harness_notes(doc: dict[str, Any]) -> list[str]:
    """Each lm-evaluation-harness suite once: its scoring, shots, items, or why it did not run."""
    seen: dict[str, str] = {}
    for m in doc.get("modes") or []:
        q = Mode.of(m).quality
        tasks: dict[str, QualityTask] = dict(q.tasks or {}) if q is not None else {}
        for name, t in tasks.items():
            if not (t.source or "").startswith("lm-eval") or name in seen:
                continue
            if t.not_run:
                seen[name] = f"- `{name}` ({t.source}): not run: {t.not_run}"
            else:
                shots = t.num_fewshot
                by_task = t.by_task or {}
                seen[name] = (f"- `{name}`: {t.scoring}, {shots if shots is not None else '?'}-shot, "
                              f"{t.n} items a mode"
                              + (f" from its {len(by_task)} tasks" if by_task else "")
                              + f" (dataset {t.dataset}); the harness built the prompts and scored the answers"
                              + (f"; {t.shots_note}" if t.shots_note else ""))
    return ["", "Suites through lm-evaluation-harness:", ""] + list(seen.values()) if seen else []
