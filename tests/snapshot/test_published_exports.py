"""Every published snapshot's exports, pinned byte for byte: Markdown, CSV, the portable JSON and the
plain-text answer of `kvtui replay` on a dumb terminal.

The digests in data/exports.sha256.json were written from the tree before the snapshot schema
(kvtui/snapshot/) and the one place for figures (kvtui/report/figures.py) existed; a change in any
export of any published run fails here. To re-pin after a deliberate change of an export:

    PYTHONPATH=$PWD python tests/snapshot/test_published_exports.py --write
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from published import ROOT, SNAPSHOTS, snapshot_path  # noqa: E402

PINS = Path(__file__).resolve().parent / "data" / "exports.sha256.json"
FORMATS = ("md", "csv", "json", "answer")


def _exports(xz: Path) -> dict[str, str]:
    from kvtui.report.answer import answer_text
    from kvtui.report.export import render
    from kvtui.snapshot.file import load_snapshot

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


if __name__ == "__main__" and "--write" in sys.argv:
    PINS.write_text(json.dumps({_key(p): {f: _digest(t) for f, t in _exports(p).items()} for p in SNAPSHOTS},
                               indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {PINS}")
