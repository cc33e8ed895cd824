"""The command line: `kvtui` and its subcommands.

entry.py parses the arguments and dispatches to one module per subcommand (run.py, tui.py, sim.py,
export.py, diff.py, init.py …); launch_checks.py, scenario_args.py and headless_print.py are what
several of them share. The top layer: it may import anything in kvtui, and nothing in kvtui imports
it but kvtui/__main__.py.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """The `kvtui` console script (pyproject's `kvtui.cli:main`) and `python -m kvtui`: entry.py's
    main, imported when called, so that importing one subcommand's module loads no other."""
    from kvtui.cli.entry import main as run_main

    return run_main(argv)
