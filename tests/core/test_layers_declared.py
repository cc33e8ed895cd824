"""The layers are declared once (pyproject.toml's import contract, issue 29 item 5): the script that
checks every import reads them there, and CONTRIBUTING.md and docs/STRUCTURE.md say the same."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

_spec = importlib.util.spec_from_file_location("import_cycles", Path(__file__).resolve().parents[2] / "scripts"
                                               / "import_cycles.py")
assert _spec is not None and _spec.loader is not None
ic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ic)
DECLARED, LAYERS, ROOT, declared_layers, one_line = ic.DECLARED, ic.LAYERS, ic.ROOT, ic.declared_layers, ic.one_line


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_the_script_reads_the_contract():
    assert DECLARED == declared_layers(ROOT / "pyproject.toml")
    assert DECLARED[0] == ["cli", "__main__"] and DECLARED[1] == ["tui"]
    assert "runtime.procs" in DECLARED[-1] and "io.snapshot" in DECLARED[-1]  # the floor: process bookkeeping, the schema
    ranks = [LAYERS[names[0]] for names in DECLARED]
    assert ranks == sorted(ranks, reverse=True) and ranks[-1] == 1


def test_contributing_quotes_the_declared_layers():
    assert one_line(DECLARED) in _flat((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"))


def test_structure_md_lists_the_declared_layers_in_order():
    text = (ROOT / "docs" / "STRUCTURE.md").read_text(encoding="utf-8")
    block = text.split("## The layers", 1)[1].split("\n\n    ", 1)[1].split("\n\n", 1)[0]
    layers: list[list[str]] = []
    floor_text = ""
    for line in ("    " + block).splitlines():
        head = line[4:34].strip()  # the first column: 30 characters
        if not head:
            floor_text += line  # a wrapped description
            continue
        names = [n.strip() for n in head.split("|") if n.strip()]
        if head.startswith("|"):
            layers[-1] += names  # a layer's names wrapped onto the next line
        else:
            layers.append(names)
        if names == ["floor"]:
            floor_text = line
    assert layers[:-1] == DECLARED[:-1]
    assert layers[-1] == ["floor"]
    for name in DECLARED[-1]:
        assert re.search(rf"\b{name}\b", floor_text), f"the floor's {name} is not named in docs/STRUCTURE.md"


def test_a_layer_missing_from_the_contract_is_read_as_missing(tmp_path: Path):
    p = tmp_path / "pyproject.toml"
    p.write_text('[tool.importlinter]\nroot_package = "kvtui"\n[[tool.importlinter.contracts]]\nname = "x"\n'
                 'type = "layers"\nlayers = ["kvtui.tui", "kvtui.explore : (kvtui.io.snapshot)"]\n')
    assert declared_layers(p) == [["tui"], ["explore", "io.snapshot"]]
    assert one_line(declared_layers(p)) == "tui > floor"


def test_every_package_says_its_job_and_what_it_may_import():
    """Issue 46 item 5: each folder keeps a docstring saying its job and what it may import."""
    import ast

    missing = []
    for init in sorted((ROOT / "kvtui").rglob("__init__.py")):
        if init.parent.name == "__pycache__" or init.parent == ROOT / "kvtui":
            continue
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        if len(doc) < 80 or "import" not in doc.lower():
            missing.append(str(init.relative_to(ROOT)))
    assert not missing, f"a package without a docstring that says its job and what it may import: {missing}"
