"""`kvtui export SNAP --format png`: the answer picture as a PNG (CairoSVG), private and atomic; without
CairoSVG a one-line error that names what to install, nothing written."""

from __future__ import annotations

import struct
import sys

import pytest

from kvtui.cli.entry import main


def need_cairo() -> None:
    """CairoSVG is a test dependency; the Cairo C library (libcairo2) comes from the system."""
    try:
        import cairosvg  # noqa: F401
    except (ImportError, OSError) as e:  # OSError: the package is there, libcairo2 is not
        pytest.skip(f"the png export needs CairoSVG and libcairo2: {e}")


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    return struct.unpack(">II", data[16:24])


def test_png_of_the_answer_and_of_a_mode(frozen_path, tmp_path, capsys):
    need_cairo()
    out = tmp_path / "answer.png"
    assert main(["export", str(frozen_path), "--format", "png", "--out", str(out), "--width", "80", "--height", "24"]) == 0
    w1, h1 = png_size(out.read_bytes())
    assert out.stat().st_mode & 0o077 == 0  # user-only, as every export
    assert main(["export", str(frozen_path), "--format", "png", "--out", str(out)]) == 2  # exists: no --force
    assert "--force" in capsys.readouterr().err
    assert w1 > 600 and h1 > 300
    assert main(["export", str(frozen_path), "--format", "png", "--out", "-"]) == 2  # binary: a file, not stdout
    assert "--out FILE.png" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.tmp"))


def test_the_png_takes_its_scale_and_no_web_font():
    need_cairo()
    from kvtui.report.png import local_fonts, svg_to_png

    svg = ('<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20"><style>@font-face { font-family: "Fira Code";'
           ' src: url("https://cdn.example/FiraCode.woff2"); } .t { font-family: Fira Code, monospace; }</style>'
           '<text class="t" x="1" y="15">kv</text></svg>')
    assert "https://" not in local_fonts(svg) and "font-family: monospace;" in local_fonts(svg)
    assert png_size(svg_to_png(svg)) == (40, 20)
    assert png_size(svg_to_png(svg, scale=2)) == (80, 40)


def test_png_without_cairosvg_says_what_to_install(frozen_path, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cairosvg", None)  # as where it is not installed: import fails
    out = tmp_path / "x.png"
    assert main(["export", str(frozen_path), "--format", "png", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "kvtui[png]" in err[0] and "--format svg" in err[0]
    assert not out.exists()
