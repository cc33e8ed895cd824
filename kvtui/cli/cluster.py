"""kvtui run SCENARIO --cluster ADDRESS: the comparison's lanes spread over a Ray cluster, one live view.

The lanes are those of `--parallel` (kvtui.cli.parallel: the same `kvtui run --headless
--mode NAME` arguments, the same join of the lanes' snapshots into one), placed by Ray instead of
by this box's free devices: one per mode, each asking for the GPUs its mode needs, on whichever
node has them (kvtui.cluster). docs/CLUSTER.md has the set-up.

Stops: Ctrl-C (SIGINT), SIGTERM, SIGHUP: every lane is told through the hub, stops its server on
its node and sends back what it measured, and the join still runs (a second Ctrl-C stops waiting:
the lanes' workers are cancelled, their watchdogs stop the servers). SIGKILL of this driver: Ray
ends its job's workers, and each lane's watchdog stops the lane and its server; a lane that
outlives its worker stops too when it cannot reach the hub.
"""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path
from typing import Any, TextIO

from kvtui.cli.parallel import join_lanes, lane_argv, lane_docs, lane_modes
from kvtui.errors import UsageError
from kvtui.io.scenario.schema import Scenario


def lane_specs(args: Any, scenario: Scenario, path: str, overrides: list[str], names: list[str]) -> list[Any]:
    """One LaneSpec per mode: the lane's `kvtui run` arguments, with the files it needs as text."""
    import copy

    from kvtui.cluster.driver import LaneSpec
    from kvtui.safeio import read_text_file

    text = read_text_file(path, "scenario", 16 * 1024 * 1024)
    cal_text = None
    a = copy.copy(args)
    a.resume = None
    if getattr(args, "calibration", None):
        cal_text = read_text_file(args.calibration, "calibration", 16 * 1024 * 1024)
        a.calibration = "@CALIBRATION@"
    env = {"NCCL_NVLS_ENABLE": "0"} if scenario.server.tensor_parallel_size > 1 else {}
    specs = []
    for i, mode in enumerate(names):
        argv = lane_argv("@SCENARIO@", mode, Path("@OUT@"), a, overrides)[3:]  # after `python -m kvtui`
        lane = f"L{i + 1}"
        specs.append(LaneSpec(lane, mode, {"lane": lane, "mode": mode, "argv": argv, "scenario_text": text,
                                           "calibration_text": cal_text, "engine": scenario.server.engine,
                                           "env": env}))
    return specs


def check(args: Any, scenario: Scenario) -> list[str]:
    if scenario.server.engine == "external":
        raise UsageError("--cluster: the external engine is one server already running; the lanes start their own "
                         "on their nodes (server.engine = \"vllm\" or \"sim\")")
    if getattr(args, "resume", None):
        raise UsageError("--cluster: --resume is not taken here: resume the joined snapshot on one box "
                         "(kvtui run --resume), or run the missing modes with --mode")
    if not re.fullmatch(r"[A-Za-z0-9._-]*", scenario.server.accelerator_type):
        raise UsageError(f"server.accelerator_type = {scenario.server.accelerator_type!r}: a Ray accelerator type "
                         "is letters, digits, '.', '_' or '-' (H100, H200, L40S, A100-80G)")
    return lane_modes(args, scenario)


def run_cluster(args: Any, scenario: Scenario, path: str, overrides: list[str], out: Path,
                follow: Any = None) -> int:
    """`kvtui run --cluster ADDRESS`: probe, lanes, join; the exit code. `follow(view, run) -> wall_s`: the
    TUI's, which shows the lanes while it runs them (default: headless lines)."""
    from kvtui.cluster import driver
    from kvtui.cluster.view import LanesView

    names = check(args, scenario)
    from kvtui.io.snapshot.file import paths_for

    taken = [p.name for p in paths_for(out) if p.is_file() and p.stat().st_size > 0]
    if taken:  # said before the lanes run, not after (the join's own claim would refuse it then)
        raise UsageError(f"--out {out}: an earlier run's files are there ({', '.join(taken)}); a run never shares "
                         "them: choose another --out")
    json_out = bool(getattr(args, "json", False))
    text_out: TextIO = sys.stderr if json_out else sys.stdout
    lanes_dir = out.with_name(out.stem + ".lanes")
    try:
        ray = driver.connect(args.cluster)
        facts = driver.probe(ray, scenario, warn=lambda line: print(f"kvtui: --cluster: warning: {line}",
                                                                  file=sys.stderr, flush=True))
    except driver.ClusterRefused as e:
        for line in e.lines:
            print(f"kvtui: --cluster: refused: {line}", file=sys.stderr)
        print("kvtui: --cluster: nothing was started", file=sys.stderr)
        return 1
    print(f"kvtui: --cluster: {len(facts)} node(s) can take a lane: "
          + "; ".join(f"{f['node_id'][:12]} ({f['host']}, vLLM {f.get('vllm_version') or 'none'})" for f in facts),
          file=text_out, flush=True)
    specs = lane_specs(args, scenario, path, overrides, names)
    say = (lambda line: print(line, file=text_out, flush=True))
    view = LanesView([(s.lane, s.mode) for s in specs], on_line=None if follow is not None else say)
    crun = driver.ClusterRun(ray, scenario, specs, view)
    gpus, extra = driver.lane_resources(scenario)
    print(f"kvtui: --cluster: {len(specs)} lane(s), each asking for {gpus:g} GPU(s)"
          + (f" of type {scenario.server.accelerator_type}" if extra else "")
          + "; a lane waits (queued) until one is free", file=text_out, flush=True)
    pressed = {"n": 0}

    def on_signal(signum, frame):
        name = signal.Signals(signum).name
        pressed["n"] += 1
        if pressed["n"] > 1:
            driver.STOP_WAIT_S = 0.0  # stop waiting: the lanes' workers are cancelled, their watchdogs act
        crun.stop(f"stopped by {name}")
        print(f"\nkvtui: {name}: every lane stops its server and sends back what it measured; then they are "
              "joined…", file=sys.stderr)

    handled = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        handled.append(signal.SIGHUP)
    import threading

    old = {s: signal.signal(s, on_signal) for s in handled} if threading.current_thread() is threading.main_thread() \
        else {}
    try:
        wall = follow(view, crun) if follow is not None else crun.run()
        lanes_dir.mkdir(parents=True, exist_ok=True)
        ran = crun.bring_back(lanes_dir)
        docs, missing = lane_docs([r for r in ran if r["rc"] is not None])
        for r in ran:
            if r["rc"] is None:
                missing[r["mode"]] = r.get("failure") or "its lane never ran"
        driver.mark_lane_docs(docs, ran)
        extra_info: dict[str, Any] = {"cluster": {"address": args.cluster, "nodes": facts}}
        warn = driver.gpu_type_warning(ran)
        if warn:
            extra_info["warning"] = warn
        code = join_lanes(args, scenario, out, names, docs, missing, ran, wall, lanes_dir, crun.stop_reason,
                          text_out, extra=extra_info)
        if warn:
            print(f"kvtui: warning: {warn}", file=text_out)
        for r in ran:
            if r.get("records_on_node"):
                print(f"kvtui: lane {r['lane']} ({r['mode']}): its per-request records stayed on its node: "
                      f"{r['records_on_node']}", file=text_out)
        return code
    finally:
        for s, h in old.items():
            signal.signal(s, h)
