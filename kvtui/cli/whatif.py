"""`kvtui whatif SNAP --set KEY=VALUE…`: a snapshot's run, changed, answered by the simulator in seconds.

The scenario is the snapshot's, with the --set changes applied (the same rules as `kvtui run
--set`); the GPU is the one the snapshot ran on; the calibration is the snapshot's own (the
factors its run refitted on its measured steps, else those its prediction used), or
`--calibration FILE`. Every line says SIMULATED and which calibration answered.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kvtui.errors import UsageError


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("whatif", help="a snapshot's run with changes, predicted by the simulator (seconds)",
                       description="Predict a snapshot's modes with --set changes (workload, SLO, modes, server …) "
                                   "on the simulator, calibrated by the snapshot's own refitted factors. SIMULATED.")
    p.add_argument("snapshot", metavar="SNAPSHOT")
    p.add_argument("--set", action="append", dest="overrides", default=[], metavar="KEY=VALUE",
                   help="change the snapshot's scenario (repeatable), e.g. workload.prompt_tokens=8192")
    p.add_argument("--mode", action="append", dest="modes", metavar="NAME", help="only this mode (repeatable)")
    p.add_argument("--calibration", default=None, metavar="TOML", help="a calibration file instead of the snapshot's")
    p.add_argument("--json", action="store_true", help="the predictions as JSON")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="also write the predictions as JSON to FILE (the table still prints)")
    p.set_defaults(func=run)
    return p


def snapshot_calibration(doc: dict[str, Any], path: str) -> Any:
    """The calibration a snapshot's run ended with: its last refit's factors, else its prediction's."""
    from kvtui.simulator.model.calibration_file import calibration_from_factors, read_calibration

    base = read_calibration(None)
    last: tuple[str, dict[str, Any]] | None = None
    for md in doc.get("modes") or []:
        p = md.get("prediction") or {}
        for r in p.get("refits") or []:
            if isinstance(r.get("factors"), dict):
                last = (f"{path}: {r.get('calibration') or 'refit'}", r["factors"])
        if last is None and isinstance(p.get("factors"), dict):
            last = (f"{path}: {p.get('calibration') or 'prediction'}", p["factors"])
    if last is None:
        return base
    return calibration_from_factors(last[1], base, last[0])


