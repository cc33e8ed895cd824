"""`kvtui web`, issue 50 (part B): the token is this instance's alone, and every tab's process goes with it.

- Browsers do not separate cookies by port: the cookie is named per instance (port and a random
  id), so a second instance neither reads nor overwrites the first one's; a WebSocket (which
  starts a kvtui per connection) needs this page's Origin, so a replayed cookie without one is
  refused.
- kill -9 of `kvtui web` leaves no tab's `kvtui tui`, simulator or watchdog (the reaper's
  watchdog holds the tabs' process groups); SIGTERM with several tabs open exits within a
  bound (the tabs are stopped first, all at once).
- `--host ::1` prints a bracketed URL, and the page's WebSocket URL is bracketed too.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from proc_helpers import wait_until

aiohttp = pytest.importorskip("aiohttp")
pytestmark = pytest.mark.slow


def _port(family: int = socket.AF_INET, host: str = "127.0.0.1") -> int:
    with socket.socket(family) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _stat(pid: int) -> list[str] | None:
    try:
        st = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    return st[st.rfind(")") + 2:].split()


def _descendants(root: int) -> dict[int, str]:
    """pid -> start time of every live descendant of root."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st:
                kids.setdefault(int(st[1]), []).append(int(d))
    out, todo = {}, [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            st = _stat(c)
            if st and st[0] not in ("Z", "X"):
                out[c] = st[19]
            todo.append(c)
    return out


def _alive(seen: dict[int, str]) -> list[int]:
    out = []
    for pid, start in seen.items():
        st = _stat(pid)
        if st and st[19] == start and st[0] not in ("Z", "X"):
            out.append(pid)
    return out


def _cmd(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Web:
    def __init__(self, args: list[str], host: str = "127.0.0.1"):
        self.port = _port(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        self.proc = subprocess.Popen([sys.executable, "-m", "kvtui", "web", *args, "--port", str(self.port),
                                      "--host", host], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=True, text=True)
        self.line = self.proc.stdout.readline()
        self.token = self.line.rsplit("?token=", 1)[1].split()[0]
        self.base = f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"
        wait_until(self.up, 60, "kvtui web answering", self.proc, poll_s=0.2)

    def up(self) -> bool:
        try:
            return httpx.get(self.base + "/static/css/xterm.css", timeout=2, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    def cookie(self) -> tuple[str, str]:
        r = httpx.get(f"{self.base}/?token={self.token}", timeout=5, trust_env=False)
        assert r.status_code == 303
        name, value = r.headers["set-cookie"].split(";", 1)[0].split("=", 1)
        return name, value

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


async def _ws_status(url: str, headers: dict) -> int:
    async with aiohttp.ClientSession() as s:
        try:
            async with s.ws_connect(url, headers=headers) as ws:
                await ws.close()
                return 101
        except aiohttp.WSServerHandshakeError as e:
            return e.status


def test_two_instances_keep_their_own_cookies_and_a_websocket_needs_the_origin(frozen_path):
    a, b = Web(["--replay", str(frozen_path)]), Web(["--replay", str(frozen_path)])
    try:
        (na, va), (nb, vb) = a.cookie(), b.cookie()
        assert na != nb and str(a.port) in na and str(b.port) in nb  # named per instance
        both = f"{na}={va}; {nb}={vb}"  # what a browser sends each (cookies ignore ports)
        for w in (a, b):
            assert httpx.get(w.base + "/", headers={"Cookie": both}, timeout=5, trust_env=False).status_code == 200
        # b's cookie opens nothing on a; a's, nothing on b
        assert httpx.get(a.base + "/", headers={"Cookie": f"{nb}={vb}"}, timeout=5, trust_env=False).status_code == 403
        ws = f"ws://127.0.0.1:{a.port}/ws?width=80&height=24"
        assert asyncio.run(_ws_status(ws, {"Cookie": f"{na}={va}"})) == 403  # replayed outside a browser: no Origin
        assert asyncio.run(_ws_status(ws + f"&token={a.token}", {})) == 403
        assert asyncio.run(_ws_status(ws, {"Cookie": f"{na}={va}", "Origin": b.base})) == 403
        assert asyncio.run(_ws_status(ws, {"Cookie": both, "Origin": a.base})) == 101
    finally:
        a.close()
        b.close()


def test_ipv6_loopback_url_is_bracketed_on_the_line_and_in_the_page(frozen_path):
    try:
        _port(socket.AF_INET6, "::1")
    except OSError:
        pytest.skip("no IPv6 loopback")
    w = Web(["--replay", str(frozen_path)], host="::1")
    try:
        assert f"http://[::1]:{w.port}/?token=" in w.line
        page = httpx.get(f"{w.base}/?token={w.token}", timeout=5, trust_env=False, follow_redirects=True)
        assert page.status_code == 200
        assert f"ws://[::1]:{w.port}/ws" in page.text
    finally:
        w.close()


async def _open_tabs(w: Web, n: int, until) -> list:
    s = aiohttp.ClientSession()
    tabs = []
    for _ in range(n):
        ws = await s.ws_connect(f"ws://127.0.0.1:{w.port}/ws?width=100&height=30&token={w.token}",
                                headers={"Origin": w.base})
        await ws.send_str(json.dumps(["resize", {"width": 100, "height": 30}]))
        tabs.append(ws)
    end = time.monotonic() + 90
    while time.monotonic() < end and not until():
        for ws in tabs:
            try:
                await asyncio.wait_for(ws.receive(), 0.05)
            except asyncio.TimeoutError:
                pass
    return [s, tabs]


def test_kill9_of_web_leaves_no_tab_simulator_or_watchdog(knee_path):
    # The knee test model keeps the HTTP simulator (`kvtui sim serve`, a process that could be
    # orphaned): the demo itself now runs in process, paced (kvtui.explore.pacing.paces).
    w = Web([str(knee_path), "--start"])
    seen: dict[int, str] = {}

    def sim_up() -> bool:
        seen.update(_descendants(w.proc.pid))
        return any(" sim serve " in _cmd(p) for p in seen) and any("procs.watchdog" in _cmd(p) for p in seen)

    async def go() -> None:
        s, tabs = await _open_tabs(w, 1, sim_up)
        assert sim_up(), "the tab's simulator did not start"
        os.kill(w.proc.pid, signal.SIGKILL)  # the process alone, as `kill -9 PID` does (not its group)
        w.proc.wait()
        await s.close()

    try:
        asyncio.run(go())
        wait_until(lambda: not _alive(seen), 20, "every process of the tab gone after kill -9 of kvtui web")
    finally:
        for p in _alive(seen):
            os.kill(p, signal.SIGKILL)
        w.close()


def test_sigterm_with_five_tabs_open_exits_within_a_bound(frozen_path):
    w = Web(["--replay", str(frozen_path)])
    seen: dict[int, str] = {}

    def five() -> bool:
        seen.update(_descendants(w.proc.pid))
        return sum(" replay " in _cmd(p) for p in _alive(seen)) >= 5

    async def go() -> float:
        s, tabs = await _open_tabs(w, 5, five)
        assert five(), "five tabs did not start"
        t = time.monotonic()
        w.proc.send_signal(signal.SIGTERM)
        while w.proc.poll() is None and time.monotonic() - t < 30:
            await asyncio.sleep(0.05)
        await s.close()
        return time.monotonic() - t

    try:
        took = asyncio.run(go())
        # bounded work, not an SLO: every tab is stopped at once (SIGTERM, 3 s, SIGKILL); one after
        # another, five took 19.6 s
        assert w.proc.returncode is not None and took < 8.0, f"kvtui web took {took:.1f} s to stop with 5 tabs"
        wait_until(lambda: not _alive(seen), 10, "every tab's process gone")
    finally:
        for p in _alive(seen):
            os.kill(p, signal.SIGKILL)
        w.close()
