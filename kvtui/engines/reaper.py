"""Never leave a server behind (vLLM or the simulator): a registry of live process groups, killed at exit.

Every server kvtui launches runs in its own process group (start_new_session=True) and is
registered here until it is stopped. When kvtui exits for any reason Python can see
(normal exit, an exception, atexit; SIGTERM and SIGHUP once `install_signal_handlers()` ran
in the main thread), every registered group gets SIGTERM, then SIGKILL.

SIGKILL of kvtui itself cannot be caught: then vLLM's own engine processes notice their
API server is gone, but the API server lives on. `live_groups()` lets a later run report it.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable

_lock = threading.Lock()
_groups: dict[int, str] = {}  # pgid -> label (the command, redacted)
_installed: dict[int, object] = {}  # signum -> previous handler


def register(pgid: int, label: str = "") -> None:
    with _lock:
        _groups[pgid] = label


def unregister(pgid: int) -> None:
    with _lock:
        _groups.pop(pgid, None)


def registered() -> dict[int, str]:
    with _lock:
        return dict(_groups)


def group_members(pgid: int, include_zombies: bool = False) -> list[int]:
    """PIDs whose process group is `pgid`, read from /proc (zombies left out by default)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp …; comm may hold spaces and parentheses
        rest = stat[stat.rfind(")") + 2 :].split()
        if len(rest) < 3:
            continue
        state, pgrp = rest[0], int(rest[2])
        if pgrp == pgid and (include_zombies or state not in ("Z", "X")):
            out.append(int(d.name))
    return sorted(out)


def group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the group; False when no process is left in it."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a group we do not own: never ours
        return False


def wait_group_gone(pgid: int, timeout_s: float, poll_s: float = 0.1) -> bool:
    deadline = time.monotonic() + max(0.0, timeout_s)
    while True:
        if not group_alive(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def kill_group(pgid: int, grace_s: float = 3.0) -> bool:
    """SIGTERM, wait up to grace_s, then SIGKILL. True when the group is gone."""
    if not group_alive(pgid):
        return True
    signal_group(pgid, signal.SIGTERM)
    if wait_group_gone(pgid, grace_s):
        return True
    signal_group(pgid, signal.SIGKILL)
    return wait_group_gone(pgid, 5.0)


def terminate(proc, pgid: int, timeout_s: float, graceful: bool = True) -> None:
    """Stop a server's whole group: SIGINT, SIGTERM, SIGKILL (timeout_s split 50/30/20).

    `proc` is the group leader's Popen, reaped as soon as it exits. `graceful=False` starts
    at SIGTERM (the leader is already gone: nobody is left to shut down cleanly).
    """
    total = max(3.0, timeout_s)
    steps = [(signal.SIGINT, 0.5 * total), (signal.SIGTERM, 0.3 * total), (signal.SIGKILL, max(2.0, 0.2 * total))]
    if not graceful:
        steps = steps[1:]
    for sig, wait_s in steps:
        if proc.poll() is not None and not group_alive(pgid):
            break
        signal_group(pgid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if proc.poll() is not None and not group_alive(pgid):
                break
            time.sleep(0.05)
        else:
            continue
        break
    try:
        proc.wait(timeout=5.0)
    except Exception:  # pragma: no cover - SIGKILL was sent
        pass
    if not group_alive(pgid):
        unregister(pgid)


def reap_all(grace_s: float = 3.0) -> list[int]:
    """Kill every registered group (all get SIGTERM at once, then SIGKILL). Returns the pgids."""
    with _lock:
        pgids = list(_groups)
        _groups.clear()
    alive = [g for g in pgids if group_alive(g)]
    for g in alive:
        signal_group(g, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        alive = [g for g in alive if group_alive(g)]
        if alive:
            time.sleep(0.1)
    for g in alive:
        signal_group(g, signal.SIGKILL)
    return pgids


def _at_exit() -> None:
    try:
        reap_all()
    except Exception:  # pragma: no cover - never fail an exit
        pass


atexit.register(_at_exit)


def _handler(signum: int, frame) -> None:
    reap_all()
    prev = _installed.get(signum)
    if callable(prev):
        prev(signum, frame)
    elif prev == signal.SIG_IGN:
        return
    else:  # default action: end the process (atexit and finally blocks still run)
        raise SystemExit(128 + signum)


def install_signal_handlers(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP)) -> Callable[[], None]:
    """Kill the registered groups on SIGTERM/SIGHUP, then chain to the previous handler.

    Call from the main thread (Python's rule for signal handlers). Returns a function that
    puts the previous handlers back. Installing twice is harmless.
    """
    for s in signals:
        if s in _installed:
            continue
        if signal.getsignal(s) == signal.SIG_IGN:
            continue  # ignored on purpose (`nohup kvtui …`): the servers must outlive the terminal too
        _installed[s] = signal.signal(s, _handler)

    def uninstall() -> None:
        for s in signals:
            if s in _installed:
                signal.signal(s, _installed.pop(s))  # type: ignore[arg-type]

    return uninstall
