"""`kvtui calibrate SNAP… [-o FILE]`: this GPU's speed, fitted on measured steps, as a calibration file.

The step factors of the simulator are refitted (kvtui.explore.refit, the run's own refit) on
every judged step of the snapshots' modes at once, and written with what they were fitted on;
`kvtui estimate`, `kvtui sim serve`, `kvtui run` and `kvtui whatif` take it with
`--calibration FILE`: what-ifs on "my H200" rather than "an H200".
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kvtui.errors import UsageError


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("calibrate", help="fit the simulator to measured snapshots: a calibration file for this GPU",
                       description="Refit the simulator's efficiency factors on the measured steps of one or more "
                                   "snapshots of one GPU, and write a calibration file (SIMULATED what-ifs).")
    p.add_argument("snapshots", nargs="+", metavar="SNAPSHOT")
    p.add_argument("-o", "--out", default="", help="calibration file to write (default: calibration-<gpu>.toml)")
    p.add_argument("--calibration", default=None, metavar="TOML", help="the prior (default: the bundled H200 fit)")
    p.add_argument("--model", default=None, metavar="NAME|CONFIG",
                   help="the model's shape (a bundled name or a config.json) where the snapshot's model path is not "
                        "readable here and its prediction kept no shape")
    p.set_defaults(func=run)
    return p


def gpu_of(path: str, doc: dict[str, Any], sc: Any) -> str:
    """The catalogue name of the GPU a snapshot ran on (the sim's own, else the environment's)."""
    from kvtui.simulator.model import catalog

    env = doc.get("environment") or {}
    names = env.get("gpu_names") or env.get("gpus") or []
    raw = sc.server.gpu if sc.server.engine == "sim" else (names[0] if names else "")
    raw = raw.get("name", "") if isinstance(raw, dict) else str(raw).replace(" (SIMULATED)", "")
    if not raw:
        raise UsageError(f"{path}: environment.gpu_names: no GPU recorded, nothing to calibrate for")
    try:
        return catalog.load_gpu(raw).name
    except UsageError:
        raise UsageError(f"{path}: environment.gpu_names: GPU {raw!r} is not in the simulator's catalogue") from None


def groups_of(path: str, doc: dict[str, Any],
              model_arg: str | None = None) -> tuple[str, list[tuple[Any, Any, Any, list[dict[str, Any]]]]]:
    """(the GPU's catalogue name, [(scenario, mode, target, steps)]) of one snapshot; UsageError naming
    the file and field where it cannot be fitted."""
    from kvtui.errors import ScenarioError
    from kvtui.explore.prediction import Target, model_from_snapshot
    from kvtui.explore.refit import measured_steps
    from kvtui.explore.resume_guard import step_problem
    from kvtui.io.scenario.loader import scenario_from_snapshot

    try:
        sc = scenario_from_snapshot(doc.get("scenario") or {}, source=f"{path}: scenario")
    except ScenarioError as e:
        raise UsageError(e.problems[0] if e.problems else f"{path}: scenario: unreadable") from None
    gpu = gpu_of(path, doc, sc)
    out = []
    for md in doc.get("modes") or []:
        if not isinstance(md, dict):
            continue
        for i, st in enumerate(md.get("steps") or []):
            # figures no run can give (a load of 1e300, a NaN latency) are not fitted
            why = step_problem(st) if isinstance(st, dict) else "not a step object"
            if why:
                raise UsageError(f"{path}: mode {md.get('name')!r}: steps[{i}]: {why}: impossible figures, not fitted")
        steps = measured_steps(md.get("steps") or [])
        if not steps:
            continue
        try:
            mode = sc.mode(str(md.get("name")))
        except (KeyError, ValueError, UsageError):
            raise UsageError(f"{path}: modes[{md.get('name')!r}]: not a mode of the snapshot's scenario") from None
        model = mode.model or sc.server.model
        # the path (or --model), else the shape the prediction kept
        readable = model_from_snapshot(model_arg or model, md.get("prediction"))
        if readable is None:
            raise UsageError(f"{path}: server.model: {model!r} is not readable by the simulator here and the "
                             "snapshot keeps no model shape: --model NAME or a config.json path")
        out.append((sc, mode, Target(gpu, readable), steps))
    if not out:
        raise UsageError(f"{path}: modes[].steps: no judged step to fit")
    return gpu, out


def run(args: argparse.Namespace) -> int:
    from kvtui.explore.refit import MAX_EVALUATIONS, REFIT_PARAMS, WARM_EVALUATIONS, refit_groups
    from kvtui.io.snapshot.file import atomic_write, load_snapshot
    from kvtui.simulator.model.calibration_file import calibration_toml, read_calibration

    if args.out:  # a FIFO, a device, a link: refused before anything is read or fitted
        from kvtui.safeio import check_output

        check_output(args.out, "calibration (--out)")
    prior = read_calibration(args.calibration)
    gpus: set[str] = set()
    groups = []
    x0 = None  # a run's own last refit (of the same prior) is a warm start
    for path in args.snapshots:
        doc = load_snapshot(path)
        from kvtui.report.wellformed import require_facts

        require_facts(doc, path)  # no fit from impossible figures
        gpu, g = groups_of(path, doc, getattr(args, "model", None))
        gpus.add(gpu)
        groups += g
        for md in doc.get("modes") or []:
            p = md.get("prediction") or {}
            last = (p.get("refits") or [None])[-1]
            if isinstance(last, dict) and p.get("prior_calibration") == prior.name:
                mult = last.get("multipliers") or {}
                if all(isinstance(mult.get(q.label), (int, float)) for q in REFIT_PARAMS):
                    x0 = [float(mult[q.label]) for q in REFIT_PARAMS]
    if len(gpus) > 1:
        raise UsageError(f"{', '.join(args.snapshots)}: snapshots of different GPUs ({', '.join(sorted(gpus))}): "
                         "one calibration is for one GPU")
    gpu = gpus.pop()
    from kvtui.simulator.engine.budget import SimulationCut

    try:
        cal, summary = refit_groups(groups, prior, 2 * (WARM_EVALUATIONS if x0 else MAX_EVALUATIONS), x0)
    except SimulationCut as e:  # a step of the snapshots the simulator may not model (kvtui.simulator.engine.budget)
        raise UsageError(f"{', '.join(args.snapshots)}: modes[].steps: {e}") from None
    out = Path(args.out or f"calibration-{gpu.lower()}.toml")
    name = out.stem
    meta = {"name": name, "gpu": gpu, "vllm": prior.vllm, "base": prior.name,
            "source": f"kvtui calibrate on {', '.join(args.snapshots)} ({summary['steps']} steps of "
                      f"{len(groups)} modes)", "simulated": True}
    fit = {k: summary[k] for k in ("multipliers", "rms_log_error_before", "rms_log_error_after", "evaluations")}
    try:
        atomic_write(out, calibration_toml(cal, meta, fit))
    except OSError as e:
        raise UsageError(f"{out}: cannot write: {e.strerror or e}") from None
    mult = ", ".join(f"{k} {v:.3f}" for k, v in summary["multipliers"].items())
    print(f"kvtui: calibration {out} for {gpu} (SIMULATED what-ifs): {mult}; fitted on {summary['steps']} steps, "
          f"rms log error {summary['rms_log_error_before']:.3f} → {summary['rms_log_error_after']:.3f}")
    return 0
