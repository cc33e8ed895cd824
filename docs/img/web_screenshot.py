"""Screenshot `kvtui web` in headless Chromium (Debian's `chromium`), for docs/TUI.md. Not part of CI.

    apt-get install -y chromium
    .venv/bin/python docs/img/web_screenshot.py docs/img/kvtui-web.png            # the demo, after 90 s
    .venv/bin/python docs/img/web_screenshot.py out.png --wait 8 -- --replay docs/results/h200-v2.json

Starts `kvtui web` on a free loopback port, starts chromium with a DevTools port, opens the
page, waits (real time: the dashboard fills as the run goes), captures the page through the
DevTools protocol, then stops both (by their process ids).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, limit_s: float = 60) -> httpx.Response:
    end = time.monotonic() + limit_s
    while True:
        try:
            r = httpx.get(url, timeout=2, trust_env=False)
            if r.status_code == 200:
                return r
        except httpx.HTTPError:
            pass
        if time.monotonic() > end:
            raise SystemExit(f"no answer from {url}")
        time.sleep(0.3)


async def capture(devtools_ws: str, url: str, wait_s: float, width: int, height: int) -> bytes:
    import aiohttp

    async with aiohttp.ClientSession() as s:
        async with s.ws_connect(devtools_ws, max_msg_size=0) as ws:
            n = 0

            async def call(method: str, **params):
                nonlocal n
                n += 1
                await ws.send_str(json.dumps({"id": n, "method": method, "params": params}))
                while True:
                    msg = json.loads((await ws.receive()).data)
                    if msg.get("id") == n:
                        return msg.get("result", {})

            await call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
            await call("Page.enable")
            await call("Page.navigate", url=url)
            await asyncio.sleep(wait_s)
            shot = await call("Page.captureScreenshot", format="png")
            return base64.b64decode(shot["data"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--wait", type=float, default=90.0, help="seconds to let the dashboard fill (default 90)")
    ap.add_argument("--size", default="1600x1000", help="browser window, pixels")
    argv = sys.argv[1:]
    web_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, web_args = argv[:i], argv[i + 1:]
    a = ap.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        raise SystemExit("chromium not found (Debian: apt-get install -y chromium)")
    w, h = (int(x) for x in a.size.split("x"))
    port, dport = free_port(), free_port()
    profile = tempfile.mkdtemp(prefix="kvtui-chromium-")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    web = subprocess.Popen([sys.executable, "-m", "kvtui", "web", "--port", str(port), *web_args], cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    chrome = subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               "--disable-background-networking", f"--user-data-dir={profile}", "--hide-scrollbars",
                               f"--window-size={w},{h}", f"--remote-debugging-port={dport}", "about:blank"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/")
        targets = wait_http(f"http://127.0.0.1:{dport}/json/list").json()
        page = next(t for t in targets if t.get("type") == "page")
        png = asyncio.run(capture(page["webSocketDebuggerUrl"], f"http://127.0.0.1:{port}/", a.wait, w, h))
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_bytes(png)
        print(f"wrote {a.out} ({len(png)} bytes)")
    finally:
        for p in (chrome, web):
            p.send_signal(signal.SIGINT if p is web else signal.SIGTERM)
        for p in (chrome, web):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(profile, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
