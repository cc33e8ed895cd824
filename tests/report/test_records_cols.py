"""The compact archive of a records file gives back exactly the records (kvtui/io/records_cols.py)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from kvtui.io.records import read_records
from kvtui.io.records_cols import cols_path, decode_lines, encode, main


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2_000_000), max_size=30), min_size=1, max_size=20), st.booleans())
def test_round_trip_is_exact_with_and_without_the_gap_column(gaps_us, odd):
    lines = []
    for i, g in enumerate(gaps_us):
        itl = [u / 1e6 for u in g]
        if odd and i == 0 and itl:
            itl[0] = 0.1234567891  # not whole microseconds: this record keeps its JSON list
        lines.append(json.dumps({"id": f"r{i}", "t_first": 1.5, "t_last": 2.25, "itl": itl, "status": "ok"}) + "\n")
    back = list(decode_lines(encode(lines)))
    assert [json.loads(x) for x in back] == [json.loads(x) for x in lines]
    assert [list(json.loads(x)) for x in back] == [list(json.loads(x)) for x in lines]  # key order too


def test_records_read_from_the_compact_archive_when_the_jsonl_is_gone(tmp_path):
    src = tmp_path / "x.records.jsonl"
    src.write_text("".join(json.dumps({"id": f"a-{i}", "mode": "m", "step": 0, "load": 2.0, "phase": "window",
                                       "t_intended": 1.0, "t_sent": 1.0, "t_first": 1.25, "t_last": 2.0,
                                       "itl": [0.25, 0.5], "prompt_tokens": 8, "output_tokens": 3, "status": "ok"}) + "\n"
                           for i in range(5)))
    before = [r.to_json() for r in read_records(src)]
    assert main([str(src)]) == 0 and cols_path(src).name == "x.records.jsonl.cols.xz"
    src.unlink()
    assert [r.to_json() for r in read_records(src)] == before


def test_an_archive_whose_body_is_not_an_object_is_refused_by_name():
    # the head is right but the body a JSON list: a ValueError naming the archive, not a TypeError
    # from indexing a list by "keys" (mypy found the unchecked body)
    import lzma

    import pytest

    from kvtui.io.records_cols import SCHEMA

    body = b"[1, 2]"
    head = json.dumps({"schema": SCHEMA, "records": 0, "exact": 0, "coarse": 0, "body_bytes": len(body)}).encode()
    with pytest.raises(ValueError, match="not a records archive"):
        list(decode_lines(lzma.compress(head + b"\n" + body)))
