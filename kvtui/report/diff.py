"""Two snapshots side by side (two GPUs, two vLLM versions, two settings) in the comparison table.

Modes are paired by name (by position when the two runs share no name and have as many
modes). For each pair the table shows A's row (the reference, 1.00×) and B's row with its
× and Δ against A's same mode. What differs between the runs — GPU, versions, scenario
values — is listed above the table, so a reader knows whether it is like for like.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvtui.explore.document import flatten as _flat
from kvtui.explore.document import setting_changes
from kvtui.io.snapshot.schema import Comparison, Environment, Mode, Run
from kvtui.report.figures import against, comparison
from kvtui.report.text import caveats, comparison_headers, comparison_row, labels, table

_IGNORED = {("server", "port"), ("server", "startup_timeout_s"), ("server", "stop_timeout_s")}


def scenario_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    sa, sb = Run.view(a).scenario or {}, Run.view(b).scenario or {}
    out = []
    for section in ("server", "workload", "ramp", "slo", "cost", "quality"):
        fa, fb = _flat(sa.get(section) or {}), _flat(sb.get(section) or {})
        for k in sorted(set(fa) | set(fb)):
            if (section, k.split(".")[0]) in _IGNORED:
                continue
            if fa.get(k) != fb.get(k):
                out.append(f"{section}.{k}: {fa.get(k)!r} → {fb.get(k)!r}")
    return out


def _modes(doc: dict[str, Any]) -> tuple[Mode, ...]:
    return Run.view(doc).all_modes


def mode_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Settings of the modes both runs have by name (a dtype, a quantization, an extra arg…)."""
    mb = {m.name: m for m in _modes(b)}
    out = []
    for ma in _modes(a):
        other = mb.get(ma.name)
        if other is not None:
            changes = setting_changes(dict(ma.settings or {}), dict(other.settings or {}))
            out += [f"mode {ma.name}: {c}" for c in changes]
    return out


_ENVIRONMENT = (("engine", "engine"), ("gpu_names", "GPU"), ("gpu_count", "GPU count"), ("driver", "driver"),
                ("cuda", "CUDA"), ("simulated", "simulated"))


def environment_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    ea, eb = Run.view(a).environment or Environment(), Run.view(b).environment or Environment()
    out = []
    for key, title in _ENVIRONMENT:
        va, vb = getattr(ea, key), getattr(eb, key)
        if va != vb:
            out.append(f"{title}: {va!r} → {vb!r}")
    versions_a = sorted({m.info.version or "?" for m in _modes(a)})
    versions_b = sorted({m.info.version or "?" for m in _modes(b)})
    if versions_a != versions_b:
        out.append(f"server version: {', '.join(versions_a)} → {', '.join(versions_b)}")
    return out


def pair_modes(a: dict[str, Any], b: dict[str, Any]) -> tuple[list[tuple[int | None, int | None]], str | None]:
    na = [m.name for m in _modes(a)]
    nb = [m.name for m in _modes(b)]
    common = [n for n in na if n in nb]
    if not common and na and len(na) == len(nb):
        return [(i, i) for i in range(len(na))], "no mode names in common: modes paired by position"
    pairs: list[tuple[int | None, int | None]] = [(i, nb.index(n) if n in nb else None) for i, n in enumerate(na)]
    pairs += [(None, j) for j, n in enumerate(nb) if n not in na]
    return pairs, None


def compare_docs(a: dict[str, Any], b: dict[str, Any], name_a: str = "A", name_b: str = "B") -> dict[str, Any]:
    """{"rows", "note", "differences", "load_kind"}: each run's comparison rows with every figure
    (kvtui.report.figures, as the other views show them), B's × and Δ against A's same mode."""
    ca, cb = comparison(a, fresh=True), comparison(b, fresh=True)
    pairs, note = pair_modes(a, b)
    rows = []
    unmatched = []
    for i, j in pairs:
        ra = dict(ca["rows"][i]) if i is not None else None
        rb = dict(cb["rows"][j]) if j is not None else None
        if ra is not None:
            against(ra, ra if rb is not None else None)
            ra["mode"] = f"{ra['mode']} [{name_a}]"
            rows.append(ra)
        if rb is not None:
            against(rb, ca["rows"][i] if i is not None else None)
            rb["mode"] = f"{rb['mode']} [{name_b}]"
            rows.append(rb)
        one = rb if ra is None else ra if rb is None else None
        if one is not None:
            unmatched.append(one["mode"])
    notes = [n for n in (note,) if n]
    if unmatched:
        notes.append(f"only in one run (no ratio): {', '.join(unmatched)}")
    kinds = {Comparison.view(ca).load_kind, Comparison.view(cb).load_kind}
    return {
        "rows": rows,
        "note": "; ".join(notes) or None,
        "load_kind": kinds.pop() if len(kinds) == 1 else "mixed",
        "differences": environment_differences(a, b) + scenario_differences(a, b) + mode_differences(a, b),
    }


