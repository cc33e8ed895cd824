"""`kvtui [SCENARIO.toml]` / `kvtui tui [SCENARIO.toml]`: the dashboard.

With no scenario: the built-in simulated demo (the shipped `sim-demo`), started at once.
With a scenario: the setup screen, prefilled (`--start` skips it). `kvtui run X.toml`
without `--headless` comes here too, through `launch_tui(..., autostart=True)`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kvtui.cli.launch_checks import check_theme  # noqa: F401 - kvtui.cli.tui.check_theme, as tests import it
from kvtui.errors import UsageError


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "tui", help="the live dashboard (default: the simulated demo)",
        description="The dashboard: start a scenario's run and watch it; `kvtui SCENARIO.toml` is the same.",
    )
    p.add_argument("scenario", nargs="?", help="scenario file (default: the built-in simulated demo, started at once)")
    p.add_argument("--start", action="store_true", help="start the run at once instead of showing the setup screen")
    p.add_argument("--mode", action="append", dest="modes", metavar="NAME", help="run only this mode (repeatable)")
    p.add_argument("--out", help="snapshot path (default: runs/<scenario>-<time>.json)")
    p.add_argument("--set", action="append", dest="overrides", default=[], metavar="KEY=VALUE",
                   help="override a scenario value, e.g. --set ramp.max=64")
    p.add_argument("--resume", action="append", metavar="SNAPSHOT",
                   help="keep the finished modes of this snapshot, continue the ones cut short, run the rest; "
                        "repeatable")
    p.add_argument("--engine", choices=["sim", "vllm", "external"], help="override server.engine")
    p.add_argument("--fast", action="store_true", help="with the sim engine: simulate each step offline (the answer "
                                                       "in seconds; w on the answer then watches it live)")
    p.add_argument("--live", action="store_true",
                   help="with no scenario: watch the demo live from the start (the same simulation, paced to the "
                        "wall; j jumps to the answer), instead of its answer in seconds")
    p.add_argument("--theme", help="theme name (shipped or <user dir>/themes/*.toml: kvtui-dark, kvtui-light, "
                                   "kvtui-high-contrast, …)")
    p.add_argument("--allow-env", action="store_true",
                   help="let the scenario's server.env set PYTHONPATH, LD_PRELOAD, … (refused otherwise)")
    p.add_argument("--kill-stale", action="store_true", help="stop servers an earlier, killed kvtui run left running")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from kvtui.cli import scenario_args
    from kvtui.io.scenario import load_scenario
    from kvtui.io.scenario.defaults import demo_scenario_path

    overrides = scenario_args.overrides(args)  # defaults < TOML < --set < --engine
    scenario_args.check_outputs(args)  # a FIFO, a device, a link as --out: refused before anything runs
    resume = scenario_args.resumes(args)
    if args.scenario is None:
        demo = demo_scenario_path()
        if not demo.exists():
            # No demo yet: the setup screen on the built-in defaults, saying why.
            scenario = load_scenario(None, overrides)
            return launch_tui(scenario, out=args.out, modes=args.modes, resume=resume, theme=args.theme,
                              autostart=False, fast=args.fast,
                              notice=f"the demo scenario {demo} is missing: showing the defaults")
        scenario = load_scenario(demo, overrides)
        autostart = True
        # The first answer in seconds: the demo simulated offline (--fast) opens on its answer, and
        # w there watches the same scenario live, paced (issue 46). --live: paced from the start.
        if not args.live and scenario.server.engine == "sim":
            args.fast = True
    else:
        scenario = load_scenario(args.scenario, overrides, allow_env=args.allow_env)
        autostart = args.start
    scenario_args.check_fast(scenario, args.fast)
    scenario_args.check_resumes(scenario, resume)
    from kvtui.cli.launch_checks import check_leftovers

    check_leftovers(args)
    return launch_tui(scenario, out=args.out, modes=args.modes, resume=resume, theme=args.theme, autostart=autostart,
                      fast=args.fast, typed_argv=getattr(args, "typed_argv", None))


def launch_tui(scenario: Any, out: str | Path | None = None, modes: list[str] | None = None,
               resume: dict[str, Any] | list[dict[str, Any]] | None = None, theme: str | None = None,
               autostart: bool = False, fast: bool = False, notice: str | None = None,
               typed_argv: list[str] | None = None) -> int:
    """Run the dashboard on `scenario`; returns the exit code (0, or 1 when the run failed)."""
    from kvtui.cli.launch_checks import dumb_terminal

    if dumb_terminal():
        raise UsageError("TERM=dumb: this terminal cannot show the dashboard; "
                         "kvtui run SCENARIO --headless prints plain lines (no escapes)")
    check_theme(theme)
    if modes:
        unknown = [m for m in modes if m not in {x.name for x in scenario.modes}]
        if unknown:
            valid = ", ".join(m.name for m in scenario.modes)
            raise UsageError(f"--mode {unknown[0]}: no such mode in {scenario.source or 'the scenario'} "
                             f"(modes: {valid})")
    if autostart:  # the checks' lines on the terminal, before the screen takes it
        from kvtui.preflight import gate, modes_to_start

        chosen = [m for m in scenario.modes if not modes or m.name in modes]
        # the sim engine runs in process in the TUI (--fast, or paced: kvtui.explore.pacing): no port to check
        from kvtui.explore.pacing import paces

        in_process = fast or paces(scenario, modes)
        pf = gate(scenario, modes_to_start(chosen, resume), fast=in_process,
                  emit=lambda c: print(f"kvtui: {c.line()}"))
        if not pf.ok:
            print(f"kvtui: {pf.summary()}")
            return 1
    from kvtui.tui.app import make_app
    from kvtui.tui.options import AppOptions

    app = make_app(AppOptions(scenario=scenario, out=out, modes=modes, resume=resume, theme=theme, autostart=autostart,
                              fast=fast, setup_notice=notice, handle_signals=True))
    rc = app.run()
    for p in app.exports:
        print(f"kvtui: exported {p}")
    if app.run_obj is not None:
        print(f"kvtui: snapshot {app.run_obj.out}")
    if app.run_error:
        print(f"kvtui: the run failed: {app.run_error}")
    from kvtui.report.outcome import resume_command, stopped_line

    # The command that continues it: the user's own line, where it started the run as typed (a
    # scenario picked or edited in the setup screen has no such line: the flag is named instead).
    again = (resume_command(typed_argv, app.run_obj.out)
             if autostart and typed_argv is not None and app.run_obj is not None else None)
    published = app.run_obj.published() if app.run_obj is not None else None
    stopped = stopped_line(published, again)
    from kvtui.tui.shutdown import STOPPED_RC

    if stopped:
        print(f"kvtui: {stopped}")
        if not rc:
            rc = STOPPED_RC  # a partial run never exits as a finished one
    elif rc == STOPPED_RC and published is not None and (published.get("run") or {}).get("outcome") == "finished":
        # q's "stop and quit" came as the last step ended: the snapshot says finished, so does the exit
        print("kvtui: the run finished before the stop reached it: every mode was measured")
        rc = 0
    return int(rc or 0)



def launch_cluster_tui(args: Any, scenario: Any, path: str, overrides: list[str], out: Path) -> int:
    """`kvtui run --cluster ADDRESS` with its live view: the lanes' table while they run (kvtui.tui.cluster_view),
    then the join and the answer on the terminal, as headless."""
    from kvtui.cli.cluster import run_cluster
    from kvtui.cli.launch_checks import dumb_terminal

    if dumb_terminal():
        raise UsageError("TERM=dumb: this terminal cannot show the lanes' view; "
                         "kvtui run SCENARIO --cluster ADDRESS --headless prints plain lines (no escapes)")

    def follow(view: Any, crun: Any) -> float:
        from kvtui.tui.cluster_view import ClusterApp

        app = ClusterApp(view, crun, f"kvtui — {scenario.name}: {len(view.rows)} lane(s) on the Ray cluster "
                                     f"{args.cluster}")
        app.run()
        if app.failure is not None:
            raise app.failure
        if not app.done:  # closed before the lanes ended: they are stopped, and followed to their end here
            crun.stop("the view was closed")
            app.follower.join()
            if app.failure is not None:
                raise app.failure
        return app.wall_s or 0.0

    return run_cluster(args, scenario, path, overrides, out, follow=follow)
