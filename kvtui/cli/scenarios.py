"""`kvtui scenarios`: the shipped scenarios and themes, and the user's own, as paths to copy and edit.

kvtui scenarios                  # names, descriptions, full paths
kvtui scenarios --paths          # one path a line (for scripts: cp "$(kvtui scenarios --paths | grep demo)" …)
kvtui scenarios --user-dir DIR   # look in DIR instead of $KVTUI_HOME / the platform's config dir
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

from kvtui import paths


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "scenarios",
        help="list the shipped scenarios and themes and your own (paths to copy and edit)",
        description="The scenarios and themes kvtui ships and the ones in your per-user directory "
        f"(--user-dir, else ${paths.ENV_HOME}, else the platform's config dir). "
        "A scenario can be run by its name: `kvtui run NAME`.",
    )
    p.add_argument(
        "--user-dir", metavar="DIR", help=f"the per-user directory (default: ${paths.ENV_HOME} or {paths.user_dir()})"
    )
    p.add_argument("--paths", action="store_true", help="print only the paths, one a line")
    p.set_defaults(func=run)
    return p


def _description(p: Path) -> str:
    try:
        d = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        return f"(cannot read: {str(e).splitlines()[0]})"
    return str(d.get("description") or d.get("name") or "")


def _section(out, title: str, files: list[Path], hidden: set[str], describe: bool, empty: str) -> None:
    out.write(f"{title}\n")
    if not files:
        out.write(f"  {empty}\n")
    for f in files:
        note = "  [yours hides this one]" if f.name in hidden else ""
        desc = _description(f) if describe else ""
        out.write(f"  {f.stem:<24} {desc}{note}\n" if desc or note else f"  {f.stem}\n")
        out.write(f"  {'':<24} {f}\n")


def run(args: argparse.Namespace) -> int:
    home = paths.user_dir(args.user_dir)
    mine = {k: paths.user_files(k, args.user_dir) for k in paths.KINDS}
    shipped = {k: paths.shipped(k) for k in paths.KINDS}
    out = sys.stdout
    if args.paths:
        for k in paths.KINDS:
            for f in shipped[k] + mine[k]:
                out.write(f"{f}\n")
        return 0
    where = (
        "--user-dir"
        if args.user_dir
        else (
            f"${paths.ENV_HOME}"
            if paths.user_dir() != paths.user_dir(None) or __import__("os").environ.get(paths.ENV_HOME)
            else "platform default"
        )
    )
    out.write(f"Your directory: {home}  ({where}; {'exists' if home.is_dir() else 'not created yet'})\n\n")
    _section(
        out,
        "Shipped scenarios (copy one into your directory to edit it; run any by name: kvtui run NAME):",
        shipped["scenarios"],
        {f.name for f in mine["scenarios"]},
        True,
        "(none: a broken install?)",
    )
    out.write("\n")
    _section(
        out,
        f"Your scenarios ({home / 'scenarios'}):",
        mine["scenarios"],
        set(),
        True,
        "none yet: `kvtui init MODEL` writes one here for your model on this GPU",
    )
    out.write("\n")
    _section(
        out,
        "Shipped themes (kvtui --theme NAME):",
        shipped["themes"],
        {f.name for f in mine["themes"]},
        False,
        "(none)",
    )
    out.write("\n")
    _section(
        out,
        f"Your themes ({home / 'themes'}):",
        mine["themes"],
        set(),
        False,
        "none: copy a shipped theme there, rename it (name = …) and edit its colours",
    )
    out.write(
        f"\nTo edit the demo:  mkdir -p {home / 'scenarios'} && "
        f"cp {paths.demo_scenario()} {home / 'scenarios' / 'my-demo.toml'}\n"
    )
    return 0
