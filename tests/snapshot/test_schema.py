"""The snapshot schema (kvtui/io/snapshot/schema.py): every published snapshot round-trips byte for byte,
and a snapshot of another version (unknown keys, odd values) comes back as it was."""

from __future__ import annotations

import dataclasses
import json
import lzma
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from published import ROOT, SNAPSHOTS, fresh_demo_run, snapshot_path  # noqa: E402

from kvtui.io.snapshot.document import SchemaError
from kvtui.io.snapshot.file import _decode, dumps, load_snapshot
from kvtui.io.snapshot.schema import SCHEMA, Mode, Run, Step, read_run


def _serialise_like(text: str, doc: dict) -> str:
    """`doc` written the way `text` was: the writer's dumps (indent 1; "\\n" after it where the file
    has one: the archive's copy), or compact JSON (the frozen TUI data)."""
    if text.startswith("{\n"):
        return dumps(doc) + ("\n" if text.endswith("\n") else "")
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n"


@pytest.mark.parametrize("xz", SNAPSHOTS, ids=lambda p: p.name)
def test_every_published_snapshot_round_trips_byte_identically(xz):
    text = lzma.open(xz).read().decode("utf-8")
    assert _serialise_like(text, _decode(json.loads(text))) == text  # the serialisation is the file's
    run = Run.from_dict(_decode(json.loads(text)))
    assert _serialise_like(text, run.to_dict()) == text
    # Every key of the published runs is one the schema knows: none left in extras.
    assert not run.extras and all(not m.extras and all(not s.extras for s in m.all_steps) for m in run.all_modes)
    assert all(not m.info.extras and not m.facts.extras and not (m.search and m.search.extras) for m in run.all_modes)


def test_the_reader_and_the_schema_agree_on_a_published_run():
    doc = load_snapshot(snapshot_path(ROOT / "docs" / "results" / "h200-v2.json.xz"))
    run = read_run(doc)
    assert run.schema == SCHEMA and "_path" not in run.to_dict()
    assert [m.name for m in run.all_modes] == [m["name"] for m in doc["modes"]]
    bf16 = run.mode("bf16")
    assert bf16 is not None and bf16.best_concurrency == doc["modes"][0]["best_concurrency"]
    s = bf16.all_steps[0]
    assert s.ttft_ms is not None and s.ttft_ms.p95 == doc["modes"][0]["steps"][0]["ttft_ms"]["p95"]
    assert run.comparison is not None and run.comparison.rows is not None
    assert run.comparison.rows[1].usd_per_mtok_out == doc["comparison"]["rows"][1]["usd_per_mtok_out"]


def test_a_frozen_step_fixture_round_trips():
    p = ROOT / "tests" / "core" / "data" / "h200_bf16_c256_step.json"
    text = p.read_text(encoding="utf-8")
    assert dumps(Step.from_dict(_decode(json.loads(text))).to_dict()) == text.rstrip("\n")


def test_unknown_keys_and_odd_values_are_kept_in_their_place():
    d = {"name": "m", "from_the_future": {"x": [1, 2]}, "best_concurrency": "lots", "index": 3,
         "steps": [{"load": 8, "passed": True, "new_figure": 1.5, "ttft_ms": {"p95": math.inf, "p999": 9.0}}]}
    m = Mode.from_dict(d)
    assert m.best_concurrency is None and m.extras["best_concurrency"] == "lots"  # kept as written, reads None
    assert m.index == 3 and m.all_steps[0].load == 8 and m.all_steps[0].passed is True
    assert m.all_steps[0].ttft_ms is not None and m.all_steps[0].ttft_ms.p95 == math.inf
    back = m.to_dict()
    assert back == d and list(back) == list(d) and list(back["steps"][0]) == list(d["steps"][0])
    assert json.dumps(back) == json.dumps(d)
    assert isinstance(back["steps"][0]["load"], int)  # 8 stays 8, never 8.0


def test_a_document_is_not_changed_through_what_it_was_read_from_or_gave_back():
    d = {"name": "m", "steps": [{"load": 8, "checks": [{"ok": True}]}], "series": [{"t": 1}]}
    m = Mode.from_dict(d)
    d["steps"][0]["checks"].append({"ok": False})
    d["series"].clear()
    out = m.to_dict()
    out["steps"][0]["checks"].clear()
    assert m.to_dict() == {"name": "m", "steps": [{"load": 8, "checks": [{"ok": True}]}], "series": [{"t": 1}]}
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.name = "other"  # type: ignore[misc]


def test_a_field_set_in_code_is_written_after_the_keys_read():
    m = dataclasses.replace(Mode.from_dict({"name": "m", "steps": []}), best_concurrency=64.0)
    assert m.to_dict() == {"name": "m", "steps": [], "best_concurrency": 64.0}
    assert Step(load=4.0, passed=False).to_dict() == {"load": 4.0, "passed": False}


def test_a_step_that_is_not_an_object_is_a_one_line_error():
    with pytest.raises(SchemaError, match="a Step is a JSON object, not list"):
        Step.from_dict([1, 2])  # type: ignore[arg-type]
    m = Mode.from_dict({"name": "m", "steps": [1, {"load": 2}]})  # a list with a non-object: kept as it was
    assert m.steps is None and m.to_dict()["steps"] == [1, {"load": 2}]


def test_the_committed_snapshot_docs_are_generated_from_the_schema():
    from kvtui.io.snapshot.docs import render

    assert (ROOT / "docs" / "SNAPSHOT.md").read_text(encoding="utf-8") == render(), \
        "docs/SNAPSHOT.md is stale: python -m kvtui.io.snapshot.docs docs/SNAPSHOT.md"


def test_a_view_reads_the_same_fields_without_copying():
    d = {"name": "m", "series": [{"t": 1}], "steps": [{"load": 8, "notes": [{"ok": True}]}], "odd": {"x": 1}}
    kept, view = Mode.from_dict(d), Mode.view(d)
    assert view == kept and view.to_dict() == d
    assert view.series is d["series"] and view.all_steps[0].notes is d["steps"][0]["notes"]
    assert view.extras["odd"] is d["odd"]
    assert kept.series is not d["series"] and kept.all_steps[0].notes is not d["steps"][0]["notes"]
    assert Mode.from_dict(d).series is not d["series"]  # a view read in between leaves from_dict copying


def test_a_snapshot_the_writer_writes_now_round_trips_byte_identically(tmp_path):
    out = fresh_demo_run(tmp_path)
    text = out.read_text(encoding="utf-8")
    assert _serialise_like(text, Run.from_dict(_decode(json.loads(text))).to_dict()) == text
    run = Run.from_dict(_decode(json.loads(text)))
    assert not run.extras and all(not m.extras and all(not s.extras for s in m.all_steps) for m in run.all_modes)
    assert all(not m.info.extras and not m.facts.extras and not (m.search and m.search.extras) for m in run.all_modes)
