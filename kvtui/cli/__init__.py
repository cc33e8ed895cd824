"""The command line: `kvtui` and its subcommands.

main.py parses the arguments and dispatches to one module per subcommand (run.py, tui.py, sim.py,
export.py, diff.py, init.py …); launch_checks.py, scenario_args.py and headless_print.py are what
several of them share. The top layer: it may import anything in kvtui, and nothing in kvtui imports
it but kvtui/__main__.py.
"""
