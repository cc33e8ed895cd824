"""`kvtui run SCENARIO.toml [--headless] [--mode NAME]… [--out PATH] [--set KEY=VALUE]… [--resume SNAPSHOT]…`."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from kvtui.cli.headless_print import HeadlessPrinter, print_summary, step_line  # noqa: F401 - old names
from kvtui.report.paths import default_out, file_stem  # noqa: F401 - also this module's names for them


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "run", help="run a scenario (headless or in the TUI)",
        description="Start the engine per precision mode, ramp the load, find the max concurrency at the SLO.",
    )
    p.add_argument("scenario", nargs="?", help="scenario file (default: the built-in simulated demo)")
    p.add_argument("--headless", action="store_true", help="no TUI: a progress line per step and a summary")
    p.add_argument("--mode", action="append", dest="modes", metavar="NAME", help="run only this mode (repeatable)")
    p.add_argument("--out", help="snapshot path (default: runs/<scenario>-<time>.json)")
    p.add_argument("--set", action="append", dest="overrides", default=[], metavar="KEY=VALUE",
                   help="override a scenario value, e.g. --set ramp.max=64 --set slo.ttft_p95_ms=1500")
    p.add_argument("--resume", action="append", metavar="SNAPSHOT",
                   help="keep the finished modes of this snapshot (or journal), continue the ones cut short from their "
                        "finished steps, run the rest; repeatable (a later snapshot's mode wins)")
    p.add_argument("--parallel", action="store_true",
                   help="one mode per free GPU at once (the sim engine: server.devices simulated GPUs), each lane "
                        "its own kvtui run with CUDA_VISIBLE_DEVICES, joined into one snapshot; headless "
                        "(also: server.parallel = true)")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="spread the modes over a Ray cluster, one lane per mode on the GPUs it needs: "
                        "ray://HOST:PORT, HOST:PORT, or auto (RAY_ADDRESS, or a cluster started here); "
                        "needs kvtui[ray] (docs/CLUSTER.md)")
    p.add_argument("--engine", choices=["sim", "vllm", "external"], help="override server.engine")
    p.add_argument("--fast", action="store_true",
                   help="with the sim engine: simulate each step offline (seconds, no HTTP)")
    p.add_argument("--calibration", default=None, metavar="TOML",
                   help="the simulator's calibration for the predictions (and for --fast's steps): "
                        "a `kvtui calibrate` file")
    p.add_argument("--verbose", "-v", action="store_true", help="headless: print the server's log too")
    p.add_argument("--wide", "--full-table", action="store_true", dest="wide",
                   help="headless: the comparison with every column (default: the columns that fit the terminal)")
    p.add_argument("--json", action="store_true",
                   help="headless: the answer as JSON on stdout, nothing else there (progress goes to stderr)")
    p.add_argument("--theme", help="TUI theme")
    p.add_argument("--allow-env", action="store_true",
                   help="let the scenario's server.env set variables that change which code the server runs "
                        "(PYTHONPATH, LD_PRELOAD, …); refused otherwise")
    p.add_argument("--kill-stale", action="store_true",
                   help="stop servers an earlier, killed kvtui run left running "
                        "(otherwise: a warning, or a question on a terminal)")
    from kvtui.cli.url_target import add_arguments

    add_arguments(p)
    p.set_defaults(func=run)
    return p


def env_changes(scenario) -> list[str]:
    """The server environment the scenario changes, shown before anything starts (secret values hidden)."""
    from kvtui.secrets import REDACTED, redact_env
    from kvtui.terminal import printable

    out = []
    for who, env in [("every mode", scenario.server.env)] + [(f"mode {m.name}", m.env) for m in scenario.modes]:
        if env:
            shown = ", ".join(f"{k}={REDACTED if v == REDACTED else v!r}"
                              for k, v in redact_env(env, scenario.server.secret_env).items())
            out.append(printable(f"server environment ({who}): {shown}"))
    return out


def run(args: argparse.Namespace) -> int:
    from kvtui.io.scenario import load_scenario
    from kvtui.io.scenario.defaults import demo_scenario_path

    path = args.scenario or str(demo_scenario_path())
    from kvtui.cli import scenario_args

    overrides = scenario_args.overrides(args)  # defaults < TOML < --set < --engine
    if getattr(args, "url", None):
        from kvtui.cli.url_target import url_scenario

        scenario = url_scenario(args, overrides)  # the server probed; what kvtui can and cannot see printed
        path = args.scenario or scenario.name
    else:
        from kvtui.cli.url_target import check_no_url_options

        check_no_url_options(args)
        scenario = load_scenario(path, overrides, allow_env=getattr(args, "allow_env", False))
    scenario_args.check_fast(scenario, args.fast)
    resume = scenario_args.resumes(args)
    scenario_args.check_resumes(scenario, resume)
    scenario_args.check_outputs(args)  # a FIFO, a device, a link as --out: refused before anything runs
    from kvtui.cli.launch_checks import check_leftovers

    check_leftovers(args)
    if getattr(args, "cluster", None):
        out_path = Path(args.out) if args.out else default_out(scenario.name)
        if not args.headless and not getattr(args, "json", False):
            from kvtui.cli.tui import launch_cluster_tui

            return launch_cluster_tui(args, scenario, path, overrides, out_path)
        from kvtui.cli.cluster import run_cluster

        return run_cluster(args, scenario, path, overrides, out_path)
    if getattr(args, "parallel", False) or scenario.server.parallel:
        from kvtui.cli.parallel import run_parallel

        if not args.headless:
            print("kvtui: --parallel runs headless: each lane's progress, prefixed with its device", file=sys.stderr)
        return run_parallel(args, scenario, path, overrides, Path(args.out) if args.out else default_out(scenario.name))
    if getattr(args, "json", False):
        args.headless = True  # the answer as JSON is a headless run's ending
    if not args.headless:
        from kvtui.cli.tui import launch_tui

        return launch_tui(scenario, out=args.out, modes=args.modes, resume=resume, theme=args.theme, autostart=True,
                          fast=args.fast, typed_argv=getattr(args, "typed_argv", None))
    for w in scenario.warnings:
        print(f"kvtui: warning: {w}", file=sys.stderr)
    for line in env_changes(scenario):
        print(f"kvtui: {line}", file=sys.stderr)
    from kvtui.explore.run import Run

    out = Path(args.out) if args.out else default_out(scenario.name)
    json_out = bool(getattr(args, "json", False))
    printer = HeadlessPrinter(scenario, out=sys.stderr if json_out else sys.stdout, verbose=args.verbose)
    # The sim engine without --fast: the simulator in process, each step paced over its modelled time
    # (kvtui.explore.pacing), as the TUI runs it: --fast's own figures, shown as they would come live.
    # A test knob, replicas or a URL keep the HTTP simulator (pacing.applies).
    from kvtui.explore.pacing import PACE_SPEED, paced_clock

    pace = paced_clock(scenario, args.modes, args.fast)
    if pace is not None:
        print(f"kvtui: the simulator runs in process, each step paced at ×{PACE_SPEED:g} its modelled time "
              "(--fast: the same figures at once)", file=sys.stderr if json_out else sys.stdout, flush=True)
    run_ = Run(scenario, out, modes=args.modes, listener=printer, resume=resume, fast=args.fast,
               calibration=args.calibration, publish=False, pace=pace)  # nothing here reads Run.published()
    from kvtui.preflight import gate, modes_to_start

    def show(c) -> None:
        print(f"kvtui: {c.line()}", file=sys.stderr if c.status == "fail" or json_out else sys.stdout, flush=True)

    pf = gate(scenario, modes_to_start(run_.modes, resume), fast=args.fast or pace is not None, emit=show)
    if not pf.ok:  # before the snapshot exists: nothing half-written
        print(f"kvtui: {pf.summary()}", file=sys.stderr)
        return 1
    interrupted = {"n": 0}

    def on_signal(signum, frame):
        name = signal.Signals(signum).name
        interrupted["n"] += 1
        if interrupted["n"] > 1 and signum == signal.SIGINT:
            raise KeyboardInterrupt
        run_.stop(f"stopped by {name}")
        print(f"\nkvtui: {name}: stopping the load and the server, keeping what was measured…", file=sys.stderr)

    handled = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        # Started under nohup (or with SIGHUP ignored): the user wants the run to outlive the
        # terminal, so a dropped SSH session must not stop it.
        print("kvtui: SIGHUP is ignored (nohup): the run goes on if the terminal goes away", file=sys.stderr)
    else:
        handled.append(signal.SIGHUP)
    old = {s: signal.signal(s, on_signal) for s in handled}
    try:
        doc = run_.run()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if json_out:
        import json

        from kvtui.cli.headless_print import answer_json

        json.dump(answer_json(doc, out), sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    else:
        print_summary(doc, wide=bool(getattr(args, "wide", False)))
    lost = doc["run"].get("output_failure")
    if lost:  # a write failed: the run stopped on it, and no line says its files are whole
        print(f"kvtui: the run FAILED: {lost}; the snapshot {out} holds what was measured until then, its "
              "records file only the requests written before the failure", file=sys.stderr)
        return 1
    # Each path on its own line: a long path stays whole and copyable at 80 columns.
    print(f"\nkvtui: snapshot and its records:\n  {out}\n  {out.with_name(out.stem + '.records.jsonl')}",
          file=sys.stderr if json_out else sys.stdout)
    from kvtui.report.outcome import resume_command, stopped_line

    stopped = stopped_line(doc, resume_command(getattr(args, "typed_argv", None) or sys.argv[1:], out))
    if stopped:
        print(f"kvtui: {stopped}", file=sys.stderr)
    if interrupted["n"]:
        return 130
    if doc["run"].get("stop_reason"):
        return 1  # stopped by a failure (e.g. the records file became unwritable), not by the user
    failed = [m for m in doc["modes"] if m.get("error")]
    from kvtui.report.outcome import no_mode_started

    if no_mode_started(doc):
        print("kvtui: the run FAILED: no mode started (each mode's error is above)", file=sys.stderr)
    return 1 if failed else 0
