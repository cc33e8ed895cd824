"""Recalibration as the run measures: refit the simulator's speed on this GPU to the steps so far.

After each measured step the efficiency factors are refitted (kvtui.simulator.model.fit: bounded,
regularised toward the catalogue's prior) so that the offline simulator, run at the measured
loads, gives the measured TPOT (p50, p95), TTFT p50 and output tok/s. Three multipliers are
fitted — weight-read bandwidth, GEMM efficiency, KV-read bandwidth, each over every format —
because they say how fast *this* GPU is against the catalogue's, which carries over to the next
mode (fp8 weights after bf16) where per-format factors would not.

`Predictor` holds the run's current calibration: each mode's prediction is made with it, the
steps refit it, and the snapshot keeps every refit (factors, error before and after), so a
replay shows how the prediction moved.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Callable

from kvtui import clock
from kvtui.explore import prediction as pred
from kvtui.io.scenario.schema import Mode, Scenario
from kvtui.simulator.model import fit
from kvtui.simulator.model.calibration_file import factors_dict
from kvtui.simulator.model.roofline import Calibration

REFIT_PARAMS = [
    fit.FitParam("weights_bw_eff", "*", 0.4, 2.0, 1.0),
    fit.FitParam("gemm_eff", "*", 0.4, 2.0, 1.0),
    fit.FitParam("kv_bw_eff", "*", 0.4, 2.0, 1.0),
]
# What a step's residuals weigh: TPOT is what the step time decides; TTFT is noisy (waves of
# prefills), so it pulls less; tok/s ties the two.
FIGURE_WEIGHTS = {("tpot_ms", "p50"): 1.0, ("tpot_ms", "p95"): 1.0, ("ttft_ms", "p50"): 0.3,
                  ("output_tok_s", None): 1.0}
MAX_EVALUATIONS = 14  # each evaluation simulates every measured step: a few seconds at most
WARM_EVALUATIONS = 6  # from the last refit's optimum: one step of the solver, and its check


def _figure(step: dict[str, Any], key: str, pct: str | None) -> float | None:
    v = step.get(key) if pct is None else (step.get(key) or {}).get(pct)
    return None if v is None else float(v)


def measured_steps(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps a refit learns from: judged search or confirm steps of a server that answered."""
    return [s for s in steps if s.get("why", "search") in ("search", "confirm") and s.get("passed") is not None
            and not s.get("client_limited") and (s.get("requests") or 0) > 0]


Group = tuple[Scenario, Mode, pred.Target, list[dict[str, Any]]]


def refit(scenario: Scenario, mode: Mode, target: pred.Target, base: Calibration,
          steps: list[dict[str, Any]], x0: list[float] | None = None,
          halt: Callable[[], bool] | None = None) -> tuple[Calibration, dict[str, Any]]:
    """(the refitted calibration, a summary for the snapshot) from one mode's measured `steps`.
    x0: the last refit's multipliers (a warm start needs fewer evaluations)."""
    cal, summary = refit_groups([(scenario, mode, target, steps)], base,
                                MAX_EVALUATIONS if x0 is None else WARM_EVALUATIONS, x0, halt)
    cal.name = f"{base.name} refitted on {len(steps)} step{'s' if len(steps) != 1 else ''} of this run"
    summary["calibration"] = cal.name
    summary["after_step"] = len(steps)
    summary["loads"] = [float(s["load"]) for s in steps]
    return cal, summary


