"""What this kvtui's search would have measured, fed a published run's own verdicts.

    python scripts/replay_search_rules.py RUN.json.xz [--as-recorded]

An estimate from measured parts, not a measured run: the mode's search (seeded, as the run was,
with each step's recorded prediction) asks for a load; it is given the next verdict the run
measured at that load, in the order measured, with the reason this kvtui's rules settle it by
(kvtui.core.settled: settled_reason, and resettled once the loads above a pass are measured);
it stops where the search is done, or where it asks for a load the run measured no more (then the
estimate is cut, and says so). Each replayed step costs what the run's step cost (its duration_s).

`--as-recorded`: each step settled by the reason the run recorded, as the run's own kvtui did: the
replay must then ask for the very steps the run measured (tests/core/test_settled.py checks that on
the published runs, so the replay is the run's search and not another)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvtui.core.search_seeded import SeededSearch, rehint  # noqa: E402
from kvtui.core.settled import settle_passes, settled_reason  # noqa: E402
from kvtui.io.scenario.loader import scenario_from_snapshot  # noqa: E402
from kvtui.io.snapshot.file import load_snapshot  # noqa: E402


def replay_mode(m: dict[str, Any], sc: Any, as_recorded: bool) -> dict[str, Any]:
    """The steps the search asks for, fed this mode's measured verdicts: {loads, steps_s, cut, best}."""
    judged = [s for s in m.get("steps") or [] if s.get("why") in ("search", "confirm") and s.get("passed") is not None]
    if not judged:
        return {"loads": [], "steps_s": 0.0, "cut": None, "best": None, "settled": {}}
    server = m.get("server") or {}
    search = SeededSearch(sc.ramp, True, knee=(judged[0].get("predicted") or {}).get("knee") or judged[0]["load"])
    left = list(judged)
    done: list[dict[str, Any]] = []
    cut = None
    while (load := search.next()) is not None:
        step = next((s for s in left if s["load"] == load), None)
        if step is None:
            cut = load
            break
        left.remove(step)
        step = dict(step)  # the settles of this replay are its own
        if not as_recorded:
            step["settled"] = settled_reason(step, server, sc)
        done.append(step)
        search.record(load, step["passed"], step.get("settled"))
        if not as_recorded:  # as a run does after each step
            settle_passes(done, server, sc, search)
        nxt = left[0] if left else None
        if nxt is not None:
            rehint(search, nxt)
    return {"loads": [s["load"] for s in done], "steps_s": sum(float(s.get("duration_s") or 0) for s in done),
            "cut": cut, "best": search.result().best, "settled": {f"{s['load']:g}": s["settled"] for s in done
                                                                  if s.get("settled")}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshot", type=Path)
    ap.add_argument("--as-recorded", action="store_true")
    a = ap.parse_args(argv)
    doc = load_snapshot(a.snapshot)
    sc = scenario_from_snapshot(doc["scenario"], source=f"{a.snapshot}: scenario")
    tot_run = tot_replay = 0.0
    print(f"{a.snapshot.name}: confirm_when {sc.ramp.confirm_when}; replayed with "
          f"{'the settles it recorded' if a.as_recorded else 'this kvtui rules'} (an estimate from its measured steps)")
    print("mode       measured (s)                     replayed (s)                     knee")
    for m in doc["modes"]:
        r = replay_mode(m, sc, a.as_recorded)
        run_s = sum(float(s.get("duration_s") or 0) for s in m.get("steps") or [])
        tot_run, tot_replay = tot_run + run_s, tot_replay + r["steps_s"]
        measured = [f"{s['load']:g}" for s in m.get("steps") or []]
        extra = f"  (cut: asks for {r['cut']:g}, not measured again)" if r["cut"] is not None else ""
        print(f"{m['name']:<10} {' '.join(measured):<24} {run_s:6.1f}   {' '.join(f'{x:g}' for x in r['loads']):<24} "
              f"{r['steps_s']:6.1f}   {m.get('best_concurrency')!s} -> {r['best']!s}{extra}")
    print(f"steps: {tot_run:.0f} s measured, {tot_replay:.0f} s replayed ({tot_replay - tot_run:+.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
