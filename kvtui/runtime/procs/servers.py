"""Small helper servers kvtui (and its tests and benches) start: own process group, streamed
log, readiness on /health, the reaper's escalating stop.

The engines (vLLM, the simulator) go through `kvtui.runtime.engines.vllm.launcher.VllmEngine`; this
is for the plain servers around them (fault servers in tests, benchmark peers).
"""

from __future__ import annotations

import collections
import os
import socket
import subprocess
import threading
from typing import Callable

import httpx

from kvtui import clock
from kvtui.errors import EngineError
from kvtui.runtime.procs import reaper
from kvtui.secrets import Redactor, redact_args


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, cmd: list[str], env: dict[str, str] | None = None, on_log: Callable[[str], None] | None = None,
                 secrets: list[str] | None = None, tail_lines: int = 200):
        self.cmd = cmd
        self.env = {**os.environ, **(env or {}), **reaper.server_env()}
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
        reaper.register(self.pgid, " ".join(self.redacted_command()))
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

    def wait_ready(self, health_url: str, timeout_s: float, what: str = "server") -> None:
        """Poll `health_url` until 200; fail fast when the process exits."""
        deadline = clock.monotonic() + timeout_s
        from kvtui.safeio import fetch, http_client

        with http_client(timeout=2.0) as c:
            while True:
                code = self.popen.poll() if self.popen else -1
                if code is not None:
                    self.exit_code = code
                    if self._reader:
                        self._reader.join(2)
                    if self.pgid is not None:
                        reaper.unregister(self.pgid)
                    raise EngineError("crashed", f"{what} exited with code {code} during startup", self.tail())
                try:
                    # a whole answer within 2 s (and never past the start's deadline): a trickling
                    # /health is a server not ready, not a wait without end
                    left = max(0.1, min(2.0, deadline - clock.monotonic()))
                    if fetch(c, "GET", health_url, total_s=left).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if clock.monotonic() > deadline:
                    self.stop()
                    raise EngineError("timeout", f"{what} not ready within {timeout_s:g} s", self.tail())
                clock.sleep(0.1)

    def stop(self, timeout_s: float = 10.0) -> None:
        """The reaper's SIGINT → SIGTERM → SIGKILL to the whole group; reap. Idempotent."""
        if self.popen is None or self.pgid is None:
            return
        reaper.terminate(self.popen, self.pgid, timeout_s, graceful=self.popen.poll() is None)
        self.exit_code = self.popen.returncode
        if self._reader is not None:
            self._reader.join(2)
        if self.popen.stdout:
            self.popen.stdout.close()
