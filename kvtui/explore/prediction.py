"""A mode's prediction before its first step: the offline simulator's knee and curves.

For every engine (sim, vllm, external): the scenario's workload and SLO, the GPU (the sim's
catalogue name, else NVML's first visible GPU matched to the catalogue), the model's shape from
its config.json (dense, MoE, MLA, with its quantization) and a calibration (the catalogue's fit,
a `kvtui calibrate` file, or the factors refitted on this run's steps). The simulated steps are
judged by the run's own SLO evaluation, so "predicted pass" means what "pass" means.

What comes out (the snapshot's modes[].prediction, plain data):

    covered      False (with `why`) where the GPU or the model is not in the catalogue:
                 the search then starts from the KV-bound guess, as without a prediction
    knee         the highest predicted load that passes (None: none does), first_fail above it
    curve[]      per simulated load: passed, TTFT/TPOT p95, output tok/s, what limited it and the
                 figure that decides the verdict (the SLO target closest to or past its limit)
    gpu, model, calibration (name), factors, sim_version, simulated: True, wall_s
"""

from __future__ import annotations

import copy
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kvtui import clock
from kvtui.core.evaluate import StepContext, evaluate_step
from kvtui.core.protocol import ramp_for
from kvtui.core.search import FastSearch, resolution
from kvtui.errors import KvtuiError
from kvtui.io.scenario.schema import Mode, Scenario
from kvtui.simulator.model.roofline import Calibration

PREDICT_SALT = 0x5EED  # fixed: a prediction is the same every time it is made


@dataclass
class Target:
    """Where the prediction is for: a catalogue GPU and a model the simulator can read."""

    gpu: str | None
    model: str | None
    why: str = ""  # why not covered


def _nvml_gpu() -> tuple[str | None, str]:
    from kvtui.runtime.telemetry.nvml import gpu_inventory

    inv = gpu_inventory()
    if not inv.available or not inv.gpus:
        return None, inv.reason or "no GPU visible"
    return inv.gpus[0]["name"], ""


def resolve_target(scenario: Scenario, mode: Mode, nvml: Callable[[], tuple[str | None, str]] = _nvml_gpu) -> Target:
    from kvtui.simulator.model import catalog

    s = scenario.server
    model_ref = mode.model or s.model
    if s.engine == "sim":
        gpu_name: str | None = s.gpu
    else:
        gpu_name, why = nvml()
        if gpu_name is None:
            return Target(None, model_ref, f"no GPU to predict for ({why.removeprefix('no GPU telemetry: ')})")
    try:
        gpu = catalog.load_gpu(gpu_name or "")
    except KvtuiError:
        return Target(None, model_ref, f"GPU {gpu_name!r} is not in the simulator's catalogue")
    if not model_ref:
        return Target(gpu.name, None, "no model named in the scenario")
    try:
        catalog.load_model(model_ref)
    except (KvtuiError, OSError, ValueError, KeyError, TypeError) as e:
        return Target(gpu.name, None, f"model {model_ref!r} not readable by the simulator: {str(e)[:120]}")
    return Target(gpu.name, model_ref)


def _sim_scenario(scenario: Scenario, target: Target) -> Scenario:
    sc = copy.deepcopy(scenario)
    sc.server.gpu = target.gpu or sc.server.gpu
    sc.server.model = target.model or sc.server.model
    return sc


def deciding_check(step: dict[str, Any]) -> dict[str, Any] | None:
    """The SLO check that decides the verdict: the first failing one, else the one nearest its limit."""
    checks = [c for c in step.get("checks") or [] if c.get("value") is not None and c.get("limit")]
    if not checks:
        return None
    failing = [c for c in checks if c.get("ok") is False]
    pool = failing or checks
    c = max(pool, key=lambda c: float(c["value"]) / float(c["limit"]) if c["target"] != "goodput"
            else float(c["limit"]) / max(float(c["value"]), 1e-9))
    return {"target": c["target"], "value": c["value"], "limit": c["limit"]}


def curve_point(step: dict[str, Any]) -> dict[str, Any]:
    def p95(k: str) -> float | None:
        v = (step.get(k) or {}).get("p95")
        return None if v is None else round(float(v), 2)

    return {"load": step["load"], "passed": step["passed"], "ttft_p95_ms": p95("ttft_ms"),
            "tpot_p95_ms": p95("tpot_ms"), "output_tok_s": round(float(step.get("output_tok_s") or 0.0), 1),
            "limited_by": step.get("limited_by") or "", "deciding": deciding_check(step)}


