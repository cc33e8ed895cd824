"""`kvtui sim` (not built yet)."""

from kvtui.errors import UsageError


def add_parser(sub):
    p = sub.add_parser("sim", help="(not built yet)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    raise UsageError("kvtui sim is not built yet")
