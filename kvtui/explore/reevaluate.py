"""Re-evaluate stored steps under another SLO from the per-request records sidecar (pure; the
TUI runs it off its UI thread when the SLO is edited on screen)."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from kvtui.io.scenario.schema import Slo

# (mode name, its steps, its records file): what a mode's re-evaluation reads.
ModeRecords = tuple[str, list[dict[str, Any]], Path | None]
# {mode: {step index: the step re-judged}}: what it gives back.
ViewSteps = dict[str, dict[int, dict[str, Any]]]


def reevaluate_modes(modes: list[ModeRecords], slo: Slo,
                     only: set[tuple[str, int]] | None = None) -> tuple[ViewSteps, list[str]]:
    """Re-evaluate steps under `slo` from the records sidecar(s). Pure; runs off the UI thread.

    `modes` is [(mode name, steps, records path)]. Returns ({mode: {step index: step}}, problems).
    """
    from kvtui.core.evaluate import reevaluate
    from kvtui.io.records import Damaged, read_records

    wanted: dict[Path, set[str]] = {}
    problems: list[str] = []
    for name, _steps, path in modes:
        if path is None:
            problems.append(f"{name}: no per-request records file: verdicts kept as measured")
            continue
        wanted.setdefault(path, set()).add(name)
    grouped: dict[tuple[str, int], list[Any]] = collections.defaultdict(list)
    for path, names in wanted.items():
        damaged = Damaged()
        try:
            for r in read_records(path, damaged):
                if r.mode in names and (only is None or (r.mode, r.step) in only):
                    grouped[(r.mode, r.step)].append(r)
        except OSError as e:
            problems.append(f"cannot read the records {path}: {e.strerror or e}; verdicts kept as measured")
        if damaged.count:  # cut lines, garbage, non-records: skipped and counted, never fatal
            problems.append(damaged.warning(path) or "")
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for name, steps, path in modes:
        if path is None:
            continue
        for i, s in enumerate(steps):
            idx = s.get("index", i)
            if only is not None and (name, idx) not in only:
                continue
            recs = grouped.get((name, idx))
            if not recs or "t_window_start" not in s:
                continue
            try:
                new = reevaluate(s, recs, slo)
            except (KeyError, TypeError, ValueError) as e:
                problems.append(f"{name} step {idx}: cannot re-evaluate ({type(e).__name__}: {e})")
                continue
            for key, v in s.items():  # keep what re-evaluation does not recompute (why, times, tokens)
                new.setdefault(key, v)
            out.setdefault(name, {})[idx] = new
    return out, problems
