"""The product does not read the repository's documents (issue 49: the repository is the product).

An installed kvtui has no docs/, bench/, scripts/ or tests/ beside it: whatever a module needs at
run time is package data (kvtui/data/). Read from every module's syntax tree, not its text, so that a
comment or a message naming a document ("see docs/FAULTS.md") is not a read: a path built from the
project's root (`PROJECT_ROOT`, `parents[1]`/`.parent.parent` of a module) or from one of those
folders' names is.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("docs", "bench", "scripts", "tests")


def _starts_with_folder(value: object) -> bool:
    return isinstance(value, str) and any(value == f or value.startswith((f + "/", f + "\\")) for f in FOLDERS)


def _parent_levels(node: ast.AST) -> int:
    """How many `.parent` end this expression (`Path(__file__).resolve().parent.parent`: 2)."""
    n = 0
    while isinstance(node, ast.Attribute) and node.attr == "parent":
        n, node = n + 1, node.value
    return n


def reads_outside(tree: ast.AST, depth: int = 0) -> list[tuple[int, str]]:
    """Where the module (`depth` folders below kvtui/) reaches outside the package. The one place
    that names the checkout, `PROJECT_ROOT = …` in kvtui/__init__.py (for the tests), is not a read."""
    out = []
    exempt = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == "PROJECT_ROOT" for t in n.targets)}
    for node in ast.walk(tree):
        if id(node) in exempt:
            continue
        if isinstance(node, ast.Name) and node.id == "PROJECT_ROOT" and isinstance(node.ctx, ast.Load):
            out.append((node.lineno, "PROJECT_ROOT (the checkout, absent when installed)"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and _starts_with_folder(side.value):
                    out.append((node.lineno, f"a path through {side.value!r}"))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and _starts_with_folder(node.args[0].value):
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if fn in ("Path", "open", "joinpath", "read_text", "read_bytes", "glob", "rglob"):
                out.append((node.lineno, f"{fn}({node.args[0].value!r})"))
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "parents" and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, int) and node.slice.value > depth:
            out.append((node.lineno, f"parents[{node.slice.value}] (above the package)"))
    parents = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "parent" and id(n) not in exempt]
    inner = {id(n.value) for n in parents}
    for n in parents:
        if id(n) not in inner and _parent_levels(n) - 1 > depth:  # the outermost of a chain
            out.append((n.lineno, f"{'.parent' * _parent_levels(n)} (above the package)"))
    return out


def test_no_module_of_the_package_reads_the_repository():
    bad = []
    for py in sorted((ROOT / "kvtui").rglob("*.py")):
        tree = ast.parse(py.read_text(encoding="utf-8"), str(py))
        depth = len(py.relative_to(ROOT / "kvtui").parts) - 1
        bad += [f"{py.relative_to(ROOT)}:{n}: {what}" for n, what in reads_outside(tree, depth)]
    assert bad == []


def test_the_check_sees_each_way_of_reaching_the_checkout():
    src = '''
from kvtui import PROJECT_ROOT
a = PROJECT_ROOT / "x"
b = Path(__file__).parents[2] / "README.md"
c = ROOT / "docs" / "results" / "h200-v2.json"
d = Path("bench/data/x.json")
e = open("tests/fixtures/y")
f = Path(__file__).parents[0] / "data"      # its own folder: fine
g = "see docs/FAULTS.md"                     # a message: fine
h = Path(__file__).resolve().parent.parent / "data"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
'''
    assert {n for n, _ in reads_outside(ast.parse(src))} == {3, 4, 5, 6, 7, 10}  # a module in kvtui/
    # one folder down (kvtui/quality/harness.py), parent.parent is kvtui/: its own data
    assert {n for n, _ in reads_outside(ast.parse(src), depth=1)} == {3, 4, 5, 6, 7}
