"""A server process kvtui owns: own process group, streamed log, readiness, escalating stop.

Every live group is registered; `kill_all()` runs at interpreter exit and from the
signal handlers the run installs, so a crash, Ctrl-C or a dropped SSH session never
leaves a server holding the GPU.
"""

from __future__ import annotations

import atexit
import collections
import os
import signal
import socket
import subprocess
import threading
import time
from typing import Callable

import httpx

from kvtui.errors import EngineError
from kvtui.report.redact import Redactor, redact_args

_LIVE: dict[int, "ServerProcess"] = {}
_LIVE_LOCK = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def kill_all() -> None:
    """Kill every registered server group at once (exit paths: no time for a graceful stop)."""
    with _LIVE_LOCK:
        procs = list(_LIVE.values())
    for p in procs:
        p._signal_group(signal.SIGKILL)


atexit.register(kill_all)


class ServerProcess:
    def __init__(self, cmd: list[str], env: dict[str, str] | None = None, on_log: Callable[[str], None] | None = None,
                 secrets: list[str] | None = None, tail_lines: int = 200):
        self.cmd = cmd
        self.env = {**os.environ, **(env or {})}
        self.on_log = on_log
        self.redact = Redactor(secrets or [])
        self.tail_buf: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self.popen: subprocess.Popen | None = None
        self.pgid: int | None = None
        self._reader: threading.Thread | None = None
        self.exit_code: int | None = None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def redacted_command(self) -> list[str]:
        return [self.redact(a) for a in redact_args(self.cmd)]

    def start(self) -> None:
        try:
            self.popen = subprocess.Popen(
                self.cmd, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True, text=True, encoding="utf-8", errors="replace", bufsize=1,
            )
        except OSError as e:
            raise EngineError("launch", f"cannot start {self.cmd[0]}: {e.strerror or e}")
        self.pgid = self.popen.pid  # start_new_session: the child leads its own group
        with _LIVE_LOCK:
            _LIVE[self.pgid] = self
        self._reader = threading.Thread(target=self._read, name=f"kvtui-log-{self.pgid}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen is not None and self.popen.stdout is not None
        for line in self.popen.stdout:
            line = self.redact(line.rstrip("\n"))
            self.tail_buf.append(line)
            if self.on_log:
                try:
                    self.on_log(line)
                except Exception:
                    pass

    def tail(self, n: int = 40) -> str:
        return "\n".join(list(self.tail_buf)[-n:])

    def wait_ready(self, health_url: str, timeout_s: float, what: str = "server",
                   classify: Callable[[str, int | None], tuple[str, str]] | None = None) -> None:
        """Poll `health_url` until 200; fail fast when the process exits."""
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0, trust_env=False) as c:
            while True:
                code = self.popen.poll() if self.popen else -1
                if code is not None:
                    self.exit_code = code
                    if self._reader:
                        self._reader.join(2)
                    self._unregister()
                    kind, msg = classify(self.tail(80), code) if classify else ("crashed", f"{what} exited with code {code} during startup")
                    raise EngineError(kind, msg, self.tail())
                try:
                    if c.get(health_url).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise EngineError("timeout", f"{what} not ready within {timeout_s:g} s", self.tail())
                time.sleep(0.25)

    def check_alive(self, health_url: str | None = None) -> str | None:
        if self.popen is None:
            return "not started"
        code = self.popen.poll()
        if code is not None:
            self.exit_code = code
            return f"process exited with code {code}" + (f" (signal {-code})" if code < 0 else "")
        if health_url:
            try:
                r = httpx.get(health_url, timeout=3.0, trust_env=False)
                if r.status_code >= 500:
                    return f"/health answered HTTP {r.status_code} (engine dead)"
            except httpx.HTTPError:
                pass
        return None

    def _signal_group(self, sig: int) -> None:
        if self.pgid is None:
            return
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _group_alive(self) -> bool:
        if self.pgid is None:
            return False
        try:
            os.killpg(self.pgid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGINT, then SIGTERM, then SIGKILL to the whole group; reap. Idempotent."""
        if self.popen is None:
            return
        steps = ((signal.SIGINT, timeout_s * 0.5), (signal.SIGTERM, timeout_s * 0.4), (signal.SIGKILL, 5.0))
        for sig, wait_s in steps:
            if self.popen.poll() is not None and not self._group_alive():
                break
            self._signal_group(sig)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if self.popen.poll() is not None and not self._group_alive():
                    break
                time.sleep(0.05)
        try:
            self.exit_code = self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self._reader is not None:
            self._reader.join(2)
        if self.popen.stdout:
            self.popen.stdout.close()
        self._unregister()

    def _unregister(self) -> None:
        with _LIVE_LOCK:
            if self.pgid in _LIVE:
                del _LIVE[self.pgid]
