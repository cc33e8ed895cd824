"""A snapshot that parses as JSON but is not shaped like one fails with one line, never a traceback.

`load_snapshot` checks the top level (schema, modes); a hand-edited or hostile file can still
hold a step that is a string, a latency that is a list, a mode without a name. Rather than
guess every such shape, every command that renders a snapshot goes through `rendering`: a
failure of the renderer on the file's content is the file's fault (exit 2, naming it), and
`replay` renders the text views first so that Textual never meets such a file.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from kvtui.errors import KvtuiError, UsageError

# What a renderer raises on a value of the wrong shape (a bug of kvtui would raise these on
# good files too: the tests render every real snapshot in tests/*/data without one).
SHAPE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError, OverflowError,
                RecursionError)


@contextmanager
def rendering(source: str) -> Iterator[None]:
    try:
        yield
    except KvtuiError:
        raise
    except SHAPE_ERRORS as e:
        detail = str(e).splitlines()[0][:160] if str(e) else ""
        raise UsageError(f"{source}: not a well-formed kvtui snapshot "
                         f"({type(e).__name__}{': ' + detail if detail else ''})") from None


def require_renderable(doc: dict[str, Any], source: str) -> None:
    """Render the text views of `doc` once (the dashboard reads the same fields)."""
    from kvtui.report.export import render

    with rendering(source):
        for fmt in ("md", "csv"):
            render(doc, fmt)


def require_facts(doc: dict[str, Any], source: str) -> None:
    """Refuse (one line, exit 2) a snapshot whose facts no run can give: the validator --resume
    uses (`kvtui.explore.resume_guard.facts_problem`), shared by every reader."""
    from kvtui.explore.resume_guard import facts_problem

    why = facts_problem(doc)
    if why:
        raise UsageError(f"{source}: {why}: impossible figures, not shown")
