"""`kvtui tui` (not built yet)."""

from kvtui.errors import UsageError


def add_parser(sub):
    p = sub.add_parser("tui", help="(not built yet)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    raise UsageError("kvtui tui is not built yet")
