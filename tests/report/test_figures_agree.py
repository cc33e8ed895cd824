"""Every figure of a run in every view: the same number, written by the same rule.

From one snapshot — published H200 runs with energy figures (NVML power) and quality-adjusted
cost, and the frozen simulated demo — each mode's max load @SLO, output tok/s @SLO, $/Mtok out
and in, quality-adjusted $/Mtok, J/token and their × and Δ against the baseline are read back
from each view: the comparison pop-up's rows, `kvtui diff`, the Markdown and CSV exports, the
answer screen's cells and questions, the replay's plain text and the SVG export of the answer
screen. Each must show what kvtui.report.figures computed, written by its rule in
report/text.py (FIGURE_CELLS). `kvtui diff` once showed "—" for J/token where every other view
showed a figure.
"""

from __future__ import annotations

import csv
import html
import io
import re
import sys
from pathlib import Path

import pytest

from kvtui.io.snapshot.file import load_snapshot
from kvtui.report.figures import comparison
from kvtui.report.text import COMPARISON_HEADERS, figure_cell, fmt_pct, fmt_rate_at

ROOT = Path(__file__).resolve().parents[2]
ENERGY = ROOT / "docs" / "results" / "h200-kvb.json"  # five modes, each with J/token
QADJ = ROOT / "docs" / "results" / "h200-smollm2.json"  # real weights: quality-adjusted $/Mtok and J/token
DEMO = ROOT / "tests" / "tui" / "data" / "l4-demo.json"  # simulated: no power, J/token "—" everywhere

# figure -> its column in the comparison table (COMPARISON_HEADERS; "×" and "Δ" repeat, so by position)
COLUMN = {"best": 1, "best_x": 2, "output_tok_s": 3, "tok_s_x": 4, "kv_tokens": 7, "kv_tokens_x": 8,
          "usd_per_mtok_out": 11, "cost_out_change": 12, "j_per_token_out": 13, "energy_change": 14,
          "usd_per_mtok_in": 15, "cost_in_change": 16, "usd_per_mtok_out_qadj": 17}
ABSOLUTE = ("best", "output_tok_s", "kv_tokens", "usd_per_mtok_out", "usd_per_mtok_in", "usd_per_mtok_out_qadj",
            "j_per_token_out")
AGAINST = ("best_x", "tok_s_x", "kv_tokens_x", "cost_out_change", "energy_change", "cost_in_change")
# the answer screen's columns (kvtui/tui/answer.py ANSWER_COLUMNS)
ANSWER_KEY = {"best": "best", "best_x": "best_x", "tok_s_x": "tok_x", "usd_per_mtok_out": "usd",
              "cost_out_change": "usd_d", "j_per_token_out": "j", "usd_per_mtok_out_qadj": "qadj", "kv_tokens": "kv"}


FRESH = Path("a demo run made now")  # the built-in demo scenario, run by the CLI for this test (offline simulator)


@pytest.fixture(scope="module", params=[ENERGY, QADJ, DEMO, FRESH], ids=lambda p: p.stem.replace(" ", "-"))
def run(request, tmp_path_factory):
    if request.param == FRESH:
        sys.path.insert(0, str(ROOT / "tests" / "snapshot"))
        from published import fresh_demo_run

        return load_snapshot(fresh_demo_run(tmp_path_factory.mktemp("fresh")))
    if request.param == DEMO:
        import lzma

        where = tmp_path_factory.mktemp("demo") / "l4-demo.json"
        where.write_bytes(lzma.open(DEMO.with_name(DEMO.name + ".xz")).read())
        return load_snapshot(where)
    return load_snapshot(request.param)


def _expected(doc):
    """mode -> figure -> cell, from the one place (kvtui.report.figures) and the one rule per figure."""
    out = {}
    for r in comparison(doc)["rows"]:
        cells = {k: figure_cell(k, r) for k in COLUMN}
        cells["output_tok_s"] = fmt_rate_at(r)  # the table's tok/s cell names the load it came from
        out[r["mode"]] = cells
    return out


def _text_table(text: str, headers: tuple[str, ...] = COMPARISON_HEADERS) -> dict[str, list[str]]:
    """The comparison table in a plain-text view: mode -> cells (columns are 2+ spaces apart)."""
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if re.split(r"\s{2,}", line.strip()) == list(headers))
    rows = {}
    for line in lines[i + 2:]:
        if not line.strip() or line.startswith("note:"):
            break
        cells = re.split(r"\s{2,}", line.strip())
        assert len(cells) == len(headers), line
        rows[cells[0]] = cells
    return rows


def _md_table(text: str) -> dict[str, list[str]]:
    head = "| " + " | ".join(COMPARISON_HEADERS) + " |"
    lines = text.splitlines()
    i = lines.index(head)
    rows = {}
    for line in lines[i + 2:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0]] = cells
    return rows


def test_the_comparison_pop_up_shows_every_figure_as_computed(run):
    from kvtui.report.text import comparison_rows  # what the pop-up (tui/compare_screen.py) draws

    want = _expected(run)
    for cells in comparison_rows(run):
        assert {k: cells[i] for k, i in COLUMN.items()} == want[cells[0]]


def test_the_markdown_export_shows_every_figure_as_computed(run):
    from kvtui.report.export import render

    want = _expected(run)
    rows = _md_table(render(run, "md"))
    assert sorted(rows) == sorted(want)
    for mode, cells in rows.items():
        assert {k: cells[i] for k, i in COLUMN.items()} == want[mode]


