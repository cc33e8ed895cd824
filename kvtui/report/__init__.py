"""Reports: what a finished (or replayed) run says, as text and files.

The answer (answer.py), the comparison between modes (compare.py), the figures (figures.py), the
exports (export.py: Markdown, CSV, JSON; SVG/PNG through the TUI's renderer, imported lazily), diff
and import of other tools' results, and the records archive.

Imports: kvtui.explore (the run's document and re-evaluation), kvtui.quality, kvtui.runtime.engines,
kvtui.io, kvtui.core and the floor; never Textual (the import contract), nor the command line.
"""
