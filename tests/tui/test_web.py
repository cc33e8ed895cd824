"""`kvtui web`: textual-serve on loopback; a websocket client gets the dashboard; closing ends the app."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from kvtui.runtime.procs.servers import free_port

from tui_helpers import descendants

pytestmark = pytest.mark.slow


def test_web_refuses_a_public_host_without_asking(frozen_path):
    r = subprocess.run([sys.executable, "-m", "kvtui", "web", "--replay", str(frozen_path), "--host", "0.0.0.0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--allow-remote" in r.stderr


def test_web_serves_the_dashboard(frozen_path):
    aiohttp = pytest.importorskip("aiohttp")
    port = free_port()
    before = descendants()
    proc = subprocess.Popen([sys.executable, "-m", "kvtui", "web", "--replay", str(frozen_path), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": ""})
    try:
        # Since issue 18 the page and the websocket need the per-run token kvtui printed once.
        line = proc.stdout.readline().decode()
        token = line.rsplit("?token=", 1)[1].split()[0]
        end = time.monotonic() + 60
        page = None
        while time.monotonic() < end:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/?token={token}", timeout=2, trust_env=False,
                              follow_redirects=True)  # the token is exchanged for a cookie, then /
                if r.status_code == 200:
                    page = r.text
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        assert page is not None, "textual-serve did not answer"
        assert f"127.0.0.1:{port}/ws" in page

        async def screen_over_websocket() -> str:
            seen = b""
            async with aiohttp.ClientSession() as s:
                async with s.ws_connect(f"ws://127.0.0.1:{port}/ws?width=120&height=40&token={token}",
                                        headers={"Origin": f"http://127.0.0.1:{port}"}) as ws:  # issue 50
                    await ws.send_str(json.dumps(["resize", {"width": 120, "height": 40}]))
                    loop = asyncio.get_running_loop()
                    stop = loop.time() + 60
                    while loop.time() < stop and not all(w in seen for w in (b"SIMULATED", b"REPLAY", b"TTFT")):
                        try:
                            msg = await asyncio.wait_for(ws.receive(), timeout=5)
                        except asyncio.TimeoutError:
                            continue
                        if msg.type == aiohttp.WSMsgType.BINARY:
                            seen += msg.data
                        elif msg.type == aiohttp.WSMsgType.TEXT:
                            seen += msg.data.encode()
                        else:
                            break
            return seen.decode(errors="replace")

        screen = asyncio.run(screen_over_websocket())
        assert "SIMULATED" in screen and "REPLAY" in screen and "TTFT" in screen
        # The browser left: its app process ends.
        end = time.monotonic() + 30
        while time.monotonic() < end:
            apps = [c for p, c in descendants().items() if p not in before and " replay " in c and " web " not in c]
            if not apps:
                break
            time.sleep(0.2)
        assert not apps, apps
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