def run(args: argparse.Namespace) -> int:
    from kvtui.cli.calibrate import gpu_of
    from kvtui.errors import ScenarioError
    from kvtui.explore.prediction import Target, model_from_snapshot, predict_mode, shape_from_facts
    from kvtui.io.scenario.loader import scenario_from_snapshot
    from kvtui.io.snapshot.file import load_snapshot
    from kvtui.simulator.model.calibration_file import read_calibration

    doc = load_snapshot(args.snapshot)
    from kvtui.report.wellformed import require_facts

    require_facts(doc, args.snapshot)  # a what-if from impossible figures would show them as an answer
    overrides, notes = list(args.overrides), []
    try:
        sc = scenario_from_snapshot(doc.get("scenario") or {}, source=f"{args.snapshot}: scenario",
                                    overrides=overrides)
    except ScenarioError as e:
        first = e.problems[0] if e.problems else f"{args.snapshot}: scenario: unreadable"
        need = _context_needed(first)
        if need is None or any(o.startswith("server.max_model_len=") for o in overrides):
            raise UsageError(first) from None
        # The workload asked for more context than the run served: a what-if raises it (the
        # model's own limit still holds, checked below), and says so, rather than refuse.
        overrides.append(f"server.max_model_len={need}")
        notes.append(f"server.max_model_len raised to {need} for this workload (--set server.max_model_len=N "
                     "for another)")
        try:
            sc = scenario_from_snapshot(doc.get("scenario") or {}, source=f"{args.snapshot}: scenario",
                                        overrides=overrides)
        except ScenarioError as e2:
            raise UsageError(e2.problems[0] if e2.problems else first) from None
    gpu = gpu_of(args.snapshot, doc, sc)
    if any(o.startswith("server.gpu=") for o in overrides):
        # A what-if on another GPU answers that GPU: a vLLM run's GPU is the environment's, so the
        # --set would otherwise be read and ignored. Said with the GPU the run measured.
        from kvtui.simulator.model import catalog

        try:
            gpu = catalog.load_gpu(str(sc.server.gpu)).name
        except UsageError as e:
            raise UsageError(f"--set server.gpu={sc.server.gpu}: {e}") from None
        try:
            ran = gpu_of(args.snapshot, doc, scenario_from_snapshot(doc.get("scenario") or {}, source=args.snapshot))
        except (ScenarioError, UsageError):
            ran = None
        if ran and ran != gpu:
            did = "simulated" if sc.server.engine == "sim" else "measured"
            notes.append(f"GPU {gpu} (--set server.gpu); the run {did} {'an' if ran[:1] in 'AEFHILMNORSX' else 'a'} "
                         f"{ran}: its calibration carries over")
    cal = read_calibration(args.calibration) if args.calibration else snapshot_calibration(doc, args.snapshot)
    names = args.modes or [m.name for m in sc.modes]
    known = {m.name for m in sc.modes}
    for n in names:
        if n not in known:
            raise UsageError(f"--mode {n}: no such mode in {args.snapshot} (modes: {', '.join(sorted(known))})")
    results: list[tuple[str, dict[str, Any]]] = []
    for n in names:
        mode = sc.mode(n)
        model = mode.model or sc.server.model
        kept = next((m.get("prediction") for m in doc.get("modes") or [] if m.get("name") == n), None)
        readable = model_from_snapshot(model, kept)  # the path, or the shape the prediction kept
        if not readable:
            md: dict[str, Any] = next((m for m in doc.get("modes") or [] if m.get("name") == n), {})
            readable = shape_from_facts(md.get("server") or {}, md.get("settings"))
            if readable:
                notes.append(f"{n}: model {model!r} is not here; the shape its measured startup implies: {readable}")
        target = Target(gpu, readable) if readable else Target(
            gpu, None, f"model {model!r} not readable by the simulator here and the snapshot keeps no shape "
                       "(--set server.model=NAME or a config.json path)")
        if readable and mode.model:
            import dataclasses

            mode = dataclasses.replace(mode, model=readable)  # the mode's own checkpoint, as the shape found
        refused = _past_model_limit(readable, sc.server.max_model_len) or _no_fp8(mode, gpu)
        if not refused and _weight_only(mode, gpu):
            notes.append(f"{n}: fp8 weights weight-only on {gpu} (W8A16, FP8 Marlin): no FP8 tensor cores, "
                         "16-bit matmuls with a dequant")
        results.append((n, {"covered": False, "why": refused} if refused else predict_mode(sc, mode, cal, target)))
    predicted = sum(1 for _, p in results if p.get("covered"))
    payload = {"simulated": True, "calibration": cal.name, "gpu": gpu, "set": overrides, "notes": notes,
               "modes": {n: p for n, p in results}}
    if args.out:
        from pathlib import Path

        from kvtui.io.snapshot.file import atomic_write

        atomic_write(Path(args.out), json.dumps(payload, indent=1) + "\n")
    if args.json:
        json.dump(payload, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0 if predicted else 1
    print(f"What-if on {args.snapshot} ({', '.join(overrides) or 'no change'}): SIMULATED on {gpu}, "
          f"calibration {cal.name}")
    for line in notes:
        print(f"  note: {line}")
    print(f"{'mode':<22} {'knee':>6} {'next fails':>10} {'out tok/s':>10} {'TPOT p95':>9} {'TTFT p95':>9}  limited by")
    for n, p in results:
        if not p.get("covered"):
            print(f"{n:<22} not predicted: {p.get('why')}")
            continue
        at = next((c for c in p["curve"] if c["load"] == p.get("knee")), None) or {}
        nxt = next((c for c in p["curve"] if c["load"] == p.get("first_fail")), None) or {}

        def f(x: Any, d: int = 0) -> str:
            return "—" if x is None else f"{x:,.{d}f}"

        knee = f(p.get("knee")) if p.get("knee") is not None else "none"  # predicted: no load met the SLO
        if p.get("knee") is not None and (p.get("reached_max") or p.get("first_fail") is None):
            knee = f"≥ {knee}"  # no load up to ramp.max failed: a lower bound
        print(f"{n:<22} {knee:>6} {f(p.get('first_fail')):>10} {f(at.get('output_tok_s')):>10} "
              f"{f(at.get('tpot_p95_ms'), 1):>9} {f(at.get('ttft_p95_ms')):>9}  {_limit_words(p, nxt, sc)}")
    if args.out:
        print(f"kvtui: predictions written to {args.out}")
    if not predicted:
        print("kvtui: nothing predicted (every mode above says why)", file=sys.stderr)
        return 1
    return 0


def _limit_words(p: dict[str, Any], nxt: dict[str, Any], sc: Any) -> str:
    """What limited the load above the predicted knee, in the words every other view uses."""
    from kvtui.core.evaluate import LIMIT_WORDS

    if p.get("reached_max") or (p.get("first_fail") is None and p.get("knee") is not None):
        return f"none up to ramp.max {sc.ramp.max:g} (--set ramp.max=N)"
    lim = nxt.get("limited_by")
    return LIMIT_WORDS.get(lim, lim) if lim else "—"


def _no_fp8(mode: Any, gpu: str) -> str | None:
    """Why an fp8 mode is not predicted on this GPU (kvtui init leaves it out there and the
    pre-flight refuses it: the what-if says the same). Below FP8 tensor cores (8.9) fp8 weights
    run weight-only (W8A16) and an fp8 KV cache is stored from Ampere on: those are predicted."""
    from kvtui.preflight.result import FP8_CC, FP8_KV_CC, FP8_WEIGHT_ONLY, QUANT_CC
    from kvtui.simulator.model import catalog

    q = (mode.quantization or "").lower()
    kv8 = str(mode.kv_cache_dtype).startswith("fp8")
    need = QUANT_CC.get(q)
    if not (kv8 or (need and need >= FP8_WEIGHT_ONLY.get(q, FP8_CC))):
        return None
    try:
        spec = catalog.load_gpu(gpu)
    except UsageError:
        return None
    if spec.has_fp8:
        return None
    cc = spec.compute_capability or (8, 0)  # the catalogue's GPUs without FP8 are Ampere
    if need and cc < need:
        why = ("has no FP8 tensor cores" if need >= FP8_CC else "cannot run it")
        return (f"{spec.name} {why} (--quantization {q} needs compute capability {need[0]}.{need[1]}; "
                "kvtui init leaves the mode out there)")
    if kv8 and cc < FP8_KV_CC:
        return f"{spec.name} stores no fp8 KV cache (compute capability 8.0 needed; kvtui init leaves the mode out)"
    return None


def _weight_only(mode: Any, gpu: str) -> bool:
    """fp8 weights that vLLM runs weight-only (W8A16) on this catalogue GPU (no FP8 tensor cores)."""
    from kvtui.simulator.model import catalog

    try:
        spec = catalog.load_gpu(gpu)
    except UsageError:
        return False
    return mode.weights == "fp8" and not spec.has_fp8


def _context_needed(problem: str) -> int | None:
    """The context a refused workload needs, from the loader's max_model_len problem."""
    import re

    m = re.search(r"can reach (\d+) .*> server\.max_model_len", problem)
    return int(m.group(1)) if m else None


def _past_model_limit(model_ref: str | None, max_model_len: int) -> str | None:
    """Why a context past the model's own limit (max_position_embeddings) cannot be predicted."""
    if not model_ref:
        return None
    from kvtui.errors import KvtuiError
    from kvtui.simulator.model import catalog

    try:
        limit = catalog.load_model(model_ref).max_position
    except (KvtuiError, OSError, ValueError, KeyError, TypeError):
        return None  # the prediction says why it cannot read the model
    if limit and max_model_len > limit:
        return f"max_model_len {max_model_len} > the model's limit {limit} (max_position_embeddings)"
    return None