def render_diff(a: dict[str, Any], b: dict[str, Any], name_a: str = "A", name_b: str = "B", markdown: bool = False,
                title_a: str = "", title_b: str = "", width: int | None = None, wide: bool = False) -> str:
    """The diff as text or Markdown. Text with a `width` fits it as the run's ending does: the table's
    columns chosen by width (kvtui.report.fit_table; `wide` keeps them all), the prose wrapped."""
    comp = compare_docs(a, b, name_a, name_b)
    heads = comparison_headers(load_kind=comp["load_kind"])
    rows = [comparison_row(r) for r in comp["rows"]]
    em = (lambda s: f"*{s}*") if markdown else (lambda s: s)  # noqa: E731
    lines = []
    if markdown:
        lines += ["# kvtui diff", ""]
    lines += [f"{name_a} = {title_a or 'first snapshot'}: " + em(labels(a)),
              f"{name_b} = {title_b or 'second snapshot'}: " + em(labels(b)), ""]
    if comp["differences"]:
        lines.append("What differs between the runs:" if not markdown else "**What differs between the runs:**")
        lines += [f"- {d}" for d in comp["differences"]] + [""]
    else:
        lines += ["Same environment and scenario settings.", ""]
    lines += [f"Each {name_b} row against the same mode of {name_a} (× and Δ); {name_a} rows are the reference.", ""]
    fitted = not markdown and width is not None
    if fitted:
        from kvtui.report.fit_table import fitted_table

        lines.append(TABLE)  # put in after the prose is wrapped: a table line is never wrapped
    else:
        lines.append(table(heads, rows, markdown))
    if comp["note"]:
        lines += ["", f"note: {comp['note']}"]
    lines += _quality_diff(a, b, name_a, name_b)
    from kvtui.report.prediction_report import diff_lines

    later: dict[str, tuple[Any, Any]] = {}  # tables fitted after the prose is wrapped, as the comparison is

    def tabulate(h: Any, r: Any) -> str:
        later[key := f"{TABLE}{len(later)}"] = (h, r)
        return key

    lines += diff_lines(a, b, name_a, name_b, tabulate if fitted else None)
    for nm, doc in ((name_a, a), (name_b, b)):
        cv = caveats(doc)
        if cv:
            lines += ["", f"Caveats of {nm}:"] + [f"- {c}" for c in cv]
    if fitted:
        assert width is not None
        lines = [fitted_table(heads, rows, width, wide) if line == TABLE
                 else fitted_table(*later[line], width, wide) if line in later else line
                 for line in _wrapped(lines, width)]
    text = "\n".join(lines)
    return text.rstrip("\n") + "\n"


TABLE = "\0table"  # where the fitted table goes


def _wrapped(lines: list[str], width: int) -> list[str]:
    """Prose lines wrapped to `width` ("- " items indented under their dash); blank lines kept."""
    import textwrap

    out: list[str] = []
    for line in lines:
        if line == TABLE or len(line) <= width:
            out.append(line)
            continue
        indent = "  " if line.startswith("- ") else ""
        out += textwrap.wrap(line, max(20, width), subsequent_indent=indent, break_on_hyphens=False)
    return out


def display_name(path: str | Path) -> str:
    return Path(path).name


def _quality_diff(a: dict[str, Any], b: dict[str, Any], name_a: str, name_b: str) -> list[str]:
    """Per mode present in both runs with the quality suite: B's accuracy per task against A's, paired by item."""
    from kvtui.quality.verdict import compare_suites

    by_a = {m.name: m for m in _modes(a)}
    out: list[str] = []
    for mb in _modes(b):
        ma = by_a.get(mb.name)
        ta = ma.quality.tasks if ma is not None and ma.quality is not None else None
        tb = mb.quality.tasks if mb.quality is not None else None
        if not ta or not tb:
            continue
        tol = float(((Run.view(b).scenario or {}).get("quality") or {}).get("tolerance_pt", 2.0) or 0.0)
        v = compare_suites({k: t.to_dict() for k, t in ta.items()}, {k: t.to_dict() for k, t in tb.items()}, tol)
        for task, t in v["tasks"].items():
            if not isinstance(t, dict) or t.get("reference_accuracy") is None:
                continue
            delta = f"Δ {t['delta_pt']:+.1f} pt, {t['verdict']}" if t.get("delta_pt") is not None else t.get("verdict",
                "")
            out.append(f"- {mb.name} quality {task}: {name_a} {t['reference_accuracy']:.0%} → {name_b} "
                       f"{t['accuracy']:.0%} (n = {t['n']}; {delta})")
    return (["", "Quality, same mode and items in both runs:"] + out) if out else []
