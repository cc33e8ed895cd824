"""`kvtui import` (not built yet)."""

from kvtui.errors import UsageError


def add_parser(sub):
    p = sub.add_parser("import", help="(not built yet)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    raise UsageError("kvtui import is not built yet")
