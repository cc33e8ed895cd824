"""Text from files and servers, made safe for a terminal: no escape sequences get through.

A scenario or mode name holding `ESC]0;…BEL` (sets the window title) or `ESC[2J` (clears the
screen) was printed raw by the headless run, `diff` and the csv/md export to stdout. Every
C0 control except newline and tab, DEL, and the C1 controls (U+0080-U+009F, which some
terminals read as ESC [) are shown as visible `\\xNN` instead.
"""

from __future__ import annotations

import re

_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def output_width(stream: object = None) -> int | None:
    """The width text written to `stream` (default: stdout) should fit: COLUMNS where it is set, the
    terminal's width on a terminal, and None to a pipe or a file (a script or a pager reads each
    table whole: fitted to a guessed 120 columns it lost columns no one asked to leave out)."""
    import os
    import sys

    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    s = stream if stream is not None else sys.stdout
    isatty = getattr(s, "isatty", None)
    if not (callable(isatty) and isatty()):
        return None
    try:
        fileno = getattr(s, "fileno")
        return os.get_terminal_size(fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 120
