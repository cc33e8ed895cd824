"""The Markdown report's quality sections: the fixed-prompt guard per mode against the reference
mode, then the quality suite (accuracy with its interval per task, Δ, verdict, q-adjusted cost)."""

from __future__ import annotations

from typing import Any

from kvtui.report.text import fmt, fmt_share, table
from kvtui.snapshot.schema import Mode, QualityAtKnee, QualityTask


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
            if t.get("not_run"):
                cells.append("not run: " + str(t["not_run"]).split(" (")[0])  # the whole line under the table
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
    out += harness_notes(doc)
    return out + equal_quality_section(doc, rows) + at_knee_section(doc)


def equal_quality_section(doc: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """Per mode: equivalence to the reference (TOST) and the q-adjusted $/Mtok out as a range."""
    from kvtui.quality.equivalence import range_text, task_statements

    reference = next((r["mode"] for r in rows if (((r.get("quality") or {}).get("suite") or {}).get("equivalence")
                                                   or {}).get("reference")), None)
    lines = []
    for r in rows:
        eq = ((r.get("quality") or {}).get("suite") or {}).get("equivalence")
        if not eq:
            continue
        cost = fmt(r.get("usd_per_mtok_out"), 3) + range_text(r.get("usd_per_mtok_out_qadj_range"))
        if eq.get("reference"):
            lines.append(f"- {r['mode']}: the reference; $/Mtok out {cost}")
        elif eq.get("shown"):
            lines.append(f"- {r['mode']}: within {eq['margin_pt']:g} pt of the reference over n={eq['n']} items "
                         f"(TOST, 95 %; Δ 90 % interval {eq['ci90_pt'][0]:+.1f}…{eq['ci90_pt'][1]:+.1f} pt); "
                         f"$/Mtok out {cost}")
        else:
            need = (f"about {eq['items_needed']:,} items needed" if eq.get("items_needed")
                    else "no n shows it: the observed Δ is at or past the margin")
            ci = eq.get("ci90_pt") or [None, None]
            ci_s = f" (Δ 90 % interval {ci[0]:+.1f}…{ci[1]:+.1f} pt)" if ci[0] is not None else ""
            lines.append(f"- {r['mode']}: equal quality within {eq['margin_pt']:g} pt not shown at n={eq.get('n')}"
                         f"{ci_s}; {need}; $/Mtok out {cost}")
        if not eq.get("reference"):  # and per task: "fp8-kv is within 2 pt of bf16 on gsm8k (TOST, 95 %, n = 300)"
            lines += [f"  - {s}" for s in task_statements(r["mode"], reference, r["quality"]["suite"])]
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
