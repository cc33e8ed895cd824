"""Exports of a snapshot: JSON (the portable snapshot), CSV of steps, Markdown report, SVG dashboard.

Every export goes through `portable_doc`: a deep copy without in-process keys, with the
comparison recomputed from the modes (so a replayed snapshot prints exactly what the run
printed), and scrubbed of secrets — a second net behind the run's own redaction:
- values under secret-looking keys (api_key, *_token, secret, password, authorization…),
- env values whose names are secret (the scenario's `secret_env` and the usual patterns),
- the value after --api-key / --hf-token / --token in command lines,
- bearer tokens, "api_key=…"-style pairs and URL passwords in free text (error tails),
- the values of secret-named variables of the exporting process's own environment,
  wherever they appear.
The rendered text is scrubbed again before it is returned.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

from kvtui.errors import KvtuiError, UsageError
from kvtui.secrets import (  # noqa: F401 (scrub, scrub_text re-exported: diff, import, tests)
    process_secrets,
    scrub,
    scrub_text,
)

FORMATS = ("json", "md", "csv", "svg", "png")  # png: the svg picture converted (kvtui.report.png)
SUFFIX = {"json": ".export.json", "md": ".md", "csv": ".csv", "svg": ".svg", "png": ".png"}
# (portable doc, width, height, theme, view, mode) -> SVG text
SvgRenderer = Callable[[dict[str, Any], int, int, "str | None", str, "str | None"], str]

def portable_doc(doc: dict[str, Any], extra_secrets: list[str] | None = None) -> dict[str, Any]:
    """What every export starts from: no in-process keys, comparison recomputed, secrets scrubbed."""
    from kvtui.report.compare import compare_modes

    d = {k: v for k, v in doc.items() if not k.startswith("_")}
    d = copy.deepcopy(d)
    d["comparison"] = compare_modes(d)
    return scrub(d, extra_secrets)


def render(doc: dict[str, Any], fmt: str, width: int = 160, height: int = 48, theme: str | None = None,
           extra_secrets: list[str] | None = None, view: str = "answer", mode: str | None = None,
           svg: SvgRenderer | None = None) -> str:
    """The export of `doc` in format `fmt` as text (already portable and scrubbed). For svg, `svg`
    draws the picture (kvtui.cli.export.render_svg: the dashboard lives in the TUI)."""
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt}: not a format kvtui exports (choose from {', '.join(FORMATS)})")
    if fmt == "png":  # binary: the svg text, converted by the caller (kvtui.report.png.svg_to_png)
        raise KvtuiError("--format png: render the svg and convert it (kvtui.report.png.svg_to_png)")
    d = portable_doc(doc, extra_secrets)
    if fmt == "json":
        from kvtui.io.snapshot.file import dumps

        text = dumps(d) + "\n"
    elif fmt == "md":
        from kvtui.report.markdown import render_markdown

        text = render_markdown(d)
    elif fmt == "csv":
        from kvtui.report.csv_export import render_csv

        text = render_csv(d)
    elif svg is not None:
        text = svg(d, width, height, theme, view, mode)
    else:  # the dashboard is the TUI's, above this layer: kvtui.cli.export.render passes it in
        raise KvtuiError("--format svg: the dashboard picture is rendered by the TUI (kvtui.cli.export.render)")
    return scrub_text(text, sorted(set(process_secrets()) | set(s for s in (extra_secrets or []) if s and len(s) >= 4),
                                   key=len, reverse=True))


def default_out(snapshot: str | Path, fmt: str) -> Path:
    p = Path(snapshot)
    stem = p.name[: -len(".journal")] if p.name.endswith(".journal") else p.name
    stem = stem[:-5] if stem.endswith(".json") else Path(stem).stem
    return p.with_name(stem + SUFFIX[fmt])


def write_text_private(path: Path, text: str) -> None:
    """Atomic, user-only (0600) like the snapshot itself."""
    from kvtui.io.snapshot.file import atomic_write

    try:
        atomic_write(path, text)
    except FileNotFoundError:
        raise KvtuiError(f"{path}: cannot write it: the folder {path.parent} does not exist")
    except OSError as e:
        raise KvtuiError(f"{path}: cannot write it: {e.strerror or e}")
