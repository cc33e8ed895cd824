"""`kvtui web [SCENARIO.toml]`: the same app in a browser, through textual-serve, on 127.0.0.1.

Every browser tab gets its own kvtui process (and its own run): made for showing a room
the simulated demo or a replay, not for sharing one live run.
"""

from __future__ import annotations

import argparse
import ipaddress
import shlex
import sys


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "web", help="serve the dashboard to a browser (textual-serve, loopback)",
        description="Serve the dashboard at http://127.0.0.1:PORT; each browser tab runs its own kvtui.",
    )
    p.add_argument("scenario", nargs="?", help="scenario file (default: the simulated demo)")
    p.add_argument("--replay", metavar="SNAPSHOT", help="serve the replay of this snapshot instead")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; loopback only "
                   "unless --allow-remote)")
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host (anyone who reaches it "
                   "can start runs on this machine)")
    p.add_argument("--start", action="store_true", help="with a scenario: start the run at once")
    p.add_argument("--theme", help="theme name")
    p.set_defaults(func=run)
    return p


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def app_command(args: argparse.Namespace) -> list[str]:
    cmd = [sys.executable, "-m", "kvtui"]
    if args.replay:
        cmd += ["replay", args.replay]
    else:
        cmd += ["tui"] + ([args.scenario] if args.scenario else [])
        if args.start and args.scenario:
            cmd.append("--start")
    if args.theme:
        cmd += ["--theme", args.theme]
    return cmd


def run(args: argparse.Namespace) -> int:
    from kvtui.errors import UsageError

    if not _loopback(args.host) and not args.allow_remote:
        raise UsageError(f"--host {args.host} is not loopback: add --allow-remote to serve beyond this machine")
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port}: not a TCP port")
    if args.theme:
        from kvtui.cli.launch_checks import check_theme

        check_theme(args.theme)
    if args.replay:
        from kvtui.io.snapshot.file import load_snapshot
        from kvtui.report.wellformed import require_facts, require_renderable

        doc = load_snapshot(args.replay)  # a bad file fails here, not in every browser tab
        require_renderable(doc, args.replay)
        require_facts(doc, args.replay)
    elif args.scenario:
        from kvtui.io.scenario import load_scenario

        load_scenario(args.scenario)
    import secrets

    argv = app_command(args)
    cmd = shlex.join(argv)
    token = secrets.token_urlsafe(24)
    _event_loop_made_whole()
    server = guarded_server(cmd, args.host, args.port, token, argv=argv)
    # Printed once, here only: whoever has this URL can start runs on this machine.
    print(f"kvtui: serving {cmd!r} at {server.public_url}/?token={token} (Ctrl-C to stop)", flush=True)
    try:
        server.serve()
    finally:
        _stop_tabs()  # every tab's kvtui (and, through it, its servers) goes with this process
    return 0


def _event_loop_made_whole() -> None:
    """The loop textual-serve runs on (it takes the current one), made with Ctrl-C held back.

    A Ctrl-C that landed inside the loop's construction, before textual-serve installs its own
    handler, left a half-made loop whose finaliser printed a traceback after "interrupted" (seen
    once under load). Blocked during the few microseconds it takes, the signal is delivered after."""
    import asyncio
    import signal

    held = {signal.SIGINT, signal.SIGTERM}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        asyncio.set_event_loop(asyncio.new_event_loop())
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


TOKEN_COOKIE = "kvtui_web_token"  # the prefix: each instance's cookie is named after its port and a random id
STOP_GRACE_S = 3.0  # SIGTERM to every tab's kvtui at once, then SIGKILL: a stop is bounded


def url_host(host: str) -> str:
    """The host as written in a URL: an IPv6 address in brackets (`[::1]`)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def cookie_name(port: int, instance: str) -> str:
    """This instance's cookie. Browsers do not separate cookies by port: one name for every
    `kvtui web` let a second instance overwrite the first one's cookie (locking it out)."""
    return f"{TOKEN_COOKIE}_{port}_{instance}"


