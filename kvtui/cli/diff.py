"""`kvtui diff A.json B.json [--format text|md] [--out PATH]`: two runs in one comparison table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvtui.terminal import output_width


def add_parser(sub):
    p = sub.add_parser(
        "diff", help="compare two snapshots (GPUs, vLLM versions, settings)",
        description="Pair the modes of two snapshots by name and show B against A in the comparison table, "
                    "with what differs between the runs (GPU, versions, scenario values).",
    )
    p.add_argument("a", metavar="A.json", help="the reference snapshot")
    p.add_argument("b", metavar="B.json", help="the snapshot compared against it")
    p.add_argument("--format", "-f", dest="format", default="text", metavar="FORMAT", help="text (default) or md")
    p.add_argument("--out", "-o", help="write to this file instead of standard output")
    p.add_argument("--wide", "--full-table", action="store_true", dest="wide",
                   help="every column of the table, however wide (text to a terminal fits its width otherwise)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from kvtui.errors import UsageError
    from kvtui.io.snapshot.file import load_snapshot
    from kvtui.report.diff import display_name, render_diff
    from kvtui.report.export import write_text_private
    from kvtui.secrets import scrub, scrub_text

    if args.out and args.out != "-":  # a FIFO, a device, a link: refused before anything is read
        from kvtui.safeio import check_output

        check_output(args.out, "diff (--out)")
    fmt = (args.format or "").lower()
    if fmt not in ("text", "md", "markdown"):
        raise UsageError(f"--format {args.format}: diff writes text or md")
    from kvtui.io.snapshot.outclaim import input_files, refuse_overwriting_inputs
    from kvtui.report.wellformed import rendering, require_renderable
    from kvtui.terminal import printable

    raw_a, raw_b = load_snapshot(args.a), load_snapshot(args.b)
    require_renderable(raw_a, args.a)
    require_renderable(raw_b, args.b)
    from kvtui.report.wellformed import require_facts

    require_facts(raw_a, args.a)  # impossible figures are refused, never compared as answers
    require_facts(raw_b, args.b)
    if args.out and args.out != "-":
        refuse_overwriting_inputs(args.out, input_files(args.a, raw_a) + input_files(args.b, raw_b), "diff")
    with rendering(args.a):
        a = scrub(raw_a)
    with rendering(args.b):
        b = scrub(raw_b)
    na, nb = display_name(args.a), display_name(args.b)
    with rendering(f"{args.a} / {args.b}"):
        # Text to the terminal fits its width (COLUMNS where set); a file or --wide gets every column.
        to_file = bool(args.out and args.out != "-")
        width = None if to_file or args.wide else output_width()  # a pipe (no COLUMNS): every column
        text = scrub_text(render_diff(a, b, "A", "B", markdown=fmt != "text", title_a=na, title_b=nb, width=width,
                                      wide=bool(args.wide)))
    if args.out and args.out != "-":
        write_text_private(Path(args.out), text)
        print(f"kvtui: wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(printable(text))  # names from the files: no terminal escapes
    return 0
