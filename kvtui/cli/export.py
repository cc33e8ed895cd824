"""`kvtui export SNAPSHOT --format md|csv|svg|png|json [--out PATH|-]`: a snapshot as a report, a table or a picture."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kvtui.errors import KvtuiError


def add_parser(sub):
    from kvtui.report.export import FORMATS

    p = sub.add_parser(
        "export", help="export a snapshot as Markdown, CSV, SVG or portable JSON",
        description="Export a snapshot (or the journal of an unfinished run): md = report for people, csv = one "
                    "row per step, svg = the dashboard as a picture, png = the same picture as PNG (kvtui[png]), "
                    "json = the portable snapshot. Secrets are never written.",
    )
    p.add_argument("snapshot", help="snapshot JSON (or its .journal)")
    p.add_argument("--format", "-f", dest="format", required=True, metavar="FORMAT",
                   help=f"one of {', '.join(FORMATS)}")
    p.add_argument("--out", "-o", help="output file, or - for standard output (default: in the working directory, "
                        "named after the snapshot; the path is printed)")
    p.add_argument("--width", type=int, default=160, help="svg/png: terminal columns (default 160)")
    p.add_argument("--height", type=int, default=48, help="svg/png: terminal rows (default 48)")
    p.add_argument("--theme", help="svg/png: theme name")
    p.add_argument("--view", choices=("answer", "dashboard", "compare"), default=None,
                   help="svg/png: which screen (default: the answer; dashboard with --mode)")
    p.add_argument("--mode", help="svg/png: this mode's dashboard (implies --view dashboard)")
    p.add_argument("--scale", type=float, default=1.0,
                   help="png: pixels per SVG unit (default 1; 2 for a sharper picture)")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")
    p.set_defaults(func=run)
    return p


def render_svg(doc: dict[str, Any], width: int = 160, height: int = 48, theme: str | None = None,
               view: str = "answer", mode: str | None = None) -> str:
    """The replay dashboard of `doc` as an SVG picture (kvtui.tui.svg), failures as one line."""
    try:
        from kvtui.tui.svg import render_dashboard_svg
    except ImportError as e:
        missing = getattr(e, "name", None) or str(e)
        if missing and str(missing).startswith("kvtui.tui"):
            raise KvtuiError("--format svg: this kvtui has no dashboard SVG renderer yet (kvtui.tui.svg); use "
                             "--format md or csv")
        raise KvtuiError(f"--format svg needs {missing}, which is not installed: {e}")
    kwargs: dict[str, Any] = {"theme": theme} if theme else {}
    kwargs.update(view=view, mode=mode)
    try:
        return render_dashboard_svg(doc, width, height, **kwargs)
    except KvtuiError:
        raise
    except Exception as e:  # the renderer's own failure: one line, exit 1, not a traceback
        first = str(e).splitlines()[0] if str(e) else ""
        raise KvtuiError(f"--format svg: the dashboard renderer failed: {type(e).__name__}: {first}")


def render(doc: dict[str, Any], fmt: str, width: int = 160, height: int = 48, theme: str | None = None,
           extra_secrets: list[str] | None = None, view: str = "answer", mode: str | None = None) -> str:
    """Every export format, the dashboard picture included (kvtui.report.export.render with the TUI's SVG)."""
    from kvtui.report.export import render as render_report

    return render_report(doc, fmt, width, height, theme, extra_secrets, view, mode, svg=render_svg)


def run(args: argparse.Namespace) -> int:
    from kvtui.errors import UsageError
    from kvtui.io.snapshot.file import load_snapshot
    from kvtui.report.export import FORMATS, default_out, write_text_private

    fmt = (args.format or "").lower().lstrip(".")
    if fmt == "markdown":
        fmt = "md"
    if fmt not in FORMATS:
        raise UsageError(f"--format {args.format}: not an export format (choose from {', '.join(FORMATS)})")
    if args.width < 40 or args.height < 10:
        raise UsageError("--width must be ≥ 40 and --height ≥ 10")
    from kvtui.report.wellformed import rendering
    from kvtui.safeio import check_output
    from kvtui.terminal import printable

    out = None if args.out == "-" else (Path(args.out) if args.out else default_out(args.snapshot, fmt))
    if out is not None:  # a FIFO, a device, a link: refused before anything is read (kvtui.safeio)
        check_output(out, "export (--out)")
    doc = load_snapshot(args.snapshot)
    from kvtui.report.wellformed import require_facts

    require_facts(doc, args.snapshot)  # impossible figures are refused, never exported as an answer
    mode = getattr(args, "mode", None)
    names = [m.get("name") if isinstance(m, dict) else None for m in doc.get("modes") or []]
    if mode and mode not in names:
        raise UsageError(f"--mode {mode}: not in this snapshot (modes: {', '.join(map(str, names)) or 'none'})")
    view = getattr(args, "view", None) or ("dashboard" if mode else "answer")
    # The working directory by default (as curl -O, pandoc): a snapshot in a read-only checkout
    # (docs/results) exports without --out; the path written is printed.
    out = None if args.out == "-" else (Path(args.out) if args.out else Path(default_out(args.snapshot, fmt).name))
    if out is not None:  # never over its own inputs, --force or not
        from kvtui.io.snapshot.outclaim import input_files, refuse_overwriting_inputs

        refuse_overwriting_inputs(out, input_files(args.snapshot, doc), "export")
    if out is not None and out.exists() and not getattr(args, "force", False):
        raise UsageError(f"{out}: exists; --force overwrites it, --out picks another file")
    if fmt == "png":
        from kvtui.report.png import _cairosvg

        _cairosvg()  # missing: say so before the picture is drawn
        if out is None:
            raise UsageError("--format png: a picture is binary; give --out FILE.png")
        if not 0.25 <= args.scale <= 8:
            raise UsageError("--scale must be between 0.25 and 8")
    with rendering(args.snapshot):
        text = render(doc, "svg" if fmt == "png" else fmt, width=args.width, height=args.height, theme=args.theme,
                      view=view, mode=mode)
    if fmt == "png":
        from kvtui.report.png import svg_to_png, write_bytes_private

        assert out is not None
        write_bytes_private(out, svg_to_png(text, scale=args.scale))
        print(f"kvtui: wrote {out}", file=sys.stderr)
        return 0
    if args.out == "-":
        sys.stdout.write(printable(text))  # names from the file: no terminal escapes
        return 0
    assert out is not None
    if fmt in ("md", "csv", "txt", "text"):  # read on terminals and rendered pages: no control or bidi of the file's
        text = printable(text)
    write_text_private(out, text)
    print(f"kvtui: wrote {out}", file=sys.stderr)
    return 0
