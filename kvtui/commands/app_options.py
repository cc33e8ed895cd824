"""The app's options object lives with the app (kvtui.tui.options, kvtui.tui.app.make_app): the
arrow points one way, commands → tui. These names stay for callers that import them from here."""

from __future__ import annotations

from typing import Any

from kvtui.tui.options import REFRESH_HZ, AppOptions

__all__ = ["REFRESH_HZ", "AppOptions", "make_app"]


def make_app(options: AppOptions) -> Any:
    from kvtui.tui.app import make_app as build

    return build(options)
