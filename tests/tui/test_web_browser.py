"""`kvtui web` in a real browser: headless Chromium, driven over its DevTools protocol (CDP).

Issue 30 item 8 asks that the page load nothing from a third-party host, send no referrer, and
not keep the token in the URL; tests/reliability/test_web_guard.py checks the HTTP side with a
plain client. Here a browser does what a person's browser does: it opens the printed URL, runs
the page's JavaScript, opens the websocket and draws the dashboard. Every request it makes is
recorded (Network.requestWillBeSent), so a font or script from another host fails the test.

Skips where no Chromium is installed (.ci/run installs Debian's `chromium` where it can).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from kvtui.runtime.procs.servers import free_port

pytestmark = pytest.mark.slow

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


class Cdp:
    """The least of a CDP client: commands by id, events kept in order."""

    def __init__(self, ws):
        self.ws, self.n, self.events, self.waiting = ws, 0, [], {}

    async def pump(self):
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.waiting:
                self.waiting.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def call(self, method, **params):
        self.n += 1
        fut = asyncio.get_running_loop().create_future()
        self.waiting[self.n] = fut
        await self.ws.send_str(json.dumps({"id": self.n, "method": method, "params": params}))
        res = await asyncio.wait_for(fut, 30)
        assert "error" not in res, res
        return res["result"]

    async def js(self, expr):
        r = await self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        return r["result"].get("value")


async def _browse(url: str, port: int, shot: Path) -> dict:
    import aiohttp

    async with aiohttp.ClientSession() as s:
        end = time.monotonic() + 30
        while True:
            try:
                async with s.get(f"http://127.0.0.1:{port}/json") as r:
                    targets = await r.json()
                page = next(t for t in targets if t.get("type") == "page")
                break
            except (aiohttp.ClientError, StopIteration):
                if time.monotonic() > end:
                    raise
                await asyncio.sleep(0.2)
        async with s.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            cdp = Cdp(ws)
            pump = asyncio.create_task(cdp.pump())
            await cdp.call("Network.enable")
            await cdp.call("Page.enable")
            await cdp.call("Page.navigate", url=url)
            end = time.monotonic() + 60
            drawn = False
            while time.monotonic() < end and not drawn:  # the first byte of the app's screen arrived
                drawn = bool(await cdp.js("document.body && document.body.classList.contains('-first-byte')"))
                await asyncio.sleep(0.3)
            await asyncio.sleep(2.0)  # a few frames more: the dashboard drawn, any late asset requested
            href = await cdp.js("location.href")
            cookie_js = await cdp.js("document.cookie")
            png = await cdp.call("Page.captureScreenshot", format="png")
            shot.write_bytes(base64.b64decode(png["data"]))
            pump.cancel()
    requests = [e["params"]["request"]["url"] for e in cdp.events if e["method"] == "Network.requestWillBeSent"]
    ws_urls = [e["params"]["url"] for e in cdp.events if e["method"] == "Network.webSocketCreated"]
    responses = [e["params"]["response"] for e in cdp.events if e["method"] == "Network.responseReceived"]
    return {"drawn": drawn, "href": href, "cookie_js": cookie_js, "requests": requests, "ws": ws_urls,
            "responses": responses}


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (Debian: apt-get install chromium)")
def test_a_browser_draws_the_dashboard_from_loopback_alone_and_drops_the_token_from_the_url(frozen_path, tmp_path):
    web_port, cdp_port = free_port(), free_port()
    web = subprocess.Popen([sys.executable, "-m", "kvtui", "web", "--replay", str(frozen_path), "--port", str(web_port)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": ""})
    browser = None
    try:
        line = web.stdout.readline().decode()
        url = line.split(" at ", 1)[1].split()[0]
        token = url.rsplit("?token=", 1)[1]
        browser = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                    "--disable-background-networking", "--disable-component-update",
                                    f"--remote-debugging-port={cdp_port}", f"--user-data-dir={tmp_path / 'profile'}",
                                    "--window-size=1400,900", "about:blank"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        seen = asyncio.run(_browse(url, cdp_port, tmp_path / "web.png"))
    finally:
        if browser is not None:
            os.killpg(browser.pid, signal.SIGKILL)
            browser.wait()
        web.send_signal(signal.SIGINT)
        try:
            web.wait(timeout=15)
        except subprocess.TimeoutExpired:
            web.kill()
            web.wait()
    assert seen["drawn"], "the page never received the app's first screen"
    # Everything the page loaded came from kvtui's loopback server: no font host, no CDN.
    pages = [u for u in seen["requests"] + seen["ws"] if not u.startswith(("data:", "blob:", "about:"))]
    assert pages and all(urlsplit(u).hostname == "127.0.0.1" for u in pages), pages
    # The token was traded for a cookie the page's scripts cannot read, and left the address bar.
    assert token not in seen["href"] and "token=" not in seen["href"], seen["href"]
    assert token not in (seen["cookie_js"] or "")
    doc = [r for r in seen["responses"] if r.get("mimeType") == "text/html" and r.get("status") == 200]
    assert doc and all({k.lower(): v for k, v in r["headers"].items()}.get("referrer-policy") == "no-referrer"
                       for r in doc)
    assert (tmp_path / "web.png").stat().st_size > 0
