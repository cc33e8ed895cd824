"""`kvtui web [SCENARIO.toml]`: the same app in a browser, through textual-serve, on 127.0.0.1.

Every browser tab gets its own kvtui process (and its own run): made for showing a room
the simulated demo or a replay, not for sharing one live run.
"""

from __future__ import annotations

import argparse
import ipaddress
import shlex
import sys


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "web", help="serve the dashboard to a browser (textual-serve, loopback)",
        description="Serve the dashboard at http://127.0.0.1:PORT; each browser tab runs its own kvtui.",
    )
    p.add_argument("scenario", nargs="?", help="scenario file (default: the simulated demo)")
    p.add_argument("--replay", metavar="SNAPSHOT", help="serve the replay of this snapshot instead")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; loopback only "
                   "unless --allow-remote)")
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host (anyone who reaches it "
                   "can start runs on this machine)")
    p.add_argument("--start", action="store_true", help="with a scenario: start the run at once")
    p.add_argument("--theme", help="theme name")
    p.set_defaults(func=run)
    return p


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def app_command(args: argparse.Namespace) -> list[str]:
    cmd = [sys.executable, "-m", "kvtui"]
    if args.replay:
        cmd += ["replay", args.replay]
    else:
        cmd += ["tui"] + ([args.scenario] if args.scenario else [])
        if args.start and args.scenario:
            cmd.append("--start")
    if args.theme:
        cmd += ["--theme", args.theme]
    return cmd


def run(args: argparse.Namespace) -> int:
    from kvtui.errors import UsageError

    if not _loopback(args.host) and not args.allow_remote:
        raise UsageError(f"--host {args.host} is not loopback: add --allow-remote to serve beyond this machine")
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port}: not a TCP port")
    if args.theme:
        from kvtui.commands.tui import check_theme

        check_theme(args.theme)
    if args.replay:
        from kvtui.report.snapshot import load_snapshot

        load_snapshot(args.replay)  # a bad file fails here, not in every browser tab
    elif args.scenario:
        from kvtui.scenario import load_scenario

        load_scenario(args.scenario)
    from textual_serve.server import Server

    cmd = shlex.join(app_command(args))
    print(f"kvtui: serving {cmd!r} at http://{args.host}:{args.port} (Ctrl-C to stop)", flush=True)
    Server(cmd, host=args.host, port=args.port, title="kvtui").serve()
    return 0
