"""The dashboard as a person over SSH sees it: in tmux, 256 colours, keys, `q` exits cleanly."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from kvtui import PROJECT_ROOT
from kvtui.io.scenario.defaults import demo_scenario_path

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")]


class Tmux:
    def __init__(self, command: str, width: int = 120, height: int = 40, env: dict[str, str] | None = None):
        self.name = f"kvtui-test-{uuid.uuid4().hex[:8]}"
        self.tag = uuid.uuid4().hex
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in {"KVTUI_TEST_TAG": self.tag, "TERM": "screen-256color",
                                                            **(env or {})}.items())
        # The shell prints the exit code, then stays so the pane can still be read (close() ends it).
        script = f"cd {shlex.quote(str(PROJECT_ROOT))} && env -u COLORTERM -u COLUMNS -u LINES {envs} {command}; echo KVTUI-EXIT=$?; sleep 3600"
        # A server of our own (-L): no user configuration, no other sessions' sizes.
        self.tmux = ["tmux", "-L", self.name, "-f", "/dev/null"]
        subprocess.run(self.tmux + ["new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height), script],
                       check=True)
        subprocess.run(self.tmux + ["resize-window", "-t", self.name, "-x", str(width), "-y", str(height)],
                       capture_output=True)

    def capture(self, escapes: bool = False) -> str:
        args = self.tmux + ["capture-pane", "-t", self.name, "-p"] + (["-e"] if escapes else [])
        r = subprocess.run(args, capture_output=True, text=True)
        # A failed capture says why (the pane or the tmux server gone), not an empty screen.
        return r.stdout if r.returncode == 0 else f"<tmux capture-pane failed ({r.returncode}): {r.stderr.strip()}>"

    def keys(self, *keys: str) -> None:
        subprocess.run(self.tmux + ["send-keys", "-t", self.name, *keys], check=True)

    def wait_for(self, *words: str, limit_s: float = 120.0) -> str:
        end = time.monotonic() + limit_s
        while True:
            text = self.capture()
            if all(w in text for w in words):
                return text
            if "KVTUI-EXIT=" in text and not any("KVTUI-EXIT" in w for w in words):
                raise AssertionError(f"kvtui exited while waiting for {words}; last screen:\n{text}")
            if time.monotonic() > end:
                raise AssertionError(f"never saw {words} on screen; last screen:\n{text}")
            time.sleep(0.3)

    def wait_gone(self, word: str, limit_s: float = 60.0) -> None:
        end = time.monotonic() + limit_s
        while word in self.capture():
            if time.monotonic() > end:
                raise AssertionError(f"{word!r} stayed on screen:\n{self.capture()}")
            time.sleep(0.2)

    def tagged_processes(self) -> list[str]:
        """Processes started from this session's command (they inherit its environment tag)."""
        out = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                env = Path(f"/proc/{d}/environ").read_bytes()
                if f"KVTUI_TEST_TAG={self.tag}".encode() in env.split(b"\0"):
                    cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    out.append(f"{d}: {cmd}")
            except OSError:
                continue
        return out

    def close(self) -> None:
        subprocess.run(self.tmux + ["kill-server"], capture_output=True)


@pytest.fixture
def tmux_factory():
    sessions: list[Tmux] = []

    def make(*a, **kw) -> Tmux:
        s = Tmux(*a, **kw)
        sessions.append(s)
        return s

    yield make
    for s in sessions:
        s.close()


def test_tmux_live_run_keys_and_clean_quit(tmux_factory, knee_path, tmp_path):
    cmd = f"{shlex.quote(sys.executable)} -m kvtui run {shlex.quote(str(knee_path))} --out {shlex.quote(str(tmp_path / 't.json'))}"
    t = tmux_factory(cmd)
    # Charts, table and the caveats within a bounded time.
    t.wait_for("GPU memory GiB", "TTFT ms vs c", "KV cache usage %", "TPOT p95", "SIMULATED", "knee-tui")
    t.wait_for("PASS")  # a finished step in the table
    # 256 colours inside tmux (no truecolor escapes), colour escapes present.
    esc = t.capture(escapes=True)
    assert "38;5;" in esc and "38;2;" not in esc
    t.keys("l")
    t.wait_for("Application startup complete")  # the server log pane, opened
    t.keys("t")
    t.wait_for("theme kvtui-high-contrast")  # the theme key's notice
    t.keys("q")
    time.sleep(1.0)
    if "Stop the run and quit?" in t.capture():  # mid-run, q asks first (as x does): yes, a stopped run exits 3
        t.keys("y")
        t.wait_for("KVTUI-EXIT=3")
    else:  # the run had already finished: a plain quit
        t.wait_for("KVTUI-EXIT=0")
    assert t.tagged_processes() == []  # no server, no load generator left
    assert (tmp_path / "t.json").exists()


