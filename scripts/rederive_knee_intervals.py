"""Re-derive a snapshot's knee intervals from its per-request records, in place.

    python scripts/rederive_knee_intervals.py RUN.json [--restore-windows EARLIER.json MODE]

Each judged step's pass probability (kvtui.core.knee_interval.for_step), each mode's interval
(for_mode), the search's one-line answer and the comparison are computed again, as a run of this
kvtui computes them. For runs made before 2026-12-05, whose continuous-protocol steps drew the
bootstrap from their finished requests only (every pass read 0 %: every interval collapsed onto
its knee). The snapshot's `warnings` says what was re-derived, and when.

`--restore-windows EARLIER.json MODE`: a mode continued by --resume before 2026-12-05 had its kept
steps' window times moved onto the new run's clock, while their records stayed on the old one; the
window times of MODE's kept steps are copied back from EARLIER.json (the snapshot it resumed),
step by step, after checking that each is the same step (index, load, verdict, start); so is the
earlier server's start (`continued.startup_s`, which kvtui now records itself).

Measured figures (the steps' latencies, verdicts, knees) are not touched: the script refuses to
write if re-evaluating any judged step from its records gives other figures than it holds.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvtui.core import knee_interval as ki  # noqa: E402
from kvtui.core.evaluate import reevaluate  # noqa: E402
from kvtui.explore.compare import compare_modes  # noqa: E402
from kvtui.io.records import read_records  # noqa: E402
from kvtui.io.scenario.loader import scenario_from_snapshot  # noqa: E402
from kvtui.io.snapshot.file import dumps  # noqa: E402

SAME = ("index", "load", "passed", "started_at")
FIGURES = ("samples", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "passed")


def same(a: object, b: object) -> bool:
    """Equal, numbers to their last rounded digit (a re-evaluation sums in another order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(a - b) <= 0.0011 + 1e-9 * abs(a)
    return a == b


def restore_windows(doc: dict, earlier: dict, mode: str) -> int:
    old = next(m for m in earlier["modes"] if m["name"] == mode)
    new = next(m for m in doc["modes"] if m["name"] == mode)
    n = 0
    for s in new["steps"]:
        if not s.get("resumed"):
            continue
        o = old["steps"][s["index"]]
        if any(o.get(k) != s.get(k) for k in SAME):
            raise SystemExit(f"{mode} step {s['index']}: not the same step in the earlier snapshot")
        s["t_window_start"], s["t_window_end"] = o["t_window_start"], o["t_window_end"]
        n += 1
    # and the earlier run's server start, as kvtui now keeps it (continued.startup_s)
    prior = (old.get("server") or {}).get("startup_s")
    if n and isinstance(prior, (int, float)) and isinstance(new.get("continued"), dict):
        new["continued"].setdefault("startup_s", [prior])
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--restore-windows", nargs=2, metavar=("EARLIER", "MODE"))
    a = ap.parse_args(argv)
    doc = json.loads(a.run.read_text())
    notes = []
    if a.restore_windows:
        n = restore_windows(doc, json.loads(Path(a.restore_windows[0]).read_text()), a.restore_windows[1])
        notes.append(f"the window times of {a.restore_windows[1]}'s {n} steps kept by --resume, and its earlier "
                     f"server start, restored from "
                     f"{Path(a.restore_windows[0]).name} (kvtui before 2026-12-05 moved them onto the resuming run's "
                     "clock, and not their records)")
    slo = scenario_from_snapshot(doc["scenario"]).slo
    recs: dict[tuple[str, int], list] = collections.defaultdict(list)
    for r in read_records(a.run.with_name(doc["records"])):
        recs[(r.mode, r.step)].append(r)
    for m in doc["modes"]:
        for s in m.get("steps") or []:
            mine = recs[(m["name"], s["index"])]
            if ki.judged(s) and "t_window_start" in s:
                again = reevaluate(s, mine, slo)
                if again.get("passed") != s.get("passed"):
                    raise SystemExit(f"{m['name']} step {s['index']}: its records re-evaluate to another verdict")
                bad = [k for k in FIGURES if not same(again.get(k), s.get(k))]
                if bad:  # a continuous step's last gaps: the live figure had those the workers had reported
                    diffs = {k: (s[k].get("p95"), again[k].get("p95")) for k in bad if isinstance(s.get(k), dict)}
                    print(f"{m['name']} step {s['index']}: re-evaluated {bad} differ, p95 as stored / again: {diffs}")
            pp = ki.for_step(s, mine, slo, f"{m['name']}#{s['index']}")
            if pp is not None:
                s["pass_probability"] = pp
        iv = ki.for_mode(m.get("steps") or [], m.get("best_concurrency"))
        if iv is not None:
            m["knee_interval"] = iv
            srch = m.get("search") or {}
            if isinstance(srch.get("describe"), str):
                text = srch["describe"]
                head = f"{m['best_concurrency']:g}" if m.get("best_concurrency") is not None else "—"
                if text.startswith(head + " ["):  # an interval from before: the answer without it
                    text = head + text[text.index("]") + 1:]
                srch["describe"] = ki.describe(text, m.get("best_concurrency"), iv)
    doc["comparison"] = compare_modes(doc)
    when = datetime.date.today().isoformat()
    notes.append(f"pass probabilities and knee intervals re-derived from the records on {when} "
                 "(scripts/rederive_knee_intervals.py): the run's own drew the bootstrap from the finished "
                 "window requests only")
    doc.setdefault("warnings", []).extend(notes)
    a.run.write_text(dumps(doc))  # as kvtui's writer writes it
    for m in doc["modes"]:
        print(f"{m['name']}: {ki.fmt_knee(m.get('best_concurrency'), m.get('knee_interval'))}  "
              f"{[(s['load'], (s.get('pass_probability') or {}).get('p')) for s in m.get('steps') or []]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
