"""The run's snapshot document: its head (scenario, environment, run), each mode's entry, its close.

Pure construction of the dicts the snapshot schema (kvtui.io.snapshot.schema, version SCHEMA) holds; the
controller fills them as the run goes and the SnapshotWriter journals them.
"""

from __future__ import annotations

import dataclasses
import platform
from typing import Any

from kvtui import __version__, clock
from kvtui.io.scenario.schema import Mode, Scenario
from kvtui.io.snapshot.schema import SCHEMA
from kvtui.secrets import redact_args, redact_env


def environment(scenario: Scenario) -> dict[str, Any]:
    """Where the run is measured: host, software, GPUs (a simulated one says so)."""
    from kvtui.runtime.telemetry.nvml import gpu_inventory

    env: dict[str, Any] = {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "kvtui_version": __version__,
        "engine": scenario.server.engine,
        "simulated": scenario.server.engine == "sim",
        "started_at": clock.time(),
        "t0_epoch": clock.time(),
    }
    if scenario.server.engine == "sim":
        env["gpu_names"] = [f"{scenario.server.gpu} (SIMULATED)"]
        env["gpu_count"] = scenario.server.tensor_parallel_size
        if scenario.server.devices > 1:  # a box of simulated GPUs: which of them this run had (its lane's)
            from kvtui.explore.devices import sim_device_ids

            ids = sim_device_ids(scenario.server.devices)
            env["gpu_indices"], env["gpu_uuids"] = ids, [f"SIM-GPU-{i}" for i in ids]
    else:
        inv = gpu_inventory()
        env["gpu_names"] = [g["name"] for g in inv.gpus] or ["no GPU seen"]
        # Which physical devices: modes run in parallel on one host's GPUs, or on two hosts, and
        # joined by --resume carry this in their mode's "ran_on".
        env["gpu_uuids"] = [g["uuid"] for g in inv.gpus]
        env["gpu_indices"] = [g["index"] for g in inv.gpus]
        env["gpu_memory_gib"] = [round(g["mem_total_gib"], 2) for g in inv.gpus]
        env["driver"] = inv.driver_version
        env["cuda"] = inv.cuda_version
        env["gpu_count"] = len(inv.gpus)
        if not inv.available:
            env["gpu_telemetry"] = inv.reason
    return env


def new_doc(scenario: Scenario, salt: int, fast: bool, modes: list[str], t0: float) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "kvtui_version": __version__,
        "scenario": scenario.to_dict(),
        "environment": environment(scenario),
        "run": {"salt": f"{salt:08x}", "fast": fast, "modes_requested": modes, "t0_monotonic": t0},
        "modes": [],
    }
    if scenario.workload.trace:  # read when the scenario was checked (cached): before any server starts
        from kvtui.io.scenario.trace import TraceSpec, summary

        doc["trace"] = summary(TraceSpec.of(scenario.workload), scenario.seed)
    return doc


def ran_on(doc: dict[str, Any]) -> dict[str, Any]:
    """The device a mode runs on, from the run's environment."""
    env = doc.get("environment") or {}
    return {k: env[k] for k in ("host", "gpu_names", "gpu_uuids", "gpu_indices") if k in env}


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """A nested dict as dotted keys ({"a": {"b": 1}} → {"a.b": 1})."""
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    else:
        out[prefix] = d
    return out


def setting_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two modes' settings, key by key ("dtype 'float16' → 'bfloat16'");
    keys only one side has (snapshots a kvtui version apart) are not a change."""
    fa, fb = flatten(old), flatten(new)
    return [f"{k} {fa[k]!r} → {fb[k]!r}" for k in sorted(set(fa) & set(fb)) if k != "name" and fa[k] != fb[k]]


def mode_settings(scenario: Scenario, mode: Mode) -> dict[str, Any]:
    """A mode's settings as the snapshot keeps them: secrets in its arguments and env redacted."""
    md = dataclasses.asdict(mode)
    md["extra_args"] = redact_args(md["extra_args"])
    md["env"] = redact_env(md["env"], scenario.server.secret_env)
    return md


def mode_doc(scenario: Scenario, mode: Mode, index: int, doc: dict[str, Any]) -> dict[str, Any]:
    """A mode's fresh entry, before its engine starts."""
    return {
        "name": mode.name,
        "index": index,
        "settings": mode_settings(scenario, mode),
        "engine": scenario.server.engine,
        "simulated": scenario.server.engine == "sim",
        "server": {},
        "engine_info": {},
        "best_concurrency": None,
        "search": {},
        "steps": [],
        "series": [],
        "complete": False,
        "started_at": clock.time(),
        "ran_on": ran_on(doc),
    }


def crashed(reason: str) -> dict[str, str]:
    return {"kind": "crashed", "message": f"engine died during the run: {reason}"}


def close_doc(doc: dict[str, Any], scenario: Scenario, *, finished: bool, stop_reason: str | None,
              records_written: int, wall_s: float) -> None:
    """The run's last word: modes in the scenario's order, the comparison, how the run ended."""
    from kvtui.explore.compare import compare_modes

    # The scenario's order (baseline first), also for modes kept from a resumed snapshot.
    order = {m.name: i for i, m in enumerate(scenario.modes)}
    doc["modes"].sort(key=lambda m: order.get(m.get("name"), len(order)))
    # the scenario as the document holds it (new_doc's to_dict): another to_dict of 10,000 modes took seconds
    sdict = doc.get("scenario")
    doc["comparison"] = compare_modes(doc, sdict if isinstance(sdict, dict) and sdict.get("modes") else scenario)
    doc["run"]["finished"] = finished
    doc["run"]["stop_reason"] = stop_reason
    doc["run"].update(run_outcome(doc, scenario, finished))
    doc["run"]["records_written"] = records_written
    doc["run"]["wall_s"] = wall_s


def run_outcome(doc: dict[str, Any], scenario: Scenario, finished: bool) -> dict[str, Any]:
    """How the run ended, in the snapshot's words: "finished", or "stopped" with the modes it did
    not run and those it cut short, so a partial run never reads as a finished one."""
    ran = {m.get("name"): m for m in doc.get("modes") or [] if isinstance(m, dict)}
    requested = set((doc.get("run") or {}).get("modes_requested") or [])  # a set: 10,000 modes were 2.8 s
    asked = [m.name for m in scenario.modes if not requested or m.name in requested]
    not_run = [n for n in asked if n not in ran]
    cut = [n for n, m in ran.items() if not m.get("complete", True) and not m.get("error")]
    if finished and not not_run and not cut:
        return {"outcome": "finished", "modes_not_run": [], "modes_cut": []}
    return {"outcome": "stopped" if not finished else "finished", "modes_not_run": not_run, "modes_cut": cut}
