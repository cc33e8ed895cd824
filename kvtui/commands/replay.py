"""`kvtui replay` (not built yet)."""

from kvtui.errors import UsageError


def add_parser(sub):
    p = sub.add_parser("replay", help="(not built yet)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    raise UsageError("kvtui replay is not built yet")
