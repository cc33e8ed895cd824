"""Archive a published run compactly, and prove nothing it shows changed.

    python -m kvtui.report.archive docs/results/X.json …

writes, beside each snapshot, `X.records.jsonl.cols.xz` (its per-request records,
kvtui/io/records_cols.py) and `X.json.xz` (the snapshot itself, xz), after checking that:

- the archive gives every record back (warm-up and tail token times to the ms, where that
  leaves their step's tokens inside its window unchanged);
- every step re-evaluated from the archive, under the run's SLO and two others (tighter, with a
  goodput and a preemption target; looser), is equal to the step re-evaluated from the original;
- the Markdown and CSV exports of the archived snapshot are byte-identical to the original's.

kvtui reads either form where it reads the other (`kvtui replay X.json` finds X.json.xz, the
records reader finds the .cols.xz), so the plain files can then be removed from the tree.
"""

from __future__ import annotations

import json
import lzma
import sys
import tempfile
from pathlib import Path
from typing import Any

from kvtui.core.record import Record
from kvtui.errors import UsageError
from kvtui.io.records import iter_record_lines
from kvtui.io.records_cols import CoarseOk, cols_path, decode_lines, encode, same_records
from kvtui.io.scenario.schema import Slo
from kvtui.io.snapshot.file import XZ, load_snapshot
from kvtui.io.snapshot.schema import Run
from kvtui.safeio import atomic_write

Windows = dict[tuple[str, int], tuple[float, float]]


def step_windows(doc: dict[str, Any]) -> Windows:
    """{(mode, step index): (t_window_start, t_window_end)}, as re-evaluation pairs records with steps;
    a (mode, index) that two steps share is left out (its records stay exact), and so is a step whose
    figures come from its window alone (`stats_from = "window"`): its TPOT reads the requests cut at the
    window's end by their gaps so far, so no gap of its records may move."""
    out: Windows = {}
    twice: set[tuple[str, int]] = set()
    for m in Run.view(doc).all_modes:
        for i, s in enumerate(m.all_steps):
            index = s.index if s.has("index") else i
            t0, t1 = s.t_window_start, s.t_window_end
            if m.name is None or index is None or t0 is None or t1 is None:
                continue
            key = (m.name, index)
            if key in out or s.stats_from == "window":
                twice.add(key)
            out[key] = (t0, t1)
    for key in twice:
        del out[key]
    return out


def same_window_tokens(windows: Windows) -> CoarseOk:
    """A record may keep coarse token times when as many of them fall inside its step's window
    (evaluate._window_tokens counts them: the step's tokens/s) as of the measured ones."""

    def ok(d: dict[str, Any], coarse: list[float], exact: list[float]) -> bool:
        mode, step = d.get("mode"), d.get("step")
        win = windows.get((mode, step)) if isinstance(mode, str) and isinstance(step, int) else None
        if win is None or not isinstance(d.get("t_first"), float) or len(coarse) != len(exact):
            return False
        t0, t1 = win

        def inside(itl: list[float]) -> int:
            times = Record(id="", mode="", step=0, load=0.0, phase="", t_intended=0.0, t_sent=0.0,
                           t_first=d["t_first"], itl=itl).token_times()
            return sum(1 for t in times if t0 <= t <= t1)

        return inside(coarse) == inside(exact)

    return ok


def check_slos(doc: dict[str, Any]) -> list[Slo]:
    """The run's SLO, a tighter one with goodput and preemption targets, and a looser one."""
    from kvtui.io.scenario.slo_table import slo_of

    run = slo_of(Run.view(doc).scenario)
    tight = Slo(latency={k: v / 2 for k, v in run.latency.items()} | {"itl_p99_ms": 100.0, "e2e_p90_ms": 20000.0},
                max_error_rate=0.0, min_goodput=0.9, max_preemptions_per_request=0.0)
    loose = Slo(latency={k: v * 3 for k, v in run.latency.items()}, max_error_rate=0.2)
    return [run, tight, loose]


def _reevaluated(doc: dict[str, Any], records: Path, slo: Slo) -> str:
    from kvtui.explore.reevaluate import reevaluate_modes

    modes: list[tuple[str, list[dict[str, Any]], Path | None]] = [
        (m["name"], m.get("steps") or [], records) for m in doc["modes"]]
    out, problems = reevaluate_modes(modes, slo)
    return json.dumps([out, [p.replace(str(records.parent), "") for p in problems]], sort_keys=True, default=str)


def _exports(doc: dict[str, Any]) -> tuple[str, str]:
    from kvtui.report.export import render

    return render(doc, "md"), render(doc, "csv")


def archive(snapshot: Path) -> str:
    """Write X.records.jsonl.cols.xz (when the run has records) and X.json.xz beside `snapshot`, once
    checked; a one-line report."""
    snapshot = Path(snapshot)
    doc = load_snapshot(snapshot)
    records = snapshot.with_name(Path(doc.get("records") or snapshot.stem + ".records.jsonl").name)
    try:
        lines = list(iter_record_lines(records))
    except FileNotFoundError:
        lines = []  # a snapshot whose records live in the run it was joined into (h200-v2-b, -d)
    data = encode(lines, same_window_tokens(step_windows(doc))) if lines else b""
    if lines and not same_records(lines, list(decode_lines(data))):
        raise UsageError(f"{snapshot}: the archive does not give the records back; nothing written")
    packed = lzma.compress(snapshot.read_bytes(), preset=9 | lzma.PRESET_EXTREME) if snapshot.exists() else b""
    with tempfile.TemporaryDirectory() as tmp:
        before, after = Path(tmp, "before.records.jsonl"), Path(tmp, "after.records.jsonl")
        if lines:
            before.write_text("".join(lines), encoding="utf-8")
            cols_path(after).write_bytes(data)
            for slo in check_slos(doc):
                if _reevaluated(doc, before, slo) != _reevaluated(doc, after, slo):
                    raise UsageError(f"{snapshot}: re-evaluated under {slo.describe()}, the archive differs; "
                                     "nothing written")
        if packed:
            Path(tmp, "s.json.xz").write_bytes(packed)
            if _exports(load_snapshot(Path(tmp, "s.json"))) != _exports(doc):
                raise UsageError(f"{snapshot}: the archived snapshot exports differently; nothing written")
    msg = f"{snapshot.name}:"
    if lines:
        cols = cols_path(records)
        old = cols.stat().st_size if cols.exists() else None
        atomic_write(cols, data)  # regular files only (kvtui.safeio)
        msg += f" records {len(lines):,} → {cols.name} {len(data):,} bytes" + (f" (was {old:,});" if old else ";")
    if packed:
        atomic_write(snapshot.with_name(snapshot.name + XZ), packed)
        msg += f" snapshot {snapshot.stat().st_size:,} → {snapshot.name + XZ} {len(packed):,} bytes"
    return msg


def main(argv: list[str] | None = None) -> int:
    for name in (sys.argv[1:] if argv is None else argv):
        try:
            print(archive(Path(name)))
        except UsageError as e:
            print(f"kvtui archive: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
