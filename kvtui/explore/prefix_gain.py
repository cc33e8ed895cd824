"""What the prefix cache gives a mode: its knee with the cache against its knee without it (SIMULATED).

With prefix caching on and a workload whose prompts share blocks (a shared prefix, a dataset, a
trace's hash_ids or sessions), the cache holds the running requests and the cached prefixes both,
so a mode with more KV room (fp8 KV) keeps more prefixes and hits more. What that is worth in
capacity is the knee without the cache, which no run measures: the offline simulator finds it with
the prediction's own search (kvtui.explore.prediction) on the same scenario with
`enable_prefix_caching = false`, same seed.

- On the simulator (--fast and the live simulator) the mode's measured knee is simulated too: the
  gain is that knee minus the simulated no-cache knee (basis "simulated").
- On a real server the no-cache knee is not measured: both knees are the simulator's, with the
  cache and without, at the run's calibration (basis "predicted"), never the measured knee
  against a predicted one.

Bounded: one extra predicted search per mode (two on a real server); where the mode's own
prediction took longer than MAX_PREDICTION_S it is skipped and the entry says why.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from kvtui import clock
from kvtui.io.scenario.schema import Mode, Scenario

MAX_PREDICTION_S = 60.0  # a mode's prediction slower than this: no extra search for the gain


def no_cache(scenario: Scenario) -> Scenario:
    sc = copy.deepcopy(scenario)
    sc.server.enable_prefix_caching = False
    return sc


def shares_prefixes(scenario: Scenario, mode: Mode) -> bool:
    """Do this scenario's requests share prompt blocks (what a prefix cache can hit)?"""
    from kvtui.errors import KvtuiError
    from kvtui.simulator.engine.fastrun import OfflineServer, SimConfigError

    try:
        return OfflineServer(no_cache(scenario), mode, 0).shares_prefixes
    except (SimConfigError, KvtuiError, OSError, ValueError, KeyError, TypeError):
        return False


def prefix_gain(scenario: Scenario, mode: Mode, calibration: Any, knee: float | None,
                prediction: dict[str, Any] | None, target: Any = None,
                halt: Callable[[], bool] | None = None) -> dict[str, Any] | None:
    """The mode's `prefix_cache_gain` entry, or None where there is nothing to name: prefix caching
    off, no prompt sharing, no knee, or a load the prediction does not search (trace replay)."""
    from kvtui.explore import prediction as pred

    if scenario.server.enable_prefix_caching is False or knee is None:
        return None
    if scenario.ramp.load not in ("concurrency", "rate"):
        return None
    if not shares_prefixes(scenario, mode):
        return None
    simulated = scenario.server.engine == "sim"
    basis = "simulated" if simulated else "predicted"
    took = (prediction or {}).get("wall_s")
    if isinstance(took, (int, float)) and took > MAX_PREDICTION_S:
        return {"simulated": True, "basis": basis, "skipped": True,
                "why": f"the no-cache simulation would take about {took:.0f} s (over {MAX_PREDICTION_S:.0f} s)"}
    t0 = clock.monotonic()
    target = target or pred.resolve_target(scenario, mode)
    without = pred.predict_mode(no_cache(scenario), mode, calibration, target, halt=halt)
    if not without.get("covered"):
        return {"simulated": True, "basis": basis, "skipped": True, "why": str(without.get("why") or "not covered")}
    if simulated:
        with_cache: float | None = knee
    else:  # the measured knee against a predicted one would mix two sources: both predicted
        again = pred.predict_mode(scenario, mode, calibration, target, halt=halt)
        with_cache = again.get("knee") if again.get("covered") else None
        if with_cache is None:
            return {"simulated": True, "basis": basis, "skipped": True,
                    "why": "the simulator predicts no passing load with the cache"}
    k0 = without.get("knee")
    assert with_cache is not None
    gain = float(with_cache) - float(k0 or 0)
    return {"simulated": True, "basis": basis, "knee": with_cache, "knee_no_cache": k0,
            "no_cache_lower_bound": bool(without.get("reached_max")),
            "gain": round(gain, 3), "gain_pct": round(gain / float(k0), 4) if k0 else None,
            "wall_s": round(clock.monotonic() - t0, 2)}


def describe(name: str, g: Any) -> str | None:
    """One mode's words for the caveat: "bf16 20 vs 14 without (+43%)"."""
    if not g or g.get("skipped") or g.get("knee") is None:
        return None
    k0 = g.get("knee_no_cache")
    if k0 is None:
        return f"{name} {g['knee']:g} vs none passing without"
    floor = "≥ " if g.get("no_cache_lower_bound") else ""
    pct = f" ({g['gain_pct']:+.0%})" if g.get("gain_pct") is not None else ""
    return f"{name} {g['knee']:g} vs {floor}{k0:g} without{pct}"
