"""Helpers for the TUI tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, Callable


def on_screen(app, cls: type) -> bool:
    """The app shows a screen of `cls`, mounted: its composed widgets are there to query (a wait on the
    type alone once queried a field the SLO editor had not mounted yet, on a loaded CI host)."""
    return isinstance(app.screen, cls) and app.screen.is_mounted


def screen_text(app) -> str:
    """What the terminal shows, as plain text."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def wait_until(pilot, cond: Callable[[], bool], what: str, limit_s: float = 180.0, step_s: float = 0.2) -> None:
    """Poll `cond` while the app runs; the limit only guards against a hang (not a timing assertion)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"gave up waiting for: {what}")
        await pilot.pause(step_s)


async def wait_for_exit(app, limit_s: float = 120.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s
    while app.return_code is None:
        if loop.time() > end:
            raise AssertionError("the app did not exit")
        await asyncio.sleep(0.1)


def _children_of(root: int) -> dict[int, str]:
    """Live descendants of `root` (pid → command line), from /proc."""
    parent: dict[int, int] = {}
    cmd: dict[int, str] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            state = stat.rsplit(")", 1)[1].split()[0]
            if state == "Z":
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd[int(d)] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            parent[int(d)] = ppid
        except (OSError, IndexError, ValueError):
            continue
    out: dict[int, str] = {}
    frontier = [root]
    while frontier:
        p = frontier.pop()
        for c, pp in parent.items():
            if pp == p and c not in out:
                out[c] = cmd.get(c, "")
                frontier.append(c)
    return out


def descendants() -> dict[int, str]:
    """This process's live descendants, without multiprocessing's resource tracker (it lives as
    long as its parent and holds nothing: no server, no load generator)."""
    return {p: c for p, c in _children_of(os.getpid()).items() if "resource_tracker" not in c}


def load_json(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