def refit_groups(groups: list[Group], base: Calibration, max_evaluations: int = 2 * MAX_EVALUATIONS,
                 x0: list[float] | None = None,
                 halt: Callable[[], bool] | None = None) -> tuple[Calibration, dict[str, Any]]:
    """One fit over several modes' steps (`kvtui calibrate`: every mode of every snapshot at once).
    A step the simulator cannot model to its end (the run's stop `halt`, a bound) raises
    SimulationCut (kvtui.simulator.engine.budget)."""
    t0 = clock.monotonic()
    prepared = [(pred._sim_scenario(sc, target), mode, sc.ramp.load == "concurrency", steps)
                for sc, mode, target, steps in groups]
    n_steps = sum(len(g[3]) for g in groups)

    def residuals(x: list[float]) -> list[float]:
        cal = fit.apply(base, REFIT_PARAMS, x)
        out: list[float] = []
        for sc, mode, closed, steps in prepared:
            sim = pred.Simulator(sc, mode, cal, closed, halt)
            for meas in steps:
                got = sim.step(float(meas["load"]))
                for (key, pct), w in FIGURE_WEIGHTS.items():
                    e = fit.log_error(_figure(got, key, pct), _figure(meas, key, pct))
                    out.append(0.0 if e is None else w * max(-3.0, min(3.0, e)))
        return out + fit.prior_residuals(x, REFIT_PARAMS)

    res = fit.solve(residuals, REFIT_PARAMS, x0 or [1.0] * len(REFIT_PARAMS), max_evaluations=max_evaluations)
    # "before" is the prior's error (a warm start's own starting point is the last refit's optimum)
    at_prior = res.cost_at_start if x0 is None else 0.5 * sum(v * v for v in residuals([1.0] * len(REFIT_PARAMS)))
    cal = fit.apply(base, REFIT_PARAMS, res.x)
    cal.name = f"{base.name} refitted on {n_steps} steps"
    rms = lambda c: math.sqrt(2 * c / max(1, n_steps * len(FIGURE_WEIGHTS)))  # noqa: E731
    summary = {"steps": n_steps,
               "multipliers": {p.label: round(v, 4) for p, v in zip(REFIT_PARAMS, res.x)},
               "rms_log_error_before": round(rms(at_prior), 4), "rms_log_error_after": round(rms(res.cost), 4),
               "evaluations": res.evaluations, "factors": factors_dict(cal), "calibration": cal.name,
               "wall_s": round(clock.monotonic() - t0, 2)}
    return cal, summary


class Predictor:
    """The run's prediction state: the calibration now, per mode its target and prediction.

    A refit costs CPU seconds (it simulates every measured step a dozen times) while the GPU would
    idle: where the step came out as predicted, it runs in a thread beside the next step and is
    joined before the next refit, the next mode's prediction and the mode's end; only where a verdict
    went against the prediction does the search wait for it (its new knee saves a whole step)."""

    def __init__(self, calibration: Calibration, refit_steps: bool):
        self.prior = calibration
        self.calibration = calibration
        self.refit_steps = refit_steps
        self.targets: dict[str, pred.Target] = {}
        self.x: list[float] | None = None  # the last refit's multipliers
        self._pending: threading.Thread | None = None
        self.halt: Callable[[], bool] | None = None  # the run's stop: simulated steps look at it (sim.budget)

    def join(self) -> None:
        t, self._pending = self._pending, None
        if t is not None:
            t.join()

    def predict(self, scenario: Scenario, mode: Mode, nvml: Any = None) -> dict[str, Any]:
        self.join()  # the last mode's refit: this mode is predicted at this GPU's measured speed
        kw = {"nvml": nvml} if nvml is not None else {}
        target = pred.resolve_target(scenario, mode, **kw)
        self.targets[mode.name] = target
        out = pred.predict_mode(scenario, mode, self.calibration, target, halt=self.halt)
        out["prior_calibration"] = self.prior.name
        out["refits"] = []
        return out

    def _refit(self, scenario: Scenario, mode: Mode, md: dict[str, Any], target: pred.Target,
               steps: list[dict[str, Any]], again: bool) -> dict[str, Any]:
        p = md["prediction"]
        try:
            # From the prior each time (a fit over every step so far, not a drift of drifts), warm-started.
            cal, summary = refit(scenario, mode, target, self.prior, steps, self.x, self.halt)
        except Exception as e:  # advice: a failed refit keeps the calibration it had
            summary = {"after_step": len(steps), "error": f"{type(e).__name__}: {e}"}
            p.setdefault("refits", []).append(summary)
            return summary
        self.x = [summary["multipliers"][q.label] for q in REFIT_PARAMS]
        self.calibration = cal
        if again:
            re = pred.predict_mode(scenario, mode, cal, target, halt=self.halt)
            summary["knee"] = re.get("knee")
            summary["curve"] = re.get("curve")
        p.setdefault("refits", []).append(summary)
        return summary

    def after_step(self, scenario: Scenario, mode: Mode, md: dict[str, Any]) -> dict[str, Any] | None:
        """Refit on the mode's steps so far. Where a verdict went against the prediction: at once, with
        a new knee estimate, returned (the search's hint); else in the background (None)."""
        self.join()
        p = md.get("prediction") or {}
        target = self.targets.get(mode.name)
        if not self.refit_steps or not p.get("covered") or target is None:
            return None
        steps = measured_steps(md.get("steps") or [])
        if not steps:
            return None
        last = steps[-1]
        off = (last.get("predicted") or {}).get("passed") is not None and \
            bool(last["predicted"]["passed"]) != bool(last["passed"])
        if off:
            return self._refit(scenario, mode, md, target, steps, again=True)
        self._pending = threading.Thread(target=self._refit, args=(scenario, mode, md, target, steps, False),
                                         name="kvtui-refit", daemon=True)
        self._pending.start()
        return None