class Simulator:
    """One mode on the offline simulator, stepped load after load (the prediction's measurer)."""

    def __init__(self, scenario: Scenario, mode: Mode, calibration: Calibration, closed: bool,
                 halt: Callable[[], bool] | None = None):
        from kvtui.simulator.engine.fastrun import OfflineServer

        self.scenario, self.mode, self.closed = scenario, mode, closed
        # halt: the run's stop, which each simulated step looks at (kvtui.simulator.engine.budget)
        self.server = OfflineServer(scenario, mode, PREDICT_SALT, calibration=calibration, halt=halt)
        self.counter = 0
        self.index = 0
        self._steps: list[dict[str, Any]] = []  # the loads predicted so far (their E2E spreads the next)

    def step(self, load: float) -> dict[str, Any]:
        from kvtui.core.stats import PCTS, min_samples_for
        from kvtui.simulator.engine.fastrun import step_metrics

        sc = self.scenario
        need = max([min_samples_for(PCTS[p]) for _, p, _ in sc.slo.targets()] + [sc.ramp.min_samples])
        continuous = self.closed  # an open loop's rate steps: each from an idle server, full tail
        if continuous:
            res = self._steady_state(load, need)
        else:
            res = self.server.step(self.mode.name, self.index, load, self.closed, self.counter, need)
            self.counter += len(res.records) + 1
        if res.ended:  # part of a step is no step: nothing is predicted from it
            from kvtui.simulator.engine.budget import SimulationCut, refusal

            raise SimulationCut(refusal(res.ended, load) or "the run is stopping")
        self.index += 1
        # Judged as the measured step will be (kvtui.explore.offline_step): a continuous step whose SLO
        # needs no whole requests ends at its window's first tokens, and its figures are the window's
        # own, the requests carried on into the next step included; read as complete requests only,
        # those are missing and a step with enough samples reads as undecided.
        from kvtui.core.protocol import tail_for

        rule = tail_for(sc) if continuous else "full"
        window_stats = rule != "full"
        ctx = StepContext(load=load, closed=self.closed, t_window_start=res.window_start or res.t_start,
                          t_window_end=res.window_end or res.t_end, metrics=step_metrics(res),
                          max_num_seqs=self.server.facts.max_num_seqs, window_stats=window_stats,
                          t_end=res.t_end if window_stats else None, births=rule == "births",
                          t_births_end=res.t_births_end)
        step = evaluate_step(list(res.records), ctx, sc.slo)
        step["load"] = load
        self._steps.append(step)
        return step

    def _steady_state(self, load: float, need: int) -> Any:
        """The continuous protocol measures a load's steady state (docs/PROTOCOL.md), so its prediction
        does too: each load from an idle server, its first sends spread over one request's duration
        (from the loads predicted so far; for the first one, a classic step's E2E), the full window,
        no early stop."""
        from kvtui.core.protocol import e2e_estimate_s, mean_length, tail_for

        sc = self.scenario
        e2e = e2e_estimate_s(self._steps, None, load, mean_length(sc.workload.output_tokens))
        if e2e is None:
            first = self.server.step(self.mode.name, self.index, load, True, self.counter, need)
            self.counter += len(first.records) + 1
            if first.ended:
                return first  # cut: the caller says why
            ends = sorted(r.e2e for r in first.records if r.ok and r.e2e is not None)
            e2e = ends[len(ends) // 2] if ends else None
        ramp = ramp_for(load, None, True, e2e, sc.ramp.warmup_s)
        plan = self.server.plan(load, need, "a predicted load's steady state", tail_for(sc), None, ramp)
        res, _info, self.counter = self.server.continuous_step(self.mode.name, self.index, self.counter, plan)
        return res


def model_config_of(model_ref: str | None) -> dict[str, Any] | None:
    """The config.json a local model path names (file or folder), as a dict; None for a bundled name,
    a Hugging Face id or anything unreadable. Capped: a config.json is a few kB."""
    if not model_ref:
        return None
    path = Path(model_ref)
    if path.is_dir():
        path = path / "config.json"
    try:
        if not path.is_file() or path.stat().st_size > 1_000_000:
            return None
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def model_from_snapshot(model_ref: str | None, prediction: dict[str, Any] | None) -> str | None:
    """A model reference the simulator can read here: `model_ref` itself when it reads, else the
    `model_config` the snapshot's prediction kept, written once to a private temporary folder
    named after the model (a run made on a GPU box names its own local path, absent here)."""
    from kvtui.simulator.model import catalog

    if model_ref:
        try:
            catalog.load_model(model_ref)
            return model_ref
        except (KvtuiError, OSError, ValueError, KeyError, TypeError):
            pass
    cfg = (prediction or {}).get("model_config")
    if not isinstance(cfg, dict):
        return None
    name = Path(str(model_ref or "model")).name or "model"
    folder = Path(tempfile.mkdtemp(prefix="kvtui-shape-")) / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    try:
        catalog.load_model(str(folder))
    except (KvtuiError, OSError, ValueError, KeyError, TypeError):
        return None
    return str(folder)


def predict_mode(scenario: Scenario, mode: Mode, calibration: Calibration, target: Target | None = None,
                 nvml: Callable[[], tuple[str | None, str]] = _nvml_gpu,
                 halt: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The prediction for one mode (see the module's docstring). Never raises for a shape it cannot
    simulate: it says so (covered False) and the search falls back to the KV-bound guess."""
    from kvtui.simulator.engine.budget import SimulationCut
    from kvtui.simulator.engine.fastrun import SimConfigError
    from kvtui.simulator.engine.server import SIM_VERSION

    t0 = clock.monotonic()
    target = target or resolve_target(scenario, mode, nvml)
    base: dict[str, Any] = {"simulated": True, "sim_version": SIM_VERSION, "calibration": calibration.name,
                            "gpu": target.gpu, "model": target.model}
    shape = model_config_of(target.model)
    if shape is not None:  # so `kvtui whatif` / `calibrate` can rebuild the shape where the path is gone
        base["model_config"] = shape
    if target.why:
        return {**base, "covered": False, "why": target.why, "knee": None, "curve": []}
    closed = scenario.ramp.load == "concurrency"
    sc = _sim_scenario(scenario, target)
    try:
        sim = Simulator(sc, mode, calibration, closed, halt)
    except (SimConfigError, KvtuiError) as e:
        return {**base, "covered": False, "why": f"the simulator cannot start this mode: {e}", "knee": None,
                "curve": []}
    try:
        return _predicted(base, sc, sim, closed, t0, calibration)
    except SimulationCut as e:
        return {**base, "covered": False, "why": f"the simulator cannot model this mode's steps: {e}", "knee": None,
                "curve": []}


def _predicted(base: dict[str, Any], sc: Scenario, sim: Simulator, closed: bool, t0: float,
               calibration: Calibration) -> dict[str, Any]:
    """predict_mode's search on the simulator (SimulationCut where a step could not be simulated)."""
    from kvtui.simulator.model.calibration_file import factors_dict

    kv = sim.server.facts.kv_bound_concurrency(int(_mean_tokens(sc))) if closed else None
    # The predicted search: kvtui's fast search on the simulator, without confirmation (the model
    # is its own repeat), at the scenario's resolution.
    search = FastSearch(sc.ramp, closed, confirm=False, guess=kv)
    seen: dict[float, dict[str, Any]] = {}
    while (load := search.next()) is not None:
        step = sim.step(load)
        seen[load] = curve_point(step)
        search.record(load, step["passed"])
    res = search.result()
    knee, fail = res.best, res.first_fail
    # The curve around the knee as well: half of it and the next load after first_fail.
    extra = []
    if knee:
        extra.append(search._q(max(sc.ramp.start, knee / 2)))
    if fail is not None and fail < sc.ramp.max:
        extra.append(min(float(sc.ramp.max), search._q(fail + resolution(sc.ramp, knee or fail, closed))))
    for load in extra:
        if load not in seen:
            seen[load] = curve_point(sim.step(load))
    curve = [seen[x] for x in sorted(seen)]
    return {**base, "covered": True, "knee": knee, "first_fail": fail, "reached_max": res.reached_max,
            "resolution": resolution(sc.ramp, knee or sc.ramp.start, closed), "kv_bound_guess": kv,
            "curve": curve, "factors": factors_dict(calibration), "wall_s": round(clock.monotonic() - t0, 2)}


def _mean_tokens(scenario: Scenario) -> float:
    from kvtui.io.scenario import lengths

    return lengths.mean_request_tokens(scenario.workload)


def predicted_at(prediction: dict[str, Any] | None, load: float) -> dict[str, Any] | None:
    """What the prediction says about `load`: its simulated point when it has one, else the nearest
    points' figures interpolated and the verdict the knee implies (pass up to it)."""
    if not prediction or not prediction.get("covered") or not prediction.get("curve"):
        return None
    curve = prediction["curve"]
    for p in curve:
        if p["load"] == load:
            return dict(p)
    knee = prediction.get("knee")
    below = [p for p in curve if p["load"] < load]
    above = [p for p in curve if p["load"] > load]
    out: dict[str, Any] = {"load": load, "passed": knee is not None and load <= knee, "interpolated": True}
    for k in ("ttft_p95_ms", "tpot_p95_ms", "output_tok_s"):
        a = below[-1] if below else None
        b = above[0] if above else None
        if a and b and a.get(k) is not None and b.get(k) is not None:
            w = (load - a["load"]) / (b["load"] - a["load"])
            out[k] = round(a[k] + w * (b[k] - a[k]), 2)
        else:
            src = a or b
            out[k] = src.get(k) if src else None
    return out


def prediction_error(prediction: dict[str, Any] | None, steps: list[dict[str, Any]],
                     best: float | None) -> dict[str, Any] | None:
    """After the mode: how far the prediction was from what was measured (knee, verdicts, figures)."""
    if not prediction or not prediction.get("covered"):
        return None
    agree = total = 0
    errs: dict[str, list[float]] = {"ttft_p95_ms": [], "tpot_p95_ms": [], "output_tok_s": []}
    for s in steps:
        if s.get("why", "search") not in ("search", "confirm") or s.get("passed") is None:
            continue
        p = s.get("predicted") or predicted_at(prediction, s["load"])
        if not p:
            continue
        total += 1
        agree += int(bool(p.get("passed")) == bool(s["passed"]))
        meas = {"ttft_p95_ms": (s.get("ttft_ms") or {}).get("p95"), "tpot_p95_ms": (s.get("tpot_ms") or {}).get("p95"),
                "output_tok_s": s.get("output_tok_s")}
        for k, m in meas.items():
            pv = p.get(k)
            if pv is not None and m and m > 0 and pv == pv and m != float("inf"):
                errs[k].append((float(pv) - float(m)) / float(m))
    knee = prediction.get("knee")
    out: dict[str, Any] = {"knee_predicted": knee, "knee_measured": best,
                           "knee_error": (None if knee is None or best is None else round(knee - best, 3)),
                           "verdicts_agreed": agree, "verdicts": total}
    for k, v in errs.items():
        if v:
            out[f"{k}_error_mean"] = round(sum(v) / len(v), 4)
            worst: float = max(v, key=lambda e: abs(e))
            out[f"{k}_error_max"] = round(worst, 4)
    return out


def shape_from_facts(server: dict[str, Any], settings: dict[str, Any] | None = None) -> str | None:
    """The bundled model shape a measured mode's own startup facts imply, when its model is not
    readable here and the snapshot kept no shape: the one whose KV bytes per token match the
    measured pool (KV GiB / KV tokens) and whose weights match the measured weights, each within
    3 %. An older snapshot made on a GPU box names its own local path ('/tmp/model8b'); its
    vLLM said 15.0 GiB of weights and 131,072 bytes a token, which is Llama-3.1-8B's shape."""
    from kvtui.simulator.model import catalog
    from kvtui.simulator.model.roofline import weight_bytes

    kv_gib, kv_tok, w_gib = server.get("kv_cache_gib"), server.get("kv_cache_tokens"), server.get("weights_gib")
    if not (isinstance(kv_gib, (int, float)) and isinstance(kv_tok, (int, float)) and kv_tok > 0
            and isinstance(w_gib, (int, float)) and w_gib > 0):
        return None
    kv_bytes = 1 if str((settings or {}).get("kv_cache_dtype") or server.get("kv_cache_dtype") or "").startswith(
        "fp8") else 2
    per_token = kv_gib * (1 << 30) / kv_tok
    quant = str((settings or {}).get("quantization") or "")
    fmt = "fp8" if quant == "fp8" else "bf16"
    found = []
    for name in catalog.bundled_models():
        try:
            spec = catalog.load_model(name)
        except (KvtuiError, OSError, ValueError, KeyError, TypeError):
            continue
        f = "int4" if spec.quant_method else fmt
        w = weight_bytes(spec, f) / (1 << 30)
        kv = spec.kv_bytes_per_token(kv_bytes)
        if abs(kv - per_token) <= 0.03 * per_token and abs(w - w_gib) <= 0.03 * w_gib:
            found.append(name)
    return found[0] if len(found) == 1 else None
