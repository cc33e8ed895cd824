"""A published run archived (kvtui/report/archive.py): warm-up token times to the ms only where its
step's figures stay the same, every counted request exact, the snapshot read from X.json.xz."""

from __future__ import annotations

import json
import lzma

import pytest

from kvtui.errors import UsageError
from kvtui.io.records_cols import decode_lines, encode, same_records
from kvtui.io.snapshot.file import load_snapshot
from kvtui.report.archive import same_window_tokens, step_windows


def _rec(i: int, phase: str, t_first: float, itl: list[float], step: int = 0) -> str:
    t_last = t_first + sum(itl)
    return json.dumps({"id": f"ab12-{1000 + i}", "mode": "m", "step": step, "load": 2.0, "phase": phase,
                       "t_intended": 1.0 + i / 8, "t_sent": 1.0 + i / 8, "t_first": t_first, "t_last": round(t_last, 6),
                       "itl": itl, "prompt_tokens": 8, "output_tokens": len(itl) + 1, "status": "ok",
                       "dispatch_delay": 0.0}) + "\n"


def test_warm_up_times_go_to_the_ms_unless_a_token_would_cross_the_window_edge():
    windows = {("m", 0): (10.0, 20.0)}
    gaps = [0.024917, 0.025083, 0.025251]
    lines = [
        _rec(0, "warmup", 5.0, gaps),  # all before the window: coarse
        _rec(1, "warmup", 9.95, [0.060_3, 0.000_4]),  # 10.0103 and 10.0107 inside, and to the ms too
        _rec(2, "warmup", 9.9993, [0.000_6]),  # 9.9999 is outside, to the ms 10.0003 would be inside: kept exact
        _rec(3, "window", 12.0, gaps),  # counted: always exact
        _rec(4, "tail", 30.0, gaps, step=1),  # no window known for step 1: exact
    ]
    back = list(decode_lines(encode(lines, same_window_tokens(windows))))
    assert same_records(lines, back)
    coarse = [json.loads(b) for b in back]
    assert [("itl_resolution_s" in d) for d in coarse] == [True, True, False, False, False]
    assert coarse[0]["itl"] == [0.025, 0.025, 0.025] and coarse[0]["itl_resolution_s"] == 0.001
    assert [json.loads(a) for a in lines[2:]] == coarse[2:]  # exact ones: every key and value


def test_without_windows_every_record_comes_back_as_it_was():
    lines = [_rec(i, ph, 2.0 + i, [0.01 * (i + 1), 0.012345]) for i, ph in enumerate(("warmup", "window", "tail"))]
    lines.append(json.dumps({"id": "not-a-counter-x", "t_sent": 0.1234567891, "itl": [0.1234567891]}) + "\n")
    assert list(decode_lines(encode(lines))) == [json.dumps(json.loads(x), separators=(",", ":")) + "\n" for x in lines]


def test_step_windows_leave_out_a_step_index_two_steps_share():
    doc = {"modes": [{"name": "m", "steps": [{"index": 0, "t_window_start": 1.0, "t_window_end": 2.0},
                                             {"index": 0, "t_window_start": 3.0, "t_window_end": 4.0},
                                             {"index": 1, "t_window_start": 5.0, "t_window_end": 6.0}]}]}
    assert step_windows(doc) == {("m", 1): (5.0, 6.0)}



def test_a_step_judged_from_its_window_alone_keeps_its_records_exact():
    """Its TPOT reads the requests cut at the window's end by their gaps so far: h200-8k512's archive
    moved two TPOT percentiles by 0.001 ms when their warm-up and tail gaps went to the ms."""
    doc = {"modes": [{"name": "m", "steps": [{"index": 0, "t_window_start": 1.0, "t_window_end": 2.0,
                                              "stats_from": "window"},
                                             {"index": 1, "t_window_start": 5.0, "t_window_end": 6.0}]}]}
    assert step_windows(doc) == {("m", 1): (5.0, 6.0)}

def test_a_snapshot_is_read_from_its_xz_archive_and_a_bad_archive_is_one_line(tmp_path):
    doc = {"schema": "kvtui.snapshot/1", "modes": [{"name": "m", "steps": []}], "records": "r.records.jsonl"}
    (tmp_path / "r.json.xz").write_bytes(lzma.compress(json.dumps(doc).encode()))
    got = load_snapshot(tmp_path / "r.json")
    assert got["modes"][0]["name"] == "m" and got["_path"] == str(tmp_path / "r.json")
    # named by its archive's own name (what a shell completes), it reads the same
    named = load_snapshot(tmp_path / "r.json.xz")
    assert named["modes"] == got["modes"] and named["_path"] == got["_path"]
    (tmp_path / "bad.json.xz").write_bytes(b"not xz at all")
    with pytest.raises(UsageError, match=r"bad\.json\.xz: not an xz archive of a snapshot"):
        load_snapshot(tmp_path / "bad.json")
    with pytest.raises(UsageError, match=r"bad\.json\.xz: not an xz archive of a snapshot"):
        load_snapshot(tmp_path / "bad.json.xz")