def test_tmux_80x24_replay_and_demo(tmux_factory, frozen_path):
    t = tmux_factory(f"{shlex.quote(sys.executable)} -m kvtui replay {shlex.quote(str(frozen_path))}", width=80, height=24)
    t.wait_for("REPLAY", "SIMULATED", "ANSWER")  # a replay opens on its answer; d: the dashboard
    t.keys("d")
    text = t.wait_for("REPLAY", "SIMULATED", "KV %", "TTFT p95")
    assert "GPU memory GiB" not in text  # compact: sparklines instead of charts
    t.keys("Home")
    t.wait_for(" 1/")
    t.keys("q")
    t.wait_for("KVTUI-EXIT=0")
    if not demo_scenario_path().exists():
        return
    # `kvtui` with no arguments: the simulated demo's answer in seconds (simulated offline), and
    # w there watches the same simulation paced to the wall, in process (issue 46).
    d = tmux_factory(f"{shlex.quote(sys.executable)} -m kvtui")
    d.wait_for("SIMULATED", "ANSWER", "fp8-kv")
    d.keys("w")
    d.wait_for("SIMULATED", "GPU memory GiB", "TTFT p95", "RUNNING", "ETA")
    d.keys("q")
    d.wait_for("Stop the run and quit?")  # mid-run, q asks first (as x does)
    d.keys("y")
    d.wait_for("KVTUI-EXIT=3")  # stopped before its modes finished
    assert d.tagged_processes() == []


def test_tmux_dropped_session_stops_the_run(tmux_factory, knee_path, tmp_path):
    """A dropped SSH session: the terminal goes away (SIGHUP). The run stops, the snapshot is
    finalised, and nothing it started stays behind."""
    out = tmp_path / "hup.json"
    t = tmux_factory(f"{shlex.quote(sys.executable)} -m kvtui run {shlex.quote(str(knee_path))} --out {shlex.quote(str(out))}")
    t.wait_for("in window")  # a step in flight: server and load generator up
    assert any("sim serve" in p for p in t.tagged_processes())
    t.close()  # kill-server: the pane's process gets SIGHUP
    end = time.monotonic() + 120
    while t.tagged_processes() and time.monotonic() < end:
        time.sleep(0.3)
    assert t.tagged_processes() == []
    from kvtui.io.snapshot.file import load_snapshot

    doc = load_snapshot(out)
    assert doc["run"]["stop_reason"] == "stopped by SIGHUP" and "load_warnings" not in doc


def test_tmux_80x24_every_footer_key_and_the_answer(tmux_factory, knee_path, frozen_path, tmp_path):
    """Issue 20: at 80×24 the footer keeps its essential keys, each of them acts, a replay opens on
    the answer, a live run ends on it, and ctrl+c exits 130."""
    py = shlex.quote(sys.executable)
    t = tmux_factory(f"{py} -m kvtui replay {shlex.quote(str(frozen_path))}", width=80, height=24)
    text = t.wait_for("ANSWER", "SIMULATED", "most concurrent requests at the SLO")
    footer = text.rstrip("\n").splitlines()[-1]
    for word in ("dashboard", "compare", "SLO", "export", "help", "quit", "theme"):
        assert word in footer, footer
    for key, seen in (("?", "this help"), ("c", "Modes vs baseline"), ("e", "Change the SLO")):
        t.keys(key)
        t.wait_for(seen)
        t.keys("Escape")
        t.wait_gone(seen)  # (a key sent right after Escape would read as alt+key)
    t.keys("C-s")
    t.wait_for("snapshot written")
    t.keys("t")
    t.wait_for("theme kvtui-")
    t.keys("d")
    text = t.wait_for("←→ step")
    footer = text.rstrip("\n").splitlines()[-1]
    assert "pause" not in footer and "answer" in footer
    t.keys("Left")
    t.wait_for("step 5/6")
    t.keys("m")
    t.wait_for("showing mode fp8-kv")
    t.keys("a")
    t.wait_for("ANSWER")
    t.keys("q")
    t.wait_for("KVTUI-EXIT=0")

    out = tmp_path / "live.json"
    live = tmux_factory(f"{py} -m kvtui run {shlex.quote(str(knee_path))} --out {shlex.quote(str(out))}", width=80, height=24)
    text = live.wait_for("RUNNING", "in window")
    footer = text.rstrip("\n").splitlines()[-1]
    for word in ("pause", "stop", "skip", "answer", "mode", "compare", "help", "quit", "palette"):
        assert word in footer, footer
    live.keys("x")
    live.wait_for("Stop the run?")
    live.keys("n")  # no: the run goes on
    live.wait_gone("Stop the run?")
    live.keys("n")
    live.wait_for("Skip ")
    live.keys("Escape")
    live.wait_gone("Skip ")
    live.keys("Space")
    live.wait_for("pausing after this step")
    live.keys("Space")
    live.wait_for("resumed")
    live.wait_for("ANSWER", limit_s=180)  # the run ends on its answer
    live.keys("C-c")
    live.wait_for("KVTUI-EXIT=130")
    # multiprocessing's resource tracker leaves once it sees its parent gone (it holds nothing):
    # wait for that, bounded, as the dropped-session test does.
    end = time.monotonic() + 60
    while live.tagged_processes() and time.monotonic() < end:
        time.sleep(0.3)
    assert live.tagged_processes() == []
