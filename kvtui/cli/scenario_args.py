"""The scenario a command line asks for, with one precedence: defaults < TOML < --set < --engine.

`kvtui run` and `kvtui tui` both read it here, so the order can differ nowhere.
"""

from __future__ import annotations

import argparse
from typing import Any

from kvtui.errors import UsageError


def overrides(args: argparse.Namespace) -> list[str]:
    """The --set values in their order, then --engine (load_scenario applies them in order: the last wins)."""
    out = list(getattr(args, "overrides", None) or [])
    engine = getattr(args, "engine", None)
    if engine:
        out.append(f"server.engine=\"{engine}\"")
    return out


def check_fast(scenario: Any, fast: bool) -> None:
    if fast and scenario.server.engine != "sim":
        raise UsageError("--fast simulates offline and needs the sim engine (server.engine = \"sim\")")
    if fast and scenario.server.replicas > 1:
        raise UsageError(f"--fast models one server; server.replicas = {scenario.server.replicas} runs live "
                         "(without --fast), each replica its own kvtui sim serve")
    if fast or _in_process(scenario):
        check_fast_bounded(scenario)


def _in_process(scenario: Any) -> bool:
    """A run that is not --fast but runs the simulator in process, paced (kvtui.explore.pacing): the
    same offline simulation runs each step, so the same bounds hold."""
    from kvtui.explore.pacing import paces

    return paces(scenario)


# An offline step simulates every request of the step in memory, in this process: its work is
# bounded by the requests it must see. ramp.min_samples = 100000000 (in range for a live run)
# once ran at 100 % CPU to 2 GB, with --fast and, judged in modelled time, on the live simulator
# too. Past these it is refused up front, naming the field; whatever passes is still bounded
# step by step as it runs (kvtui.simulator.engine.budget).
FAST_MAX_REQUESTS = 100_000  # per step: ~100 MB of records, seconds of simulation
FAST_MAX_LOAD_SECONDS = 2_000_000  # ramp.max × (warmup_s + window_s): the requests a step can start


def check_fast_bounded(scenario: Any) -> None:
    r = scenario.ramp
    src = scenario.source or "the scenario"
    for field, value in (("min_samples", r.min_samples), ("window_requests", r.window_requests)):
        if value > FAST_MAX_REQUESTS:
            raise UsageError(f"{src}: ramp.{field} = {value:,}: the simulator models every step with at least that "
                             f"many requests in memory; at most {FAST_MAX_REQUESTS:,} (or measure a real engine)")
    span = r.max * (r.warmup_s + r.window_s)
    if span > FAST_MAX_LOAD_SECONDS:
        raise UsageError(f"{src}: ramp.max = {r.max:g} with warmup_s + window_s = {r.warmup_s + r.window_s:g} s: "
                         f"the simulator would model up to {span:,.0f} request-seconds a step; at most "
                         f"{FAST_MAX_LOAD_SECONDS:,} (lower ramp.max or the window, or measure a real engine)")


def check_outputs(args: argparse.Namespace) -> None:
    """--out and its sidecars (journal, records) refused up front when one is not a regular file
    or an absent path (kvtui.safeio.check_output): one line, exit 2, before anything runs."""
    out = getattr(args, "out", None)
    if out:
        from pathlib import Path

        from kvtui.io.snapshot.outclaim import check_out_path

        check_out_path(Path(out))


def check_resumes(scenario: Any, resume: list[dict[str, Any]] | None) -> None:
    """A resume of another measurement, or of impossible figures: refused before anything runs."""
    if resume:
        from kvtui.explore.resume_guard import check_resumable

        check_resumable(scenario.to_dict(), resume)


def resumes(args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """The --resume snapshots, loaded (a bad file fails here with its one-line error)."""
    paths = getattr(args, "resume", None)
    if not paths:
        return None
    from kvtui.io.snapshot.file import load_snapshot

    return [load_snapshot(p) for p in lane_snapshots(paths)]


def lane_snapshots(paths: list[str]) -> list[str]:
    """Each --resume path, or, for the --out of a `--parallel` run killed before its join (no
    snapshot, no journal), the snapshots (or journals) its lanes left in OUT.lanes/, in order."""
    import sys
    from pathlib import Path

    out: list[str] = []
    for p in paths:
        snap = Path(p)
        journal = snap.with_name(snap.name + ".journal")
        lanes = snap.with_name(snap.stem + ".lanes")
        if snap.exists() or journal.exists() or snap.with_name(snap.name + ".xz").exists() or not lanes.is_dir():
            out.append(p)
            continue
        found = []
        for f in sorted(lanes.iterdir()):
            if f.name.endswith(".json") or (f.name.endswith(".json.journal")
                                            and not f.with_name(f.name[: -len(".journal")]).exists()):
                found.append(str(f))
        if not found:
            out.append(p)  # its own one-line error: nothing there
            continue
        print(f"kvtui: --resume {p}: a --parallel run stopped before its join: resuming its "
              f"{len(found)} lane snapshot(s) in {lanes}", file=sys.stderr)
        out += found
    return out
