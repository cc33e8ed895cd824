"""The Markdown report's quality sections: the fixed-prompt guard per mode against the reference
mode, then the quality suite (accuracy with its interval per task, Δ, verdict, q-adjusted cost)."""

from __future__ import annotations

from typing import Any

from kvtui.report.text import fmt, fmt_share, table


def quality_section(doc: dict[str, Any], comp: dict[str, Any]) -> list[str]:
    rows = comp.get("rows", [])
    sc = doc.get("scenario") or {}
    q = sc.get("quality") or {}
    if not any(r.get("quality") for r in rows):
        why = "Not run (`[quality] enabled = false`)." if not q.get("enabled") else "No mode collected quality outputs."
        return [why]
    notes = {(r.get("quality") or {}).get("skipped") for r in rows}
    if len(notes) == 1 and None not in notes:
        return [f"Skipped in every mode: {notes.pop()}."]
    out = [f"{q.get('prompts', '?')} fixed prompts of {q.get('prompt_tokens', '?')} tokens, "
           f"{q.get('max_tokens', '?')} output tokens, temperature 0, one at a time; "
           f"reference mode: {comp.get('quality_reference') or '—'}.", ""]
    heads = ["mode", "exact match", "top-1 agreement", "logprob agreement", "mean |Δ logprob|", "verdict"]
    trows = []
    for r in rows:
        qq = r.get("quality") or {}
        if not qq:
            trows.append([r["mode"], "—", "—", "—", "—", "not collected"])
        elif qq.get("skipped"):
            trows.append([r["mode"], "—", "—", "—", "—", f"skipped: {qq['skipped']}"])
        elif qq.get("reference"):
            trows.append([r["mode"], "—", "—", "—", "—", f"reference ({qq.get('prompts')} prompts)"])
        else:
            lp = qq.get("logprob_agreement")
            d = qq.get("mean_abs_logprob_diff")
            verdict = f"**FLAGGED**: {qq.get('why')}" if qq.get("flagged") else "ok"
            if qq.get("note"):
                verdict += f" ({qq['note']})"
            trows.append([r["mode"], fmt_share(qq.get("exact_match_rate")), fmt_share(qq.get("top1_agreement"), 1),
                          "—" if lp is None else f"{lp:.3f}", "—" if d is None else f"{d:.3f}", verdict])
    out.append(table(heads, trows, markdown=True))
    th = next((t for t in ((r.get("quality") or {}).get("thresholds") for r in rows) if t), None)
    if th:
        out += ["", f"Flagged below {th['min_exact_match']:.0%} exact match or "
                    f"{th['min_logprob_agreement']:.2f} logprob agreement."]
    return out + suite_section(doc, rows)


def suite_section(doc: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """The quality suite (kvtui.quality): accuracy ± CI and n per task and mode, Δ and verdict."""
    suites = [(r, (r.get("quality") or {}).get("suite")) for r in rows]
    if not any(s for _, s in suites):
        return []
    names = []
    for _, s in suites:
        for n in (s or {}).get("tasks") or {}:
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
        for n in names:
            t = (s.get("tasks") or {}).get(n)
            if not t:
                cells.append("—")
                continue
            ci = t.get("ci") or [None, None]
            cell = f"{fmt_share(t.get('accuracy'))} [{fmt_share(ci[0])}–{fmt_share(ci[1])}] n={t.get('n')}"
            if t.get("delta_pt") is not None:
                cell += f", Δ {t['delta_pt']:+.1f} pt, {'**REGRESSION**' if t.get('flagged') else t.get('verdict')}"
            cells.append(cell)
        a = (s.get("tasks") or {}).get("agreement")
        if a:
            d = a.get("mean_abs_logprob_diff")
            cells.append(f"{fmt_share(a.get('exact_match_rate'))} / {fmt_share(a.get('top1_agreement'), 1)} / "
                         + ("—" if d is None else f"{d:.3f}"))
        else:
            cells.append("reference" if (r.get("quality") or {}).get("reference") else "—")
        cells.append(fmt(r.get("usd_per_mtok_out_qadj"), 3))
        cells.append("—" if s.get("wall_s") is None else f"{s['wall_s']:.0f} s")
        trows.append(cells)
    out.append(table(heads, trows, markdown=True))
    out += ["", "*quality-adjusted $/Mtok*: the plain $/Mtok × reference accuracy ÷ the mode's, pooled over the "
                "ground-truth tasks (a wrong answer is asked again); never below the plain figure."]
    return out
