"""The process table, read from /proc, for the tests that prove no process outlives a run
(tests/reliability, tests/vllm/test_vllm_orphans.py): who carries a test's tag in its environment,
and a bounded wait for progress."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Callable


def _stat(pid: int) -> list[str] | None:
    try:
        s = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return s[s.rfind(")") + 2:].split()  # [0]=state [1]=ppid [2]=pgrp [3]=session


def pids() -> list[int]:
    return [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def tagged(tag: str, env_name: str) -> list[tuple[int, str]]:
    """Live (not zombie) processes whose environment carries `env_name`=`tag`.

    Left out: pytest itself and its own multiprocessing resource tracker (started, once per
    process, by the first load generator of an in-process run; it lives as long as pytest).
    """
    needle = f"{env_name}={tag}".encode()
    out = []
    for pid in pids():
        if pid == os.getpid():
            continue
        st = _stat(pid)
        if st and int(st[1]) == os.getpid() and "multiprocessing.resource_tracker" in cmdline(pid):
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            st = _stat(pid)
            if st and st[0] not in ("Z", "X"):
                out.append((pid, cmdline(pid)))
    return out


def wait_until(pred: Callable[[], object], timeout_s: float, what: str, proc: subprocess.Popen | None = None, poll_s: float = 0.05):
    """Bounded wait for progress (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while True:
        v = pred()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"kvtui exited ({proc.returncode}) before: {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(poll_s)
