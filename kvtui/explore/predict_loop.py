"""The prediction in the run's loop (kvtui.explore.run calls these, one line each).

before_search: the mode's prediction (kvtui.explore.prediction) into md["prediction"];
choose: the search (seeded by it where it covers the mode: kvtui.core.search_seeded);
annotate: each step's `predicted` (verdict and figures the prediction gave for that load);
after_step: the refit (kvtui.explore.refit) and, for the seeded search, the knee of the prediction as
  it stands after each judged step (refitted where the verdict went against it): it chooses the next probe;
after_search: the prediction's error against what was measured;
prefix_gain: the capacity the prefix cache gives the mode, its no-cache knee simulated
  (kvtui.explore.prefix_gain) into md["prefix_cache_gain"].
"""

from __future__ import annotations

from typing import Any

from kvtui.core.search import Search
from kvtui.core.search_seeded import SeededSearch, choose_search
from kvtui.explore import events as ev
from kvtui.explore.prediction import predicted_at, prediction_error
from kvtui.explore.refit import Predictor
from kvtui.io.scenario.schema import Mode


def make_predictor(calibration: Any, refit: bool) -> Predictor:
    from kvtui.simulator.model.calibration_file import read_calibration
    from kvtui.simulator.model.roofline import Calibration

    cal = calibration if isinstance(calibration, Calibration) else read_calibration(calibration)
    return Predictor(cal, refit)


def _wanted(run: Any) -> bool:
    """Whether this run predicts: always, except the live simulator under a search the scenario
    chose not to seed (`ramp.search = "fast"` or `"linear"`: it would only predict itself). The
    default ("auto") predicts on every engine, so every engine's search starts from the same rule
    (kvtui.core.search_seeded.choose_search)."""
    sc = run.scenario
    return not (sc.server.engine == "sim" and not run.fast and sc.ramp.search in ("fast", "linear"))


def before_search(run: Any, mode: Mode, md: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any] | None:
    if not run.closed and run.scenario.ramp.load != "rate":
        return None
    if old is not None and old.get("prediction"):
        md["prediction"] = old["prediction"]  # a continued mode keeps the prediction its steps were seeded by
        return md["prediction"]
    if not _wanted(run):
        return None
    try:
        p = run.predictor.predict(run.scenario, mode)
    except Exception as e:  # a prediction is advice: its failure must not cost the measurement
        p = {"covered": False, "why": f"the prediction failed: {type(e).__name__}: {e}", "simulated": True,
             "knee": None, "curve": []}
    md["prediction"] = p
    # A prediction is news, not a fault: a note (headless "[mode] predicted …", the TUI's log).
    if p.get("covered"):
        run.emit(ev.RunNote(mode.name, f"predicted (SIMULATED, {p.get('gpu')}, calibration {p.get('calibration')}): "
                                       + (f"knee ≥ {_g(p.get('knee'))}, no load up to ramp.max fails"
                                          if p.get("knee") is not None and p.get("first_fail") is None
                                          else f"knee {_g(p.get('knee'))}, next {_g(p.get('first_fail'))} fails")))
    else:
        run.emit(ev.RunNote(mode.name, f"no prediction: {p.get('why')}; the search starts from the KV-bound guess"))
    return p


def _g(x: Any) -> str:
    return "none" if x is None else f"{x:g}"


def choose(run: Any, guess: float | None, prediction: dict[str, Any] | None) -> Search:
    sc = run.scenario
    return choose_search(sc.ramp, run.closed, guess, prediction)


def search_keys(search: Search) -> dict[str, Any]:
    return {"seed": search.seed} if isinstance(search, SeededSearch) else {}


def current(md: dict[str, Any]) -> dict[str, Any] | None:
    """The prediction as it stands now: the latest refit's curve where one was re-predicted."""
    p = md.get("prediction")
    if not p or not p.get("covered"):
        return None
    for r in reversed(p.get("refits") or []):
        if r.get("curve"):
            return {"covered": True, "knee": r.get("knee"), "curve": r["curve"]}
    return p


def annotate(md: dict[str, Any], step: dict[str, Any]) -> None:
    if step.get("why", "search") not in ("search", "confirm"):
        return
    cur = current(md)
    p = predicted_at(cur, step["load"])
    if p is not None:
        p.pop("load", None)
        # the knee the prediction gave when this load was chosen: a replayed seeded search is told it
        # again (search_seeded.rehint), so a resumed run asks for the loads it measured
        p["knee"] = (cur or {}).get("knee")
        step["predicted"] = p


def after_step(run: Any, mode: Mode, md: dict[str, Any], search: Search) -> None:
    try:
        run.predictor.after_step(run.scenario, mode, md)  # where it re-predicted, its curve is current()'s
    except Exception as e:  # the refit is advice too
        run.emit(ev.RunWarning(mode.name, f"refit failed: {type(e).__name__}: {e}"))
        return
    if isinstance(search, SeededSearch):
        # The prediction as it stands chooses the next probe: the refit's new knee where the verdict
        # went against it, else the curve the last verdict agreed with.
        cur = current(md)
        if cur is not None:
            search.hint(_knee_or_none_passes(cur.get("knee")))


def _knee_or_none_passes(knee: Any) -> float:
    """A covered prediction's knee; None there means no load passes (the search aims at ramp.start)."""
    return float(knee) if isinstance(knee, (int, float)) else 0.0


def after_search(run: Any, md: dict[str, Any], best: float | None) -> None:
    run.predictor.join()  # the last refit belongs to this mode's entry
    p = md.get("prediction")
    if p:
        p["error"] = prediction_error(p, md.get("steps") or [], best)


def prefix_gain(run: Any, mode: Mode, md: dict[str, Any], best: float | None) -> None:
    """md["prefix_cache_gain"] where the prefix cache has prompt sharing to hit (kvtui.explore.prefix_gain)."""
    from kvtui.explore.prefix_gain import prefix_gain as gain

    if run.stopping or md.get("error"):
        return
    try:
        g = gain(run.scenario, mode, run.predictor.calibration, best, md.get("prediction"),
                 run.predictor.targets.get(mode.name), run.predictor.halt)
    except Exception as e:  # advice: its failure must not cost the measurement
        g = {"simulated": True, "skipped": True, "why": f"the no-cache simulation failed: {type(e).__name__}: {e}"}
    if g is None:
        return
    md["prefix_cache_gain"] = g
    from kvtui.explore.prefix_gain import describe

    words = describe(mode.name, g)
    label = "predicted by the simulator, not measured" if g.get("basis") == "predicted" else "SIMULATED"
    run.emit(ev.RunNote(mode.name, f"prefix cache ({label}): {words}; the no-cache search took "
                                   f"{g.get('wall_s')} s" if words else
                        f"prefix cache: capacity gained not simulated: {g.get('why')}"))
