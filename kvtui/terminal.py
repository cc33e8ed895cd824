"""Text from files and servers, made safe for a terminal: the one place that decides what is shown.

A scenario or mode name holding `ESC]0;…BEL` (sets the window title) or `ESC[2J` (clears the
screen), or U+202E (turns the rest of a line around), was printed raw by `replay`, the headless
run, `diff` and the Markdown export. Every C0 control except newline and tab, DEL, the C1
controls (U+0080-U+009F, which some terminals read as ESC [) and the Unicode bidi and invisible
format controls (U+202A-U+202E, U+2066-U+2069, U+200B-U+200F, U+061C, U+2028/9, U+FEFF) are shown
as visible `\\xNN` / `\\uNNNN` instead. Every display goes through here:

- `printable(text)`: one string (idempotent: what it gives back holds no control);
- `visible_tree(obj)`: every string of a document (a snapshot handed to the TUI, a run's event);
- `guard_streams()`: sys.stdout and sys.stderr of the CLI (every command's lines: headless run,
  export to stdout, diff, import, resume hints, errors) pass their text through `printable`, and
  a stream that cannot take UTF-8 (PYTHONIOENCODING=ascii or latin-1, LC_ALL=C without locale
  coercion) gets an ASCII rendering (the `kvtui-ascii` codec error handler) instead of a UnicodeEncodeError;
- `cell_safe(text)`: the last net under the TUI (`kvtui.tui.textnet.guard_textual`, terminal and
  web): every text segment Textual draws has its controls replaced by a visible one-cell picture
  (U+2400…, "¿" for the rest).
"""

from __future__ import annotations

import codecs
import io
import re
import sys
import unicodedata
from typing import Any

# C0 but \t \n, DEL, C1; bidi embeddings/overrides/isolates, marks, zero-width and separators.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]")


def _show(ch: str) -> str:
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def printable(text: str) -> str:
    """`text` with every control and bidi character shown as a visible escape."""
    if not isinstance(text, str):
        text = str(text)
    return _CONTROLS.sub(lambda m: _show(m.group()), text)


def has_controls(text: str) -> bool:
    return bool(_CONTROLS.search(text))


def visible_tree(obj: Any) -> Any:
    """A copy of a JSON-like tree with every string (keys too) made printable; other values as they are."""
    if isinstance(obj, str):
        return printable(obj) if _CONTROLS.search(obj) else obj
    if isinstance(obj, dict):
        return {(visible_tree(k) if isinstance(k, str) else k): visible_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [visible_tree(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(visible_tree(v) for v in obj)
    return obj


# -- output that cannot take UTF-8 ---------------------------------------------------------------

_ASCII = {
    "—": "--", "–": "-", "−": "-", "‐": "-", "…": "...", "×": "x", "≥": ">=", "≤": "<=", "≈": "~", "±": "+/-",
    "→": "->", "←": "<-", "↑": "^", "↓": "v", "⇒": "=>", "µ": "u", "μ": "u", "°": "deg", "·": ".", "•": "*",
    "‘": "'", "’": "'", "“": '"', "”": '"', "✓": "ok", "✔": "ok", "✗": "x", "✘": "x", "⚑": "!", "⚠": "!",
    "▁": "_", "▂": "_", "▃": ".", "▄": "o", "▅": "o", "▆": "O", "▇": "O", "█": "#", "░": ".", "▒": ":", "▓": "#",
    "│": "|", "┃": "|", "─": "-", "━": "-", "┌": "+", "┐": "+", "└": "+", "┘": "+", "├": "+", "┤": "+", "┬": "+",
    "┴": "+", "┼": "+", "╭": "+", "╮": "+", "╰": "+", "╯": "+", "═": "=", "║": "|", "▏": "|", "▕": "|", "■": "#",
    "□": "o", "●": "*", "○": "o", "◆": "*", "▲": "^", "▼": "v", "▶": ">", "◀": "<", "…\u200b": "...",
    "\u00a0": " ", "\u2009": " ", "\u202f": " ", "€": "EUR", "²": "2", "³": "3", "½": "1/2", "¼": "1/4",
}


def _ascii_of(ch: str) -> str:
    if ch in _ASCII:
        return _ASCII[ch]
    base = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode("ascii")
    return base or "?"


def _fallback(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    return "".join(_ascii_of(c) for c in err.object[err.start:err.end]), err.end


codecs.register_error("kvtui-ascii", _fallback)


def takes_utf8(stream: Any) -> bool:
    enc = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    return enc in ("utf8", "utf8sig", "utf16", "utf32", "cp65001")


class SafeStream(io.TextIOBase):
    """A text stream in front of another: controls shown, and what its encoding lacks in ASCII."""

    def __init__(self, inner: Any):
        self._inner = inner
        self._utf8 = takes_utf8(inner)
        enc = getattr(inner, "encoding", None) or "ascii"
        try:
            codecs.lookup(enc)
        except LookupError:
            enc = "ascii"
        self._enc = enc

    @property
    def inner(self) -> Any:
        return self._inner

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._inner, "encoding", "utf-8")

    def write(self, s: str) -> int:
        text = printable(s) if _CONTROLS.search(s) else s
        if not self._utf8:
            try:
                text.encode(self._enc)
            except UnicodeEncodeError:
                text = text.encode(self._enc, "kvtui-ascii").decode(self._enc)
        self._inner.write(text)
        return len(s)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._inner.flush()

    def isatty(self) -> bool:
        return bool(self._inner.isatty())

    def fileno(self) -> int:
        return int(self._inner.fileno())

    def writable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return bool(getattr(self._inner, "closed", False))

    def close(self) -> None:
        pass  # the process's own stream: closed by the interpreter, not by a `with`

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def guard_streams() -> bool:
    """sys.stdout and sys.stderr through `SafeStream` (once). True when this call wrapped them."""
    done = False
    for name in ("stdout", "stderr"):
        s = getattr(sys, name)
        if s is None or isinstance(s, SafeStream):
            continue
        setattr(sys, name, SafeStream(s))
        done = True
    return done


def unguard_streams() -> None:
    for name in ("stdout", "stderr"):
        s = getattr(sys, name)
        if isinstance(s, SafeStream):
            setattr(sys, name, s.inner)


# -- the TUI's last net --------------------------------------------------------------------------

def _picture(ch: str) -> str:
    o = ord(ch)
    if o < 0x20:
        return chr(0x2400 + o)  # ␛ ␇ …
    if o == 0x7F:
        return "\u2421"
    return "\u00bf"


def cell_safe(text: str) -> str:
    """`text` with each control shown as one visible cell (for a layout already measured)."""
    return _CONTROLS.sub(lambda m: _picture(m.group()), text)


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
