"""The TUI's own structure and its small pure parts (issue 17, 20): no import cycle inside tui/, no
import of cli/, one key table behind the bindings and the help, legends that fit without a cut word."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from kvtui import PROJECT_ROOT
from kvtui.tui.legend import SHORT, fit_legend, fit_title

sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
from import_cycles import imports_of, module_name  # noqa: E402

TUI = PROJECT_ROOT / "kvtui" / "tui"


def tui_graph() -> dict[str, set[str]]:
    """Module → kvtui modules it imports, every import (inside functions and TYPE_CHECKING blocks too)."""
    root = PROJECT_ROOT / "kvtui"
    graph = {}
    for path in sorted(TUI.rglob("*.py")):
        mod = module_name(root, path)
        graph[mod] = {m for _, m in imports_of(path, mod, path.name == "__init__.py", root)
                      if m.startswith("kvtui.") and m != mod}
    return graph


def test_no_import_cycle_inside_tui_and_no_import_of_commands():
    graph = tui_graph()
    assert not [(a, b) for a, bs in graph.items() for b in bs if b.startswith("kvtui.cli")]
    assert not find_cycle(graph)


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle among the graph's own modules (depth-first, a back edge), or []."""
    on_path: list[str] = []
    done: set[str] = set()

    def visit(v: str) -> list[str]:
        on_path.append(v)
        for w in sorted(graph.get(v, ())):
            if w in on_path:
                return on_path[on_path.index(w):] + [w]
            if w in graph and w not in done:
                found = visit(w)
                if found:
                    return found
        on_path.pop()
        done.add(v)
        return []

    for v in sorted(graph):
        if v not in done:
            found = visit(v)
            if found:
                return found
    return []


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"x"}, "c": {"a"}}) == []


def test_the_options_object_imports_no_textual():
    tree = ast.parse((TUI / "options.py").read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {n for n in names if n.startswith(("textual", "kvtui.tui.app"))}


def test_one_key_table_makes_the_bindings_and_the_help():
    from kvtui.tui.answer import AnswerScreen
    from kvtui.tui.app import KvtuiApp
    from kvtui.tui.dialogs import help_text
    from kvtui.tui.keys import HELP_CONTEXTS, KEYS, SCREEN_OF, help_rows
    from kvtui.tui.screens import DashboardScreen

    for cls, screen in ((AnswerScreen, "answer"), (DashboardScreen, "dashboard"), (KvtuiApp, "app")):
        bound = [(b.key, b.action) for b in cls.BINDINGS]
        assert bound == [(k.keys, k.action) for k in KEYS if k.screen == screen and k.bound]
    for ctx in HELP_CONTEXTS:
        rows = help_rows(ctx)
        assert rows, ctx
        for k in KEYS:
            if ctx in k.help:
                assert k.screen == SCREEN_OF[ctx]  # the help says a key where it is bound
    text = help_text("answer").plain
    assert "d / enter" in text and "previous / next step" in text and "(here)" in text


def test_every_short_legend_word_is_explained_in_the_help():
    from kvtui.tui.dialogs import ABBREVIATIONS

    explained = {t.strip() for a, _ in ABBREVIATIONS for t in a.replace(" N", "").split("/")}
    for short in SHORT.values():
        assert short in explained, short


ITEMS = [("NVML", "#ff0000", "━"), ("KV in use", "#00ff00", "━"), ("weights", "#0000ff", "━"),
         ("KV pool", "#ffff00", "━"), ("total", "#ff00ff", "━"), ("SLO 150", "#00ffff", "━"),
         ("clipped 450", "#ffffff", "━")]


@pytest.mark.parametrize("width", range(6, 90, 3))
def test_a_legend_is_whole_items_or_their_short_forms_never_a_cut_word(width):
    from rich.text import Text

    line = fit_legend(ITEMS, width)
    plain = Text.from_markup(line).plain
    assert len(plain) <= width - 4
    allowed = set()
    for label, _, _ in ITEMS:
        allowed |= set(label.split()) | set(SHORT.get(label, SHORT.get(label.split()[0], label)).split())
    for word in plain.replace("━", " ").split():
        assert word in allowed or (word.startswith("+") and word[1:].isdigit()), (width, plain)
    if width >= 90:
        assert "KV in use" in plain


def test_a_title_takes_its_short_form_where_it_would_be_cut():
    assert fit_title("requests: running / waiting / preempted", "requests", 38) == "requests"
    assert fit_title("requests: running / waiting / preempted", "requests", 60).startswith("requests: running")


def test_the_answer_table_drops_whole_columns_the_comparison_has():
    from kvtui.tui.answer import ANSWER_COLUMNS, fit_columns

    cols = [(k, h.format(lw="c")) for k, h in ANSWER_COLUMNS]
    row = {k: "x" * 9 for k, _ in cols} | {"mode": "awq-int4+fp8-kv"}
    assert fit_columns(cols, [row], 500) == cols
    narrow = fit_columns(cols, [row], 80)
    assert [k for k, _ in narrow][:2] == ["mode", "best"]  # the answer itself stays
    assert sum(max(len(h), 9 if k != "mode" else 15) + 2 for k, h in narrow) <= 80
    assert "kv" not in dict(narrow) and "qadj" not in dict(narrow)  # the first to go (both in `c`)
