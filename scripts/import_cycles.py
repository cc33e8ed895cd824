#!/usr/bin/env python3
"""Every import in kvtui, read with ast (those inside functions too), checked against the layers.

    python scripts/import_cycles.py [--root kvtui] [--list]

The layers, top to bottom, are read from their one declaration, kvtui's import contract
(pyproject.toml [tool.importlinter]; `declared_layers`), with the package itself and its data at
the floor. A module
may import its own layer or any lower one. An import that runs back up the layers is a
violation; an import between two layers that import each other (at any depth, at any
time) is a cycle, and so is any loop of imports between modules, inside a layer too (read with
the imports in functions and under TYPE_CHECKING: commands.run -> commands.tui -> commands.run
is one). Fails (exit 1) on any of them, and prints each with its file and line. import-
linter sees the same imports but cannot be told that a function-local import is deferred on
purpose; this script is the one that says "none, anywhere".

--list prints the counts the issue's closing note needs (modules, lines, imports, long lines).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def declared_layers(pyproject: Path = ROOT / "pyproject.toml") -> list[list[str]]:
    """The layers, top to bottom, each a list of its packages' names under kvtui ("tui", "commands"):
    read from the one declaration, the import-linter contract in pyproject.toml. The last is the floor."""
    import tomllib

    conf = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    contract = next(c for c in conf["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    out = []
    for layer in contract["layers"]:
        names = [n.strip().strip("()").split(".", 1)[1] for n in layer.replace("|", ":").split(":")]
        out.append(names)
    return out


def one_line(layers: list[list[str]]) -> str:
    """`cli | __main__ > tui | commands > … > floor`: the form CONTRIBUTING.md quotes."""
    return " > ".join([" | ".join(names) for names in layers[:-1]] + ["floor"])


# layer name -> rank (higher imports lower), from the declaration; plus the package's own
# __init__ and its data folder, at the floor.
DECLARED = declared_layers()
LAYERS = {name: len(DECLARED) - i for i, names in enumerate(DECLARED) for name in names}
LAYERS.update({"__init__": 1, "data": 1})
# Imports against the layers that are known and named, to move (the same list as import-linter's
# ignore_imports). None now: the dataset file format moved to kvtui/io/scenario/dataset.py.
KNOWN_EXCEPTIONS: set[tuple[str, str]] = set()
# Modules that sit at the floor though they live in an upper package: leaves that import only the
# floor themselves (this script checks it), read and written by every layer. None now: the
# snapshot's file format moved into kvtui/io/snapshot and the process bookkeeping into kvtui/runtime/procs
# (issue 29).
FLOOR_MODULES: set[str] = set()
FLOOR = "floor"
LAYERS[FLOOR] = 1

# Layers of one rank are siblings (import-linter's "a : b"): they may import each other, but
# never both ways (that is a cycle).


def module_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


# A layer may be a package inside a folder that only groups packages ("io.scenario" in kvtui/io/):
# the folder's own __init__ holds a docstring and sits at the floor, like the package's.
GROUPS = {name.split(".")[0] for names in DECLARED for name in names if "." in name}


def layer_of(module: str, package: str) -> str | None:
    """The declared layer a module belongs to: the longest declared name it is, or lies under."""
    parts = module.split(".")
    if parts[0] != package:
        return None
    if any(module == m or module.startswith(m + ".") for m in FLOOR_MODULES):
        return FLOOR
    if len(parts) == 1:
        return "__init__"
    rel = ".".join(parts[1:])
    best = max((n for n in LAYERS if rel == n or rel.startswith(n + ".")), key=len, default=None)
    if best is not None:
        return best
    if len(parts) == 2 and parts[1] in GROUPS:
        return "__init__"
    return ".".join(parts[1:3]) if parts[1] in GROUPS else parts[1]


def imports_of(path: Path, module: str, is_pkg: bool, root: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every import statement in the file, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                # `from kvtui.x import y` imports the submodule kvtui.x.y where there is one
                sub = f"{mod}.{a.name}"
                rel = Path(*sub.split(".")[1:]) if sub.split(".")[0] == root.name else None
                is_module = rel is not None and ((root / rel).with_suffix(".py").exists() or (root / rel).is_dir())
                out.append((node.lineno, sub if is_module else mod))
    return out


def scan(root: Path) -> tuple[list[tuple[str, int, str, str, str]], dict[str, int]]:
    """All kvtui→kvtui imports as (file, line, from layer, to layer, imported), and lines per module."""
    package = root.name
    edges = []
    sizes: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        mod = module_name(root, path)
        sizes[str(path)] = sum(1 for _ in path.open(encoding="utf-8"))
        src = layer_of(mod, package)
        for line, imported in sorted(set(imports_of(path, mod, path.name == "__init__.py", root))):
            dst = layer_of(imported, package)
            if src is None or dst is None or dst == src or (mod, imported) in KNOWN_EXCEPTIONS:
                continue
            edges.append((str(path), line, src, dst, imported))
    return edges, sizes


def violations(edges: list[tuple[str, int, str, str, str]]) -> list[tuple[str, int, str, str, str]]:
    bad = []
    for e in edges:
        _, _, src, dst, _ = e
        a, b = LAYERS.get(src), LAYERS.get(dst)
        if a is None or b is None:
            bad.append(e)  # a new top-level module: give it a layer above
        elif b > a:
            bad.append(e)
    return bad


# Known two-way imports between siblings of one layer, reported but not failed on. None since the
# TUI's branch (ui20) merged: tui <-> commands (app_options) is untangled.
KNOWN_SIBLING_CYCLES: list[set[str]] = []


def cycles(edges: list[tuple[str, int, str, str, str]]) -> list[list[str]]:
    """Strongly connected groups of layers (Tarjan): each is a cycle of imports between layers."""
    graph: dict[str, set[str]] = defaultdict(set)
    for _, _, src, dst, _ in edges:
        graph[src].add(dst)
        graph.setdefault(dst, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def module_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the kvtui modules it imports: every import statement, at any depth (in functions,
    under TYPE_CHECKING), and the packages above what it imports (importing kvtui.a.b runs kvtui/a/__init__)."""
    package = root.name
    graph: dict[str, set[str]] = defaultdict(set)
    for path in sorted(root.rglob("*.py")):
        mod = module_name(root, path)
        graph.setdefault(mod, set())
        for _, imported in imports_of(path, mod, path.name == "__init__.py", root):
            parts = imported.split(".")
            if parts[0] != package:
                continue
            for i in range(2, len(parts) + 1):
                target = ".".join(parts[:i])
                if target != mod and not mod.startswith(target + "."):  # a module's own packages run first anyway
                    graph[mod].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of two or more nodes that reach each other (Tarjan, iterative): each one is a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    group.append(x)
                    if x == v:
                        break
                if len(group) > 1:
                    out.append(sorted(group))
    return out


