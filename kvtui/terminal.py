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
