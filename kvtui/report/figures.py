"""Every figure a view shows of a run's modes, computed in one place: each view reads them here.

The answer screen, the comparison pop-up, `kvtui diff`, the Markdown, CSV and SVG exports and
the replay's plain text all show the same figures of a mode (max load @SLO, output tok/s @SLO,
$/Mtok out and in, quality-adjusted $/Mtok, J/token, and each one's × or Δ against a reference
row). They come from here, so no view can leave one out or compute it another way (`kvtui diff`
once showed "—" for J/token where the others showed figures: it built its rows from the bare
comparison, without the energy). How each figure is written on screen is `report/text.py`'s
`figure_cell`; tests/report/test_figures_agree.py renders every figure in every view and
asserts they agree.

The arithmetic itself stays where it was: the comparison (kvtui.explore.compare, which the
run stores in its snapshot) and the energy per token (kvtui.report.energy).
"""

from __future__ import annotations

from typing import Any

from kvtui.io.snapshot.schema import ComparisonRow


def comparison(doc: dict[str, Any], fresh: bool = False) -> dict[str, Any]:
    """The doc's comparison with every figure on each row: the stored one (or computed from its modes
    when it has none yet, or not one row per mode, or `fresh`: as the exports and `kvtui diff` do),
    with the energy per token — a copy: the stored comparison is not changed."""
    from kvtui.report.energy import add_energy

    comp = None if fresh else doc.get("comparison")
    if not (comp and comp.get("rows") is not None and len(comp["rows"]) == len(doc.get("modes", []))):
        from kvtui.explore.compare import compare_modes

        comp = compare_modes(doc)
    if any("best_lower_bound" not in r for r in comp["rows"]):  # a row stored before the field: from its mode
        comp = dict(comp, rows=_bounds_from_modes(doc, comp["rows"], comp.get("baseline")))
    if any("knee_limits" not in r for r in comp["rows"]):
        comp = dict(comp, rows=[_limits_from_steps(doc, r) for r in comp["rows"]])
    if all("j_per_token_out" in r for r in comp["rows"]):
        return comp
    return add_energy(doc, dict(comp, rows=[dict(r) for r in comp["rows"]]))


def _bounds_from_modes(doc: dict[str, Any], rows: list[dict[str, Any]], baseline: Any) -> list[dict[str, Any]]:
    """Rows stored before `best_lower_bound`: read it from each row's mode (copies), and the ×'s bound."""
    from kvtui.explore.compare import lower_bound, ratio_bound

    modes = {m.get("name"): m for m in doc.get("modes") or [] if isinstance(m, dict)}
    out = [dict(r, best_lower_bound=lower_bound(modes[r.get("mode")]) if r.get("mode") in modes else False)
           for r in rows]
    base = next((r for r in out if r.get("mode") == baseline), None)
    for r in out:
        b = ratio_bound(r, base) if r is not base else None
        if b is not None:
            r["best_x_bound"] = b
    return out


def _limits_from_steps(doc: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    """A row stored before the knee's limit came from its steps' own labels: read them now (the last
    failing step at the load above the knee, and every limit those steps name), so an older
    snapshot's answer never names a limit its dashboard's step rows contradict. A copy."""
    if "knee_limits" in r:
        return r
    from kvtui.explore.compare import next_steps

    mode = next((m for m in doc.get("modes") or [] if isinstance(m, dict) and m.get("name") == r.get("mode")), None)
    nxt = next_steps(mode) if mode is not None else []
    if not nxt:
        return r
    return dict(r, knee_limited_by=nxt[-1].get("limited_by"),
                knee_limits=sorted({str(s.get("limited_by")) for s in nxt if s.get("limited_by")}))


def against(r: dict[str, Any], ref: dict[str, Any] | None) -> dict[str, Any]:
    """Every × and Δ of row `r` against row `ref` (in place; None where either lacks the figure):
    max load, tok/s and KV tokens ×, $/Mtok out and in Δ, and J/token Δ."""
    from kvtui.explore.compare import add_ratios
    from kvtui.report.energy import energy_change

    add_ratios(r, ref)
    r["energy_change"] = energy_change(r.get("j_per_token_out"), (ref or {}).get("j_per_token_out"))
    return r


def rows(doc: dict[str, Any]) -> list[ComparisonRow]:
    """The comparison's rows, typed (kvtui.io.snapshot.schema.ComparisonRow)."""
    return [ComparisonRow.from_dict(r) for r in comparison(doc).get("rows") or []]
