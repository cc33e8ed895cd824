"""The replay dashboard of a snapshot as an SVG, rendered headlessly (for `kvtui export --format svg`).

    svg = render_dashboard_svg(load_snapshot("run.json"), width=160, height=48, theme="kvtui-light")
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any


async def _render(doc: dict[str, Any], width: int, height: int, theme: str, mode: str | None, step: int | None,
                  view: str) -> str:
    from kvtui.tui.app import make_app
    from kvtui.tui.options import AppOptions

    app = make_app(AppOptions(snapshot=doc, theme=theme, replay_mode=mode, replay_step=step,
                              view="dashboard" if view == "compare" else view))
    async with app.run_test(size=(width, height), notifications=False) as pilot:
        await pilot.pause()
        if view == "compare":
            app.action_compare()
            await pilot.pause()
        if app.dashboard is not None:
            app.dashboard.sync()
        sync = getattr(app.screen, "sync", None)
        if sync is not None:
            sync()
        await pilot.pause()
        await pilot.pause(0.3)  # the charts paint their borders' titles on the refresh after they build
        return app.export_screenshot(title=f"kvtui — {(doc.get('scenario') or {}).get('name', 'snapshot')}")


def render_dashboard_svg(doc: dict[str, Any], width: int = 160, height: int = 48, theme: str = "kvtui-dark",
                         mode: str | None = None, step: int | None = None, view: str = "answer") -> str:
    """SVG of `doc` (a loaded snapshot) at width×height cells: its answer screen, a mode's dashboard
    (`view="dashboard"`, `mode`, `step`) or the comparison (`view="compare"`)."""
    if mode and view == "answer":
        view = "dashboard"
    coro = _render(doc, width, height, theme, mode, step, view)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Called from inside an event loop: render in a thread of its own.
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["svg"] = asyncio.run(coro)
        except BaseException as e:  # noqa: BLE001 - handed back to the caller
            out["error"] = e

    t = threading.Thread(target=target, name="kvtui-svg")
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["svg"]
