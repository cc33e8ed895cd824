"""The exported SVG picture as a PNG (`kvtui export SNAP --format png`), through CairoSVG.

Optional: CairoSVG (`pip install 'kvtui[png]'`) needs the Cairo C library (Debian/Ubuntu:
libcairo2); without them `--format png` says so in one line and `--format svg` still works.
Textual's SVG names the Fira Code web font from a CDN: the PNG uses the system's monospace font
instead (nothing fetched, the cells stay aligned).
"""

from __future__ import annotations

import re
from pathlib import Path

from kvtui.errors import KvtuiError
from kvtui.io.snapshot.file import atomic_write

NEEDS = ("--format png needs CairoSVG and the Cairo library (pip install 'kvtui[png]'; Debian/Ubuntu: "
         "apt install libcairo2); --format svg needs neither")


def _cairosvg():
    try:
        import cairosvg
    except (ImportError, OSError) as e:  # OSError: the package is there, libcairo is not
        raise KvtuiError(f"{NEEDS} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    return cairosvg


def local_fonts(svg: str) -> str:
    """No web font (no fetch from a CDN): the system's monospace, so the terminal cells stay a grid."""
    svg = re.sub(r"@font-face\s*\{[^}]*\}", "", svg)
    return re.sub(r"font-family:\s*\"?Fira Code\"?(,\s*monospace)?;", "font-family: monospace;", svg)


def svg_to_png(svg: str, scale: float = 1.0) -> bytes:
    cairosvg = _cairosvg()
    try:
        return cairosvg.svg2png(bytestring=local_fonts(svg).encode("utf-8"), scale=scale, unsafe=False)
    except Exception as e:  # the converter's own failure: one line, not a traceback
        raise KvtuiError(f"--format png: the SVG to PNG conversion failed: {type(e).__name__}: {e}")


def write_bytes_private(path: Path, data: bytes) -> None:
    """Atomic and user-only (0600), as the text exports (kvtui.report.export.write_text_private)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise KvtuiError(f"{path}: cannot write it: the folder {path.parent} does not exist")
    atomic_write(path, data)
