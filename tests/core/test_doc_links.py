"""Every relative link in the documents resolves, and every repository path they name in backticks
exists (issue 49: a document that points at a file that moved or never was in the tree).

The documents: README.md, CONTRIBUTING.md and every Markdown file under docs/. A link is a Markdown
link or image, `[text](target)`; a target outside the repository (a URL, mailto:) is not followed. A
target's `#anchor` into a Markdown file must name one of its headings (GitHub's slugs). A named path
is any word that starts with one of the tree's top folders (kvtui/, docs/, scripts/, tests/, bench/,
.ci/), in backticks, in a code block (a layout, a command) or in the prose; a published snapshot
named `X.json` is found as its archive `X.json.xz`, as kvtui reads it. Placeholders (X, NAME, MODE…,
globs, braces) are not paths.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP = ("kvtui/", "docs/", "scripts/", "tests/", "bench/", ".ci/")
# Words the documents use for "any such": a path holding one is a pattern, not a file.
PLACEHOLDERS = {"X", "Y", "A", "B", "N", "NAME", "MODE", "SNAP", "DIR", "FILE", "PATH", "MODEL", "GPU", "TAG",
                "OUT", "OUTNAME", "HOST", "PORT", "RUN", "DATE", "K", "ID"}
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~)")


def documents() -> list[Path]:
    docs = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in docs if p.exists()]


def prose(text: str) -> str:
    """The text outside fenced and indented code blocks (a link there is an example, not a link)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if fenced or line.startswith("    ") or line.startswith("\t"):
            out.append("")
            continue
        out.append(line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(md: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(md.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return frozenset(out)


def broken_links(md: Path) -> list[str]:
    bad = []
    for target in LINK.findall(prose(md.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = md if not path else (md.parent / path).resolve()
        if not dest.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor.lower() not in anchors(dest):
            bad.append(f"{target} (no heading #{anchor} in {dest.relative_to(ROOT)})")
        elif ROOT not in dest.parents and dest != ROOT:
            bad.append(f"{target} (outside the repository)")
    return bad


def named_paths(md: Path) -> list[str]:
    out = []
    for line in md.read_text(encoding="utf-8").splitlines():
        for word in re.split(r"[\s=,;()\"'`]+", line):
            word = word.strip().rstrip(".:")
            if word.startswith("./"):
                word = word[2:]
            if word.startswith(TOP):
                out.append(word)
    return out


def is_pattern(path: str) -> bool:
    if re.search(r"[{}*?…<>$\[\]|]", path) or "..." in path:
        return True
    return any(part in PLACEHOLDERS for part in re.split(r"[/._\-]", path))


def exists(path: str) -> bool:
    path = re.sub(r"::.*$", "", path)  # a pytest node id: the file
    path = re.sub(r":\d+(-\d+)?$", "", path)  # file:line
    p = ROOT / path
    return p.exists() or p.with_name(p.name + ".xz").exists()


def missing_paths(md: Path) -> list[str]:
    return sorted({w for w in named_paths(md) if not is_pattern(w) and not exists(w)})


def missing_modules(md: Path) -> list[str]:
    """`python -m kvtui.…` names a module of the tree (a lab tool moved to scripts/ is no longer one)."""
    out = set()
    for mod in re.findall(r"-m\s+(kvtui(?:\.\w+)+)", md.read_text(encoding="utf-8")):
        p = ROOT / mod.replace(".", "/")
        if not (p.with_suffix(".py").exists() or (p / "__init__.py").exists()):
            out.add(mod)
    return sorted(out)


DOCS = documents()


@pytest.mark.parametrize("md", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(md):
    assert broken_links(md) == []


@pytest.mark.parametrize("md", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_the_documents_name_exists(md):
    assert missing_paths(md) == []


@pytest.mark.parametrize("md", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_the_documents_run_exists(md):
    assert missing_modules(md) == []


def test_the_documents_are_found_and_read():
    names = {str(p.relative_to(ROOT)) for p in DOCS}
    assert {"README.md", "CONTRIBUTING.md", "docs/PROTOCOL.md", "docs/RESULTS.md"} <= names
    # the extraction finds what it should (a change of the docs' format would silently check nothing)
    assert sum(len(LINK.findall(prose(p.read_text(encoding="utf-8")))) for p in DOCS) > 20
    assert sum(len(named_paths(p)) for p in DOCS) > 50


def test_a_broken_link_a_stale_anchor_and_a_missing_path_are_caught(tmp_path, monkeypatch):
    """The checks themselves, on a document made to fail each way (and pass where it should)."""
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "kvtui").mkdir()
    (tmp_path / "kvtui" / "real.py").write_text("")
    (tmp_path / "docs" / "run.json.xz").write_bytes(b"")
    (tmp_path / "docs" / "B.md").write_text("# Title\n\n## The section, here\n")
    md = tmp_path / "docs" / "A.md"
    md.write_text("[ok](B.md#the-section-here) [web](https://example.com) [self](#a)\n# A\n"
                  "[gone](missing.md) [stale](B.md#no-such) ![img](img/x.svg)\n\n"
                  "    [in a code block](nowhere.md)\n    kvtui/old.py   stale layout\n\n"
                  "`kvtui/real.py` `kvtui/gone.py:12` `python -m x docs/run.json` `docs/X.json` "
                  "`tests/a.py::test_b` `kvtui/{a,b}.py` `python -m kvtui.real` `python -m kvtui.runtime.engines.gone`\n")
    assert broken_links(md) == ["missing.md (no such file)", "B.md#no-such (no heading #no-such in docs/B.md)",
                                "img/x.svg (no such file)"]
    assert missing_paths(md) == ["kvtui/gone.py:12", "kvtui/old.py", "tests/a.py::test_b"]
    assert missing_modules(md) == ["kvtui.runtime.engines.gone"]
