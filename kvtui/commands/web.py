"""`kvtui web` (not built yet)."""

from kvtui.errors import UsageError


def add_parser(sub):
    p = sub.add_parser("web", help="(not built yet)")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    raise UsageError("kvtui web is not built yet")