def test_the_replay_text_shows_every_figure_as_computed(run):
    from kvtui.report.answer import answer_text

    want = _expected(run)
    text = answer_text(run)
    rows = _text_table(text)
    assert sorted(rows) == sorted(want)
    for mode, cells in rows.items():
        assert {k: cells[i] for k, i in COLUMN.items()} == want[mode]
    j = {m: w["j_per_token_out"] for m, w in want.items() if w["j_per_token_out"] != "—"}
    if j:  # the question's answer is the lowest J/token, as the table writes it
        assert re.search(r"least energy per output token: (\S+) \((\S+) J/token\)", text).groups() == \
            min(j.items(), key=lambda kv: float(kv[1]))


def test_the_csv_export_carries_the_same_costs(run):
    from kvtui.report.export import render

    rows = {r["mode"]: r for r in comparison(run)["rows"]}
    for line in csv.DictReader(io.StringIO(render(run, "csv"))):
        r = rows[line["mode"]]
        for k in ("usd_per_mtok_out", "usd_per_mtok_out_qadj"):
            assert (float(line[k]) if line[k] else None) == r.get(k)


def test_the_answer_screen_shows_every_figure_as_computed(run):
    from kvtui.report.answer import build_answer
    from kvtui.tui.answer import answer_cells

    want = _expected(run)
    ans = build_answer(run)
    for r in ans["rows"]:
        cells = answer_cells(r, ans["baseline"])
        assert {k: cells[a] for k, a in ANSWER_KEY.items()} == {k: want[r["mode"]][k] for k in ANSWER_KEY}
        assert cells["tok"].replace("@", " @") == want[r["mode"]]["output_tok_s"]
    for q in ans["questions"]:
        key = {"best": "best", "usd_per_mtok_out": "usd_per_mtok_out", "j_per_token_out": "j_per_token_out",
               "usd_per_mtok_out_qadj": "usd_per_mtok_out_qadj", "output_tok_s": "output_tok_s"}.get(q["key"])
        if key:
            # the question names the winning value; a knee's interval ("16 [14–16]") stays in the table
            assert all(want[w][key].split(" @")[0].split(" [")[0] in q["text"] for w in q["winners"]), q


def test_kvtui_diff_shows_every_figure_the_other_views_show(run):
    from kvtui.report.diff import render_diff

    want = _expected(run)
    rows = _text_table(render_diff(run, run))
    for mode, cells in want.items():
        for side in ("A", "B"):
            got = rows[f"{mode} [{side}]"]
            assert {k: got[COLUMN[k]] for k in ABSOLUTE} == {k: cells[k] for k in ABSOLUTE}
            # against the same mode of A: 1.00× and +0.0% wherever the figure exists
            for k in AGAINST:
                base = {"best_x": "best", "tok_s_x": "output_tok_s", "kv_tokens_x": "kv_tokens",
                        "cost_out_change": "usd_per_mtok_out", "energy_change": "j_per_token_out",
                        "cost_in_change": "usd_per_mtok_in"}[k]
                has = cells[base] != "—" and not cells[base].startswith("0 ")
                assert got[COLUMN[k]] == (("1.00×" if k.endswith("_x") else "+0.0%") if has else "—"), (mode, side, k)


def test_kvtui_diff_of_two_runs_gives_each_energy_change_against_the_same_mode():
    from kvtui.report.diff import render_diff

    a, b = load_snapshot(ENERGY), load_snapshot(ROOT / "docs" / "results" / "h200-v2.json")
    ja = {r["mode"]: r["j_per_token_out"] for r in comparison(a)["rows"]}
    jb = {r["mode"]: r["j_per_token_out"] for r in comparison(b)["rows"]}
    rows = _text_table(render_diff(a, b))
    both = [m for m in ja if m in jb and ja[m] and jb[m] is not None]
    assert both
    for m in both:
        assert rows[f"{m} [B]"][COLUMN["j_per_token_out"]] == figure_cell("j_per_token_out", {"j_per_token_out": jb[m]})
        assert rows[f"{m} [B]"][COLUMN["energy_change"]] == fmt_pct(round(jb[m] / ja[m] - 1, 4))


def test_the_svg_export_of_the_answer_screen_shows_every_figure_as_computed(run):
    from kvtui.cli.export import render

    want = _expected(run)
    svg = render(run, "svg", width=200, height=60)
    shown = html.unescape("".join(re.findall(r"<text[^>]*>([^<]*)</text>", svg))).replace("\xa0", " ")
    lines = shown.splitlines()
    lines = lines[next(n for n, line in enumerate(lines) if line.split()[:2] == ["mode", "max"]):]  # the table
    for mode, cells in want.items():
        row = next(line for line in lines if re.match(rf"\s*{re.escape(mode)}( \(base\))?\s", line))
        tokens = set(row.replace("★", " ").split())
        shown_keys = ["best", "best_x", "tok_s_x", "usd_per_mtok_out", "cost_out_change"]
        if any(w["j_per_token_out"] != "—" for w in want.values()):  # else the screen leaves the column out
            shown_keys.append("j_per_token_out")
        for k in shown_keys:
            assert cells[k] in row and cells[k].split(" [")[0] in tokens, (mode, k, row)
