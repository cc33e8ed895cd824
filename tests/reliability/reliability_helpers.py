"""Shared pieces of the reliability tests: real kvtui runs, real servers, the process table.

Every kvtui started here carries a unique KVTUI_RELIABILITY_TAG in its environment; every
process it starts (simulator, load workers) inherits it. After a test, scanning
/proc/*/environ for the tag finds any process left behind, whoever its parent is now
(an orphan is re-parented to init, so its parent chain no longer leads to the test's run).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx
import pytest

import proc_helpers
from proc_helpers import _stat, cmdline, pids, wait_until  # noqa: F401 - this module's names for them

HERE = Path(__file__).resolve().parent
TAG_ENV = "KVTUI_RELIABILITY_TAG"

# The simulator's knee model: 20 ms per engine step up to 6 running requests, 3x above.
# Short steps (0.2 s warm-up, 1 s window) keep every run to seconds.
# TPOT 20 ms up to the knee (6), 80 ms a step above; the target 45 ms. A busy host only adds delay, so the
# knee's own steps need room below the target (with 35, a loaded box once moved the knee to 5); one above it
# mixes 20 and 80 ms steps as its requests turn over (TPOT p95 67 ms at 7 here; 51.5 with 60 ms steps, too
# near a 50 ms target).
KNEE = """
name = "rel"
[server]
engine = "sim"
max_model_len = 2048
time_scale = 1
stop_timeout_s = 5
extra_args = ["--knee", "6", "--knee-tpot-ms", "20", "--knee-slowdown", "4"]
[[modes]]
name = "first"
[[modes]]
name = "second"
[workload]
prompt_tokens = 64
output_tokens = 16
[ramp]
start = 1
max = 16
step = "double"
warmup_s = 0.2
window_s = 1
request_timeout_s = 30
drain_timeout_s = 10
[slo]
tpot_p95_ms = 45
"""

# One mode against an external (fault) server: a few short steps.
EXTERNAL = """
name = "ext"
[server]
engine = "external"
url = "{url}"
max_model_len = 4096
[[modes]]
name = "baseline"
[workload]
prompt_tokens = 16
output_tokens = 8
[ramp]
start = 2
max = 4
step = "+2"
search = "linear"
warmup_s = 0.2
window_s = 1
request_timeout_s = 10
drain_timeout_s = 5
max_error_burst = 10
[slo]
tpot_p95_ms = 500
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- the process table


def tagged(tag: str) -> list[tuple[int, str]]:
    """Live (not zombie) processes whose environment carries this test's tag (not pytest, nor its resource tracker)."""
    return proc_helpers.tagged(tag, TAG_ENV)


def descendants(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for pid in pids():
        st = _stat(pid)
        if st:
            kids.setdefault(int(st[1]), []).append(pid)
    out, todo = [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def in_groups(pgids: set[int]) -> list[tuple[int, str]]:
    """Live processes whose process group is one of `pgids`."""
    out = []
    for pid in pids():
        st = _stat(pid)
        if st and st[0] not in ("Z", "X") and int(st[2]) in pgids:
            out.append((pid, cmdline(pid)))
    return out


def pgrp(pid: int) -> int | None:
    st = _stat(pid)
    return int(st[2]) if st else None


def kill_tagged(tag: str) -> None:
    for pid, _ in tagged(tag):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --------------------------------------------------------------------------- snapshots


def journal_events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def journal_steps(path: Path) -> list[tuple[str, int]]:
    return [(e["data"]["mode"], e["data"]["step"]["index"]) for e in journal_events(path) if e.get("event") == "step"]


# --------------------------------------------------------------------------- a headless kvtui


@dataclass
class Headless:
    proc: subprocess.Popen
    tag: str
    out: Path
    stdout_path: Path
    stderr_path: Path
    seen_pgids: set[int] = field(default_factory=set)

    @property
    def journal(self) -> Path:
        return self.out.with_name(self.out.name + ".journal")

    @property
    def records(self) -> Path:
        return self.out.with_name(self.out.stem + ".records.jsonl")

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def note_groups(self) -> set[int]:
        """Remember the process groups of everything under kvtui now (servers lead their own)."""
        for pid in [self.proc.pid] + descendants(self.proc.pid):
            g = pgrp(pid)
            if g:
                self.seen_pgids.add(g)
        return self.seen_pgids

    def wait(self, timeout_s: float = 180) -> int:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"kvtui did not exit within {timeout_s} s\n{self.stdout()[-2000:]}\n{self.stderr()[-2000:]}")

    def trackers_left(self) -> list[tuple[int, str]]:
        """multiprocessing resource trackers of this run still alive, looked for at once (no grace):
        kvtui reaps its own before it exits (kvtui/runtime/procs/tracker.py)."""
        return [(pid, cmd) for pid, cmd in tagged(self.tag) if "multiprocessing.resource_tracker" in cmd]

    def leftovers(self, grace_s: float = 5.0) -> list[tuple[int, str]]:
        """Processes this run left behind: by its tag, and by the process groups seen during it.

        A process already on its way out is given `grace_s` to finish (after a kill -9 of kvtui,
        multiprocessing's resource tracker exits when it reads EOF, a few ms later);
        what is still there after that is an orphan.
        """
        def now() -> list[tuple[int, str]]:
            found = dict(tagged(self.tag))
            found.update(dict(in_groups(self.seen_pgids - {os.getpgrp()})))
            return sorted(found.items())

        deadline = time.monotonic() + grace_s
        while (left := now()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return left


def headless(tmp_path: Path, scenario: Path | str, *args: str, out: Path | None = None, env: dict | None = None,
             new_session: bool = True, wrapper: str | None = None, umask: int | None = None,
             nohup: bool = False) -> Headless:
    """`python -m kvtui run SCENARIO --headless --out OUT ARGS…` in its own session (a terminal's job).

    SIGHUP starts at its default, as in a login shell, whatever the test runner inherited (a CI
    job under nohup ignores it); `nohup=True` starts kvtui the way `nohup kvtui run …` does."""
    tag = uuid.uuid4().hex
    out = out or tmp_path / "run.json"
    so, se = tmp_path / f"stdout-{tag[:6]}.txt", tmp_path / f"stderr-{tag[:6]}.txt"
    argv = ["run", str(scenario), "--headless", "--out", str(out), *args]
    cmd = [sys.executable, "-c", wrapper, *argv] if wrapper else [sys.executable, "-m", "kvtui", *argv]
    full_env = {**os.environ, TAG_ENV: tag, "PYTHONUNBUFFERED": "1", "KVTUI_QUIET_TAIL": "1",
                # a snapshot that cannot be written at --out is rescued here, not in the user's state folder
                "KVTUI_RESCUE_DIR": str(tmp_path / "rescued"), **(env or {})}
    def pre() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN if nohup else signal.SIG_DFL)
        if umask is not None:
            os.umask(umask)
    with open(so, "w") as fo, open(se, "w") as fe:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=full_env,
                                start_new_session=new_session, preexec_fn=pre)
    return Headless(proc, tag, out, so, se)


