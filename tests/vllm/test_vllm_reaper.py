"""The reaper kills registered process groups when kvtui exits, on SIGTERM and on SIGHUP (real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from kvtui.runtime.procs import reaper

from vllmtest_helpers import proc_in_group

CHILD = r"""
import os, signal, subprocess, sys, time
from kvtui.runtime.procs import reaper
# A login session's default, or nohup's (the test runner may itself run under nohup).
signal.signal(signal.SIGHUP, signal.SIG_IGN if sys.argv[1] == "nohup" else signal.SIG_DFL)
victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
reaper.register(victim.pid, "sleeper")
if sys.argv[1] in ("handlers", "nohup"):
    reaper.install_signal_handlers()
print(victim.pid, flush=True)
if sys.argv[1] == "exit":
    sys.stdin.readline()  # the test has seen the victim alive
    sys.exit(0)
time.sleep(600)
"""


def _wait_gone(pgid: int, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not proc_in_group(pgid):
            return True
        time.sleep(0.05)
    return False


def _run(mode: str):
    p = subprocess.Popen([sys.executable, "-c", CHILD, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    victim = int(p.stdout.readline())
    assert proc_in_group(victim) == [victim]
    return p, victim


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_kills_registered_groups(sig):
    p, victim = _run("handlers")
    try:
        p.send_signal(sig)
        assert p.wait(timeout=20) == 128 + sig  # the default action still ends kvtui
        assert _wait_gone(victim)
    finally:
        p.kill()
        reaper.kill_group(victim, 0.5)


def test_under_nohup_sighup_leaves_kvtui_and_its_servers_running():
    p, victim = _run("nohup")
    try:
        p.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert p.poll() is None and proc_in_group(victim) == [victim]
        p.send_signal(signal.SIGTERM)  # still handled: the group goes with kvtui
        assert p.wait(timeout=20) == 128 + signal.SIGTERM
        assert _wait_gone(victim)
    finally:
        p.kill()
        reaper.kill_group(victim, 0.5)


def test_normal_exit_kills_registered_groups():
    p, victim = _run("exit")
    p.stdin.write("go\n")
    p.stdin.flush()
    assert p.wait(timeout=20) == 0
    assert _wait_gone(victim)


def test_without_handlers_sigterm_still_leaves_nothing():
    """Python's default SIGTERM skips atexit (what install_signal_handlers() is for); since issue 18
    the watchdog stops the group anyway: kvtui's death closes its pipe (kvtui/runtime/procs/watchdog.py)."""
    p, victim = _run("none")
    try:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=20)
        assert _wait_gone(victim)
    finally:
        reaper.kill_group(victim, 0.5)
    assert not proc_in_group(victim)


def test_kill_group_escalates_to_sigkill():
    # A group that ignores SIGTERM.
    p = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(600)"],
        start_new_session=True,
        stdout=subprocess.PIPE,
    )
    p.stdout.readline()
    assert reaper.kill_group(p.pid, grace_s=0.5)
    assert p.wait(timeout=10) == -signal.SIGKILL
    assert not reaper.group_alive(p.pid)


def test_registry_and_group_members():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        reaper.register(p.pid, "x")
        assert reaper.registered()[p.pid] == "x"
        assert reaper.group_members(p.pid) == [p.pid]
        assert p.pid in reaper.reap_all(grace_s=5)
        p.wait(timeout=10)
        assert reaper.group_members(p.pid) == []
        assert p.pid not in reaper.registered()
    finally:
        p.kill()
    assert reaper.signal_group(p.pid, 0) is False
    assert os.getpgrp() not in reaper.registered()
