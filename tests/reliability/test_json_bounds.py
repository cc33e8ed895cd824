"""Malformed JSON of every shape (issue #30, class 3): whatever reads a snapshot, journal,
records, bench result or calibration from a file (export, diff, resume, replay, import, whatif,
calibrate) refuses a document nested too deep or holding an overlong string in one line, exit 2:
never a RecursionError, never a hang (kvtui.safeio.loads)."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvtui import safeio
from kvtui.cli.entry import main
from kvtui.io.records import record_from_line

MiB = 1 << 20


def cli(*argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as e:
            rc = int(e.code or 0)
    return rc, err.getvalue()


def nested(depth: int, shape: str, leaf: str = "1") -> str:
    """`depth` levels of lists, objects or both around `leaf`, optionally left open (cut short)."""
    opens = {"list": ("[", "]"), "dict": ('{"k":', "}")}
    parts = [opens["list" if shape == "list" or (shape == "mixed" and i % 2) else "dict"] for i in range(depth)]
    return "".join(o for o, _ in parts) + leaf + "".join(c for _, c in reversed(parts))


def snapshot_with(payload: str, where: str) -> str:
    """A snapshot-shaped document with `payload` (JSON text) at the top, in a mode, or in a step."""
    if where == "top":
        return '{"schema": "kvtui.snapshot/1", "modes": [], "x": %s}' % payload
    if where == "mode":
        return '{"schema": "kvtui.snapshot/1", "modes": [{"name": "m", "steps": [], "x": %s}]}' % payload
    return '{"schema": "kvtui.snapshot/1", "modes": [{"name": "m", "steps": [{"load": 1, "x": %s}]}]}' % payload


READERS = {
    "export": lambda p, d: ["export", p, "--format", "md", "--out", d / "o.md"],
    "diff a": lambda p, d: ["diff", p, d / "ok.json"],
    "diff b": lambda p, d: ["diff", d / "ok.json", p],
    "replay": lambda p, d: ["replay", p],
    "whatif": lambda p, d: ["whatif", p],
    "calibrate": lambda p, d: ["calibrate", p, "--out", d / "c.toml"],
    "resume": lambda p, d: ["run", d / "s.toml", "--headless", "--fast", "--resume", p, "--out", d / "r.json"],
}
SCEN = '[server]\nengine = "sim"\n[[modes]]\nname = "m"\n[ramp]\nmax = 2\nwarmup_s = 0.2\nwindow_s = 1\n'


def _setup(d: Path, text: str, suffix: str = ".json") -> Path:
    (d / "ok.json").write_text('{"schema": "kvtui.snapshot/1", "modes": []}')
    (d / "s.toml").write_text(SCEN)
    p = d / f"bad{suffix}"
    p.write_text(text)
    return p


def _refused(rc: int, err: str, p: Path) -> None:
    lines = err.strip().splitlines()
    assert rc == 2, err[-2000:]
    assert len(lines) == 1 and str(p) in lines[0], err[-2000:]
    assert "RecursionError" not in err and "Traceback" not in err


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reader=st.sampled_from(list(READERS)), shape=st.sampled_from(["list", "dict", "mixed"]),
       depth=st.sampled_from([safeio.MAX_DEPTH + 1, 900, 200_000]),
       where=st.sampled_from(["top", "mode", "step"]), cut=st.booleans())
def test_deep_nesting_is_one_line_exit_2_for_every_reader(tmp_path_factory, reader, shape, depth, where, cut) -> None:
    # A cut-short document may be salvaged and then run (a resume, a refit): cut cases go through
    # the readers that only render, so that one example stays seconds long.
    assume(not cut or reader in ("export", "diff a", "diff b"))
    d = tmp_path_factory.mktemp("deep")
    text = snapshot_with(nested(depth, shape), where)
    if cut:  # cut short inside the nesting: the salvage path must be bounded too
        text = text[: len(text) // 2]
    p = _setup(d, text)
    rc, err = cli(*READERS[reader](p, d))
    if cut and rc != 2 and depth // 2 <= safeio.MAX_DEPTH + 1:
        # Cut within the bounds: the readable part is salvaged (a truncated snapshot), as ever.
        assert "Traceback" not in err and "RecursionError" not in err
        return
    _refused(rc, err, p)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reader=st.sampled_from(list(READERS)), where=st.sampled_from(["top", "mode", "step"]),
       as_key=st.booleans(), cut=st.booleans())
def test_an_overlong_string_is_one_line_exit_2_for_every_reader(tmp_path_factory, reader, where, as_key, cut) -> None:
    assume(not cut or reader in ("export", "diff a", "diff b"))
    d = tmp_path_factory.mktemp("long")
    s = "a" * (safeio.MAX_STRING + 64)
    payload = '{"%s": 1}' % s if as_key else '"%s"' % s
    text = snapshot_with(payload, where)
    if cut:
        text = text[: len(text) - 5]
    p = _setup(d, text)
    rc, err = cli(*READERS[reader](p, d))
    _refused(rc, err, p)


@pytest.mark.parametrize("reader", ["export", "diff a"])
@pytest.mark.parametrize("cut", [False, True])
def test_a_100_mb_string_is_refused_not_a_hang(tmp_path, reader, cut) -> None:
    """The case seen: export and diff hung on a 100 MB string (cut short: the salvage walked it)."""
    text = snapshot_with('"' + "x" * (100 * MiB) + '"', "step")
    p = _setup(tmp_path, text[:-3] if cut else text)
    rc, err = cli(*READERS[reader](p, tmp_path))
    _refused(rc, err, p)


@pytest.mark.parametrize("payload", [nested(200_000, "list"), nested(100, "dict"), '"' + "y" * (2 * MiB) + '"'])
def test_a_journal_line_past_the_bounds_is_a_damaged_line_not_a_crash(tmp_path, payload) -> None:
    from kvtui.io.snapshot.file import load_journal

    j = tmp_path / "r.json.journal"
    head = json.dumps({"event": "header", "t": 0, "data": {"schema": "kvtui.snapshot/1"}})
    j.write_text(head + "\n" + '{"event": "mode", "t": 0, "data": %s}\n' % payload)
    doc = load_journal(j)
    assert "1 damaged line(s) skipped" in doc["load_warnings"][-1]
    j.write_text('{"event": "header", "t": 0, "data": %s}\n' % payload)  # only the header, damaged
    rc, err = cli("export", j, "--format", "md", "--out", tmp_path / "o.md")
    _refused(rc, err, j)


@pytest.mark.parametrize("line", [nested(200_000, "list"), '{"mode": "m", "err": "%s"}' % ("z" * (2 * MiB))])
def test_a_records_line_past_the_bounds_is_not_a_record(line) -> None:
    assert record_from_line(line) is None


@pytest.mark.parametrize("text", [nested(200_000, "list"), '{"completed": "%s"}' % ("q" * (2 * MiB))])
def test_import_of_a_bench_result_past_the_bounds(tmp_path, text) -> None:
    p = tmp_path / "bench.json"
    p.write_text(text)
    rc, err = cli("import", p, "--out", tmp_path / "o.json")
    _refused(rc, err, p)


@pytest.mark.parametrize("text", ["a = " + "[" * 100_000, "a = " + "{b=" * 100_000, "[step]\nx = " + "[" * 5000])
def test_a_calibration_nested_past_tomllib_is_one_line(tmp_path, text) -> None:
    p = tmp_path / "cal.toml"
    p.write_text(text)
    rc, err = cli("whatif", tmp_path / "nope.json", "--calibration", p)  # the snapshot is missing: which first?
    assert rc == 2 and "Traceback" not in err
    from kvtui.errors import UsageError
    from kvtui.simulator.model.calibration_file import read_calibration

    with pytest.raises(UsageError, match=str(p)):
        read_calibration(p)


@given(depth=st.integers(1, 200), width=st.integers(0, 3))
def test_loads_bounds_are_exact(depth, width) -> None:
    text = nested(depth, "mixed", "[" + ",".join(["1"] * width) + "]")
    total = depth + 1
    if total <= safeio.MAX_DEPTH:
        safeio.loads(text)
    else:
        with pytest.raises(safeio.JSONBoundsError):
            safeio.loads(text)


# -- numbers kvtui never writes: NaN, ±Infinity, past a float, past 2**64, past 4,300 digits -----

NUMBERS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", str(2**64 + 1), "1" + "0" * 5000]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reader=st.sampled_from(list(READERS)), literal=st.sampled_from(NUMBERS),
       where=st.sampled_from(["top", "mode", "step"]))
def test_a_number_kvtui_never_writes_is_one_line_exit_2_for_every_reader(tmp_path_factory, reader, literal,
                                                                         where) -> None:
    """An integer of 5,000 digits was a ValueError traceback out of every reader; a load of 1e999
    an OverflowError out of calibrate; NaN and Infinity are no figures kvtui writes ("inf" is its
    infinite latency, a string)."""
    d = tmp_path_factory.mktemp("num")
    p = _setup(d, snapshot_with(literal, where))
    rc, err = cli(*READERS[reader](p, d))
    _refused(rc, err, p)


@pytest.mark.parametrize("literal", NUMBERS)
def test_such_a_number_in_a_journal_line_or_a_record_is_a_damaged_line(tmp_path, literal) -> None:
    from kvtui.io.snapshot.file import load_journal

    j = tmp_path / "r.json.journal"
    head = json.dumps({"event": "header", "t": 0, "data": {"schema": "kvtui.snapshot/1"}})
    j.write_text(head + "\n" + '{"event": "mode", "t": %s, "data": {"name": "m", "steps": []}}\n' % literal)
    assert "1 damaged line(s) skipped" in load_journal(j)["load_warnings"][-1]
    assert record_from_line('{"id": "x", "mode": "m", "step": 0, "load": %s}' % literal) is None


def test_another_tools_nan_still_imports(tmp_path) -> None:
    """`numbers=False` for other tools' files: a vLLM bench result may hold NaN (its std of nothing)."""
    assert math.isnan(safeio.loads('{"x": NaN}', numbers=False)["x"])
    with pytest.raises(safeio.JSONBoundsError):
        safeio.loads('{"x": NaN}')