@pytest.fixture
def runs():
    """Headless runs started by a test; whatever is left of them is killed afterwards."""
    started: list[Headless] = []
    yield started
    for h in started:
        if h.proc.poll() is None:
            h.proc.kill()
            h.proc.wait(10)
        kill_tagged(h.tag)
        for pid, _ in in_groups(h.seen_pgids - {os.getpgrp()}):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def knee_path(tmp_path) -> Path:
    p = tmp_path / "rel.toml"
    p.write_text(KNEE)
    return p


# --------------------------------------------------------------------------- the fault server


@dataclass
class FaultServer:
    proc: subprocess.Popen
    url: str

    def stats(self) -> dict:
        return httpx.get(self.url + "/_stats", timeout=5, trust_env=False).json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


def start_fault_server(*args: str) -> FaultServer:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(HERE / "fault_server.py"), str(port), *args], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(url + "/health", timeout=1, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(up, 30, "the fault server answers /health", proc)
    except BaseException:
        FaultServer(proc, url).stop()  # never left running when it did not come up
        raise
    return FaultServer(proc, url)


@pytest.fixture
def fault_server_factory():
    servers: list[FaultServer] = []

    def make(*args: str) -> FaultServer:
        s = start_fault_server(*args)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


def external_scenario(tmp_path: Path, url: str, extra: str = "") -> Path:
    p = tmp_path / "ext.toml"
    p.write_text(EXTERNAL.format(url=url) + extra)
    return p


# -- one streamed request to the lying server (test_untrusted_numbers, test_usage_total) ------------


@pytest.fixture(scope="module")
def liar():
    """The fault server (fault_server.py), answering as `POST /_answer` tells it."""
    srv = start_fault_server()
    yield srv
    srv.stop()


def liar_request(url: str, answer: dict, prompt_len: int, max_tokens: int):
    """Set the server's next answer, then send one streamed completion through kvtui's real client
    (aiohttp, real HTTP on 127.0.0.1) and return its Record."""
    import asyncio

    from kvtui.core.record import Record
    from kvtui.runtime.load.client import StreamClient, stream_request

    httpx.post(url + "/_answer", json=answer, timeout=5, trust_env=False).raise_for_status()

    async def go() -> Record:
        rec = Record(id="x", mode="m", step=0, load=1, phase="window", t_intended=0.0, t_sent=0.0,
                     expected_prompt_tokens=prompt_len, expected_output_tokens=max_tokens)
        client = StreamClient(10.0, {})
        try:
            body = {"model": "fault", "prompt": list(range(prompt_len)), "max_tokens": max_tokens, "stream": True}
            await stream_request(client, url + "/v1/completions", body, rec, 10.0)
        finally:
            await client.aclose()
        return rec

    return asyncio.run(go())