# Module cycles inside kvtui.tui and between it and kvtui.cli were the TUI branch's (ui20) to
# untangle, reported but not failed on while it worked; it has merged and none is left, so they fail
# like any other. (True again would only report them. Even then, a cycle that remains when the tui
# modules are taken out of the graph fails: commands among themselves.)
ALLOW_TUI_CYCLES = False


def allowed_module_cycle(group: list[str], package: str = "kvtui") -> bool:
    return ALLOW_TUI_CYCLES and any(m.startswith(f"{package}.tui.") for m in group) and all(
        m.startswith((f"{package}.tui.", f"{package}.commands.")) for m in group)


def module_cycles(root: Path) -> tuple[list[list[str]], list[list[str]]]:
    """(cycles that fail, cycles allowed for now) between modules, any import at any depth."""
    graph = module_graph(root)
    groups = strongly_connected(graph)
    allowed = [g for g in groups if allowed_module_cycle(g, root.name)]
    failing = [g for g in groups if not allowed_module_cycle(g, root.name)]
    no_tui = {m: {t for t in ts if not t.startswith(f"{root.name}.tui")} for m, ts in graph.items()
              if not m.startswith(f"{root.name}.tui")}
    for g in strongly_connected(no_tui):  # a commands-only cycle hidden inside an allowed group
        if g not in failing:
            failing.append(g)
    return failing, allowed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent / "kvtui"))
    ap.add_argument("--list", action="store_true", help="print the tree's counts too")
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    edges, sizes = scan(root)
    bad = violations(edges)
    groups = cycles(edges)
    for g in [g for g in groups if set(g) in KNOWN_SIBLING_CYCLES]:
        print("known import cycle between sibling layers (to untangle): " + " <-> ".join(g))
        groups.remove(g)
    if args.list:
        long_lines = sum(1 for p in sizes for ln in Path(p).open(encoding="utf-8") if len(ln.rstrip("\n")) > 120)
        print(f"modules {len(sizes)}, lines {sum(sizes.values())}, imports between layers {len(edges)}, "
              f"back up the layers {len(bad)}, lines over 120 chars {long_lines}")
        for p, n in sorted(sizes.items(), key=lambda x: -x[1]):
            if n > 400:
                print(f"  {n:5d}  {Path(p).relative_to(root.parent)}")
    for path, line, src, dst, imported in bad:
        print(f"{Path(path).relative_to(root.parent)}:{line}: {src} imports {imported} ({dst}): back up the layers")
    for g in groups:
        print("import cycle between layers: " + " <-> ".join(g))
    mod_failing, mod_allowed = module_cycles(root)
    for g in mod_allowed:
        print("known import cycle in the TUI (branch ui20, to untangle): " + " <-> ".join(g))
    for g in mod_failing:
        print("import cycle between modules: " + " <-> ".join(g))
    if bad or groups or mod_failing:
        print(f"import_cycles: {len(bad)} import(s) against the layers, {len(groups)} cycle(s) between layers, "
              f"{len(mod_failing)} between modules")
        return 1
    print(f"import_cycles: {len(edges)} imports between layers, none back up, no cycle between layers or modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
