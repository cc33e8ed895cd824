"""Progress of a live run: "step n of about m" and an ETA for the mode and for the run.

From the search's own plan (`kvtui.explore.plan.steps_left`: the mode's strategy replayed on its
verdicts and played out against an assumed knee, hence "about") and the wall durations of the
steps already run. Modes not started yet are assumed to need as
many steps as this one, plus its engine start.

The steps and the search are read through the snapshot schema's typed views; the step in flight
and the load generator's progress are the events' own payloads ({mode, load, index, why},
{phase, elapsed_s, …}), and the ramp is the scenario's.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from kvtui.explore.plan import fmt_eta  # noqa: E402,F401 - the one way an ETA is written (headless too)
from kvtui.io.snapshot.schema import Search, Step


def _durations(steps: Sequence[Step | Mapping[str, Any]]) -> list[float]:
    out = []
    for step in steps:
        s = Step.of(step)
        a, b = s.t_rel_start, s.t_rel_end
        if a is not None and b is not None and b > a:
            out.append(float(b - a))
        elif s.duration_s is not None:
            out.append(float(s.duration_s))
    return out


def progress(state: Any) -> dict[str, Any] | None:
    """{"n", "about", "eta_mode_s", "eta_run_s"} for the mode the run is on; None when no step runs."""
    from kvtui.explore.plan import steps_left

    if state.replay or not state.step:
        return None
    mv = state.modes.get(state.step.mode or "")
    if mv is None:
        return None
    ramp = (state.scenario or {}).get("ramp") or {}
    done = len(mv.steps)
    srch = mv.search or mv.doc.search or Search()  # live: the run's own entry (its search starts there)
    guess = srch.guess if srch.has("guess") else mv.predicted_kv  # where the search started (the KV-bound guess)
    left = max(1, steps_left(ramp, mv.steps, state.closed, guess=guess, seed=srch.seed))
    durs = _durations(mv.steps) or _durations([s for m in state.modes.values() for s in m.steps])
    mean = sum(durs) / len(durs) if durs else None
    prog = state.progress
    modelled = prog.modelled_s if prog is not None else None  # a paced simulation knows its step's modelled length
    if mean is None and isinstance(modelled, (int, float)) and modelled > 0:
        mean = float(modelled)
    if mean is None:  # before the first step ends: the protocol's own length (warm-up + window, × slow motion)
        from kvtui.explore.plan import step_wall_s

        ts = mv.info.time_scale if isinstance(mv.info.time_scale, (int, float)) else 1.0
        mean = step_wall_s(ramp, [], ts) or None
    elapsed = float(prog.elapsed_s) if prog is not None else 0.0
    eta_mode = None if mean is None else max(0.0, left * mean - min(elapsed, mean))
    waiting = [m for m in state.modes.values() if m.status == "waiting"]
    startup = mv.server.startup_s
    per_mode = None if mean is None else (done + left) * mean + (float(startup) if startup is not None else 0.0)
    eta_run = None if eta_mode is None or per_mode is None else eta_mode + len(waiting) * per_mode
    paced = prog.paced if prog is not None else None
    if isinstance(paced, (int, float)) and paced > 0:  # a paced simulation: modelled seconds / its speed on the wall
        eta_mode = None if eta_mode is None else eta_mode / paced
        eta_run = None if eta_run is None else eta_run / paced
    elif isinstance(paced, (int, float)):  # jumped to the answer: no wait left on the wall
        eta_mode = eta_run = 0.0
    return {"n": done + 1, "about": done + left, "eta_mode_s": eta_mode, "eta_run_s": eta_run,
            "modes_left": len(waiting)}


def eta_text(state: Any) -> str:
    """The ETAs alone (the status bar says "step n of about m" with the step itself)."""
    p = progress(state)
    if p is None or p["eta_mode_s"] is None:
        return ""
    t = f"mode ETA {fmt_eta(p['eta_mode_s'])}"
    if p["modes_left"]:
        t += f" · run ETA {fmt_eta(p['eta_run_s'])}"
    return t
