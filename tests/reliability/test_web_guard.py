"""`kvtui web` needs its per-run token and its own Origin: real HTTP and WebSocket against the real server.

Refused (403, no app started): no token, a wrong token, a foreign Origin even with the token,
a foreign Host (DNS rebinding). Accepted: the printed URL; then the cookie it set, from the
page's own origin.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from reliability_helpers import descendants, free_port, wait_until

aiohttp = pytest.importorskip("aiohttp")


def _apps(root: int) -> list[int]:
    out = []
    for pid in descendants(root):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if " replay " in cmd:
            out.append(pid)
    return out


async def _ws_status(url: str, headers: dict) -> int:
    async with aiohttp.ClientSession() as s:
        try:
            async with s.ws_connect(url, headers=headers) as ws:
                await ws.close()
                return 101
        except aiohttp.WSServerHandshakeError as e:
            return e.status


def test_web_refuses_without_the_token_or_from_a_foreign_origin(tmp_path, knee_path):
    snap = tmp_path / "s.json"
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", str(knee_path), "--headless", "--fast", "--out", str(snap),
                        "--set", "server.extra_args=[]", "--set", "ramp.max=4"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    port = free_port()
    web = subprocess.Popen([sys.executable, "-m", "kvtui", "web", "--replay", str(snap), "--port", str(port)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True, text=True)
    try:
        line = web.stdout.readline()
        assert f"http://127.0.0.1:{port}/?token=" in line
        token = line.rsplit("?token=", 1)[1].split()[0]
        assert len(token) >= 24
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(base + "/static/css/xterm.css", timeout=2, trust_env=False).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, 60, "kvtui web answering", web)
        get = lambda path, **kw: httpx.get(base + path, timeout=5, trust_env=False, **kw)  # noqa: E731
        assert get("/").status_code == 403
        assert get("/?token=" + "x" * len(token)).status_code == 403
        assert get(f"/?token={token}", headers={"Origin": "http://evil.example.com"}).status_code == 403
        assert get(f"/?token={token}", headers={"Host": f"evil.example.com:{port}"}).status_code == 403
        first = get(f"/?token={token}")  # the token leaves the URL: a cookie and a redirect to the clean URL
        set_cookie = first.headers.get("set-cookie", "")
        assert first.status_code == 303 and first.headers["location"] == "/", first.headers
        assert "kvtui_web_token" in set_cookie and "httponly" in set_cookie.lower() and "strict" in set_cookie.lower()
        assert first.headers.get("referrer-policy") == "no-referrer"
        head = httpx.head(base + f"/?token={token}", timeout=5, trust_env=False)  # HEAD is answered as GET is
        assert head.status_code == 303 and head.headers["location"] == "/", head.headers
        assert httpx.head(base + "/", timeout=5, trust_env=False).status_code == 403
        cookie = set_cookie.split(";", 1)[0]  # named for this instance (issue 50): kvtui_web_token_PORT_ID=…
        assert cookie.startswith(f"kvtui_web_token_{port}_") and cookie.endswith("=" + token)
        page = get("/", headers={"Cookie": cookie})
        assert page.status_code == 200 and page.headers.get("referrer-policy") == "no-referrer"
        assert "fonts.googleapis.com" not in page.text and "fonts.gstatic.com" not in page.text
        assert token not in page.text  # the page itself does not carry the token either
        assert get("/static/css/xterm.css").headers.get("referrer-policy") == "no-referrer"
        ws = f"ws://127.0.0.1:{port}/ws?width=80&height=24"
        own = {"Origin": base}
        assert asyncio.run(_ws_status(ws, own)) == 403  # no token
        assert asyncio.run(_ws_status(ws + "&token=nope", own)) == 403
        assert asyncio.run(_ws_status(ws + f"&token={token}", {"Origin": "http://evil.example.com"})) == 403
        assert asyncio.run(_ws_status(ws, {"Origin": "http://evil.example.com", "Cookie": cookie})) == 403
        assert asyncio.run(_ws_status(ws, {"Origin": "null", "Cookie": cookie})) == 403
        time.sleep(1)
        assert _apps(web.pid) == [], "a refused connection started an app"
        assert asyncio.run(_ws_status(ws, {**own, "Cookie": cookie})) == 101  # the page's own websocket
    finally:
        os.killpg(web.pid, signal.SIGTERM)
        try:
            web.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(web.pid, signal.SIGKILL)
            web.wait()
