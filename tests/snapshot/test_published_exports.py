"""Every published snapshot's exports, pinned byte for byte: Markdown, CSV, the portable JSON and the
plain-text answer of `kvtui replay` on a dumb terminal; and `kvtui diff` (text and md) of each published
run against the next.

The exports' digests in data/exports.sha256.json were written from the tree before the snapshot
schema (kvtui/io/snapshot/) and the one place for figures (kvtui/report/figures.py) existed; the diffs'
after `kvtui diff` showed J/token (it showed "—"). A change in any of them fails here. To re-pin after a deliberate change of an export:

    PYTHONPATH=$PWD python tests/snapshot/test_published_exports.py --write
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from published import PUBLISHED, ROOT, SNAPSHOTS, snapshot_path  # noqa: E402

PINS = Path(__file__).resolve().parent / "data" / "exports.sha256.json"
FORMATS = ("md", "csv", "json", "answer")


def _exports(xz: Path) -> dict[str, str]:
    from kvtui.io.snapshot.file import load_snapshot
    from kvtui.report.answer import answer_text
    from kvtui.report.export import render

    doc = load_snapshot(snapshot_path(xz))
    out = {fmt: render(doc, fmt) for fmt in ("md", "csv", "json")}
    out["answer"] = answer_text(doc)
    return out


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _key(xz: Path) -> str:
    return str(xz.relative_to(ROOT))


@pytest.mark.parametrize("xz", SNAPSHOTS, ids=lambda p: p.name)
def test_every_export_of_a_published_run_is_byte_identical_to_its_pin(xz):
    pins = json.loads(PINS.read_text(encoding="utf-8"))
    assert _key(xz) in pins, f"{_key(xz)} has no pin: write them (see the module's docstring)"
    got = {fmt: _digest(text) for fmt, text in _exports(xz).items()}
    assert got == pins[_key(xz)]


PAIRS = list(zip(PUBLISHED, PUBLISHED[1:]))


def _diffs(a: Path, b: Path) -> dict[str, str]:
    from kvtui.io.snapshot.file import load_snapshot
    from kvtui.report.diff import display_name, render_diff

    da, db = load_snapshot(snapshot_path(a)), load_snapshot(snapshot_path(b))
    names = {"title_a": display_name(snapshot_path(a)), "title_b": display_name(snapshot_path(b))}
    return {"diff": render_diff(da, db, **names), "diff_md": render_diff(da, db, markdown=True, **names)}


def _pair_key(a: Path, b: Path) -> str:
    return f"diff {_key(a)} {_key(b)}"


@pytest.mark.parametrize("a,b", PAIRS, ids=lambda p: p.name)
def test_kvtui_diff_of_two_published_runs_is_byte_identical_to_its_pin(a, b):
    pins = json.loads(PINS.read_text(encoding="utf-8"))
    assert _pair_key(a, b) in pins, f"{_pair_key(a, b)} has no pin: write them (see the module's docstring)"
    assert {k: _digest(t) for k, t in _diffs(a, b).items()} == pins[_pair_key(a, b)]


if __name__ == "__main__" and "--write" in sys.argv:
    pins = {_key(p): {f: _digest(t) for f, t in _exports(p).items()} for p in SNAPSHOTS}
    pins.update({_pair_key(a, b): {k: _digest(t) for k, t in _diffs(a, b).items()} for a, b in PAIRS})
    PINS.write_text(json.dumps(pins, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {PINS}")
