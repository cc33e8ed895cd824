"""`kvtui replay SNAPSHOT.json`: a saved run's answer, and its dashboard with a step slider. No GPU needed."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "replay", help="view a saved run in the dashboard (no GPU needed)",
        description="Open the dashboard on a snapshot (or the journal of an unfinished run). "
                    "←/→ or [ ] move through the steps; e changes the SLO (recomputed from the records).",
    )
    p.add_argument("snapshot", help="snapshot JSON (or its .journal)")
    p.add_argument("--mode", help="show this mode first")
    p.add_argument("--step", type=int, help="start at this step (1-based; default: the last)")
    p.add_argument("--theme", help="theme name")
    p.add_argument("--view", choices=("answer", "dashboard"), default=None,
                   help="open on the answer (default) or the dashboard (default with --step or --mode)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from kvtui.cli.launch_checks import check_theme, dumb_terminal
    from kvtui.errors import UsageError
    from kvtui.io.snapshot.file import load_snapshot
    from kvtui.tui.app import make_app
    from kvtui.tui.options import AppOptions

    check_theme(args.theme)
    from kvtui.report.wellformed import require_renderable

    doc = load_snapshot(args.snapshot)
    require_renderable(doc, args.snapshot)  # a malformed file: one line and exit 2, not Textual's traceback
    from kvtui.report.wellformed import require_facts

    require_facts(doc, args.snapshot)
    names = [m.get("name") if isinstance(m, dict) else None for m in doc.get("modes") or []]
    if args.mode and args.mode not in names:
        raise UsageError(f"--mode {args.mode}: not in this snapshot (modes: {', '.join(map(str, names)) or 'none'})")
    if dumb_terminal():
        # No full-screen app on a dumb terminal: the answer as plain lines, no escapes.
        import shutil
        import sys

        from kvtui.report.answer import answer_text

        # fitted to the terminal, as the headless ending is (the exports keep every column)
        sys.stdout.write(answer_text(doc, width=shutil.get_terminal_size((80, 24)).columns))
        return 0
    view = args.view or ("dashboard" if args.step or args.mode else "answer")
    app = make_app(AppOptions(snapshot=doc, theme=args.theme, replay_mode=args.mode, replay_step=args.step, view=view))
    rc = app.run()
    for p in app.exports:
        print(f"kvtui: exported {p}")
    return int(rc or 0)