def guarded_server(cmd: str, host: str, port: int, token: str, argv: list[str] | None = None):
    """textual-serve's server, behind a per-instance token and an Origin/Host check.

    Without them any web page the user visited could open a WebSocket to 127.0.0.1 and drive
    the setup screen (open any scenario, start servers). So:
    - every request but the static assets (the page's JS and CSS, no data) needs the token:
      `?token=` in the URL (printed once at start) or the cookie the page sets from it
      (HttpOnly, SameSite=Strict: a cross-site page never sends it), named for this instance
      alone (`cookie_name`: port and a random id), so that two instances coexist;
    - a request with an `Origin` header must come from this server's own origin, and the
      WebSocket (which starts a kvtui per connection) needs that Origin: a client that sends
      none (a replayed cookie outside a browser) is refused; the `Host` must be this server's
      (DNS rebinding);
    - each tab's kvtui is started without a shell, in a process group of its own registered with
      kvtui's reaper: a stop (SIGTERM, Ctrl-C) ends them all within `STOP_GRACE_S`, and the
      reaper's watchdog ends them when this process dies unseen (kill -9).
    """
    import hmac
    import secrets

    from aiohttp import web
    from textual_serve.server import Server

    names = {url_host(host), "127.0.0.1", "localhost", "[::1]"} if _loopback(host) else {url_host(host)}
    hosts = {f"{h}:{port}" for h in names}
    origins = {f"http://{h}" for h in hosts}
    cookie = cookie_name(port, secrets.token_hex(4))

    @web.middleware
    async def guard(request: web.Request, handler):
        origin = request.headers.get("Origin")
        if origin is not None and origin not in origins:
            return web.Response(status=403, text="kvtui web: requests from another origin are refused\n")
        if request.host not in hosts:
            return web.Response(status=403, text="kvtui web: unknown Host\n")
        if request.path.startswith("/static/"):
            return await handler(request)
        if request.path == "/ws" and origin is None:
            return web.Response(status=403, text="kvtui web: a WebSocket needs this page's Origin\n")
        given = request.query.get("token") or request.cookies.get(cookie) or ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            return web.Response(status=403, text="kvtui web: open the URL with ?token=… that `kvtui web` printed\n")
        if request.path == "/" and "token" in request.query and request.method in ("GET", "HEAD"):
            # The token leaves the URL after the first load (history, screenshots, a shared link):
            # exchanged for an HttpOnly SameSite=Strict cookie and a redirect to the clean URL. HEAD
            # too: a link checker or preview fetcher that sends HEAD first gets the same answer as GET.
            rest = {k: v for k, v in request.query.items() if k != "token"}
            to = web.Response(status=303, headers={"Location": str(request.rel_url.with_query(rest))})
            to.set_cookie(cookie, token, httponly=True, samesite="Strict", path="/")
            return to
        resp = await handler(request)
        if isinstance(resp, web.Response) and resp.content_type == "text/html" and resp.body is not None:
            resp.text = _local_fonts(resp.text or "")  # no third-party font host (its request would leak the visit)
        return resp

    async def no_referrer(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["Referrer-Policy"] = "no-referrer"

    exec_argv = list(argv) if argv else shlex.split(cmd)

    class GuardedServer(Server):
        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(guard)
            app.on_response_prepare.append(no_referrer)
            return app

        async def on_startup(self, app: web.Application) -> None:
            pass  # textual-serve prints the URL without the token; ours is printed once, above

        def serve(self, debug: bool = False) -> None:
            """textual-serve's serve, with a bound on how long a stop waits for open connections
            (aiohttp's default is 60 s): the tabs are stopped first, this is the net."""
            import asyncio
            import signal as _signal

            self.debug = debug
            self.initialize_logging()
            loop = asyncio.get_event_loop()
            for sig in (_signal.SIGINT, _signal.SIGTERM):
                loop.add_signal_handler(sig, self.request_exit)
            web.run_app(self._make_app(), host=self.host, port=self.port, handle_signals=False, loop=loop,
                        print=lambda *args: None, shutdown_timeout=STOP_GRACE_S + 2.0)

        def request_exit(self) -> None:
            # SIGTERM or Ctrl-C: the tabs' processes first (bounded), so that no open WebSocket
            # holds the server's close for as long as its tab takes to quit on its own (5 tabs: 19.6 s).
            _stop_tabs()
            super().request_exit()

        async def on_shutdown(self, app: web.Application) -> None:
            _stop_tabs()

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            """textual-serve's handler, with `TabService` for its AppService."""
            import asyncio

            from textual_serve.server import to_int

            # A close waits at most 2 s for the client's answer (10 by default): a stop is bounded.
            websocket = web.WebSocketResponse(heartbeat=15, timeout=2.0)
            width = to_int(request.query.get("width", "80"), 80)
            height = to_int(request.query.get("height", "24"), 24)
            app_service = None
            try:
                await websocket.prepare(request)
                app_service = tab_service(self.command, write_bytes=websocket.send_bytes,
                                          write_str=websocket.send_str, close=websocket.close,
                                          download_manager=self.download_manager, debug=self.debug)
                await app_service.start(width, height)
                try:
                    await self._process_messages(websocket, app_service)
                finally:
                    await app_service.stop()
            except asyncio.CancelledError:
                await websocket.close()
            except Exception:  # textual-serve logs it the same way
                import logging

                logging.getLogger("textual-serve").exception("kvtui web: a tab failed")
            finally:
                if app_service is not None:
                    await app_service.stop()
            return websocket

    from textual_serve.app_service import AppService

    tab_service = _tab_service(AppService, exec_argv)

    return GuardedServer(cmd, host=host, port=port, title="kvtui", public_url=f"http://{url_host(host)}:{port}")


def _tab_service(base: type, argv: list[str]) -> type:
    """textual-serve's AppService, its process started without a shell in a registered group."""
    import asyncio

    from kvtui.runtime.procs import reaper

    class TabService(base):
        async def _open_app_process(self, width: int = 80, height: int = 24):
            env = {**self._build_environment(width=width, height=height), **reaper.server_env()}
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True,
            )
            self._process = process
            self._stdin = process.stdin
            reaper.register(process.pid, "kvtui web tab")
            if _stopping:  # started while the stop ran (spawned, not yet registered when it looked)
                _stop_tabs()

            async def forget() -> None:
                await process.wait()
                reaper.unregister(process.pid)
                try:  # the tab's process ended (quit, killed, crashed): its WebSocket goes too
                    await self.remote_close()
                except Exception:  # already closed, or the client went first
                    pass

            self._forget = asyncio.ensure_future(forget())
            return process

    return TabService


_stopping = False  # set by the first stop: a tab that starts after it is stopped at once


def _stop_tabs() -> None:
    """Every tab's kvtui still running: SIGTERM all at once, SIGKILL after STOP_GRACE_S."""
    global _stopping
    from kvtui.runtime.procs import reaper

    _stopping = True

    if reaper.registered():
        reaper.reap_all(grace_s=STOP_GRACE_S)


def _local_fonts(html: str) -> str:
    """The page without links to a third-party font host: the system's monospace instead."""
    import re

    html = re.sub(r"<link[^>]*fonts\.(googleapis|gstatic)\.com[^>]*>", "", html, flags=re.S)
    return re.sub(r"['\"]?Roboto Mono['\"]?\s*,?", "", html)
