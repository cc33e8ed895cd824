"""Never leave a server behind (vLLM or the simulator): a registry of live process groups, killed at exit.

Every server kvtui launches runs in its own process group (start_new_session=True) and is
registered here until it is stopped. When kvtui exits for any reason Python can see
(normal exit, an exception, atexit; SIGTERM and SIGHUP once `install_signal_handlers()` ran
in the main thread), every registered group gets SIGTERM, then SIGKILL.

SIGKILL of kvtui itself cannot be caught. Two things cover it:
- while anything is registered, a watchdog process (kvtui/runtime/procs/watchdog.py) holds a pipe
  from kvtui; its end of file (kvtui died) makes it stop the registered groups and pids;
- a registry file per kvtui process (kvtui/runtime/procs/leftovers.py) names them, so that a
  later run finds what an earlier one left (`live_groups()`) and can stop it.
Every server kvtui launches carries `KVTUI_RUN_ID` (`server_env()`) so that both can tell
the run's processes from anything that reused a pid.
"""

from __future__ import annotations

import atexit
import os
import secrets
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any, Callable

from kvtui import clock
from kvtui.runtime.procs import leftovers, watchdog

_lock = threading.Lock()
_groups: dict[int, str] = {}  # pgid -> label (the command, redacted)
_starts: dict[int, int] = {}  # pgid -> the leader's start time (/proc ticks)
_pids: dict[int, tuple[int, str]] = {}  # single processes (load-generator workers): pid -> (start, label)
# What signal.signal and signal.getsignal give back: a function, SIG_DFL / SIG_IGN, or None (a
# handler not installed from Python). It is what signal.signal takes back to restore it.
Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None
_installed: dict[int, Handler] = {}  # signum -> previous handler
_run_id = ""
_dog: subprocess.Popen | None = None
_dog_pid = 0  # the process that started _dog (a forked child must start its own)


def run_id() -> str:
    """This kvtui process's tag: its pid, its start time and a random part."""
    global _run_id
    if not _run_id or not _run_id.startswith(f"{os.getpid()}."):
        _run_id = f"{os.getpid()}.{watchdog.start_time(os.getpid()) or 0}.{secrets.token_hex(4)}"
    return _run_id


def server_env() -> dict[str, str]:
    """Variables every launched server gets: the run's tag (inherited by its children)."""
    return {watchdog.TAG_ENV: run_id()}


def _tell(line: str) -> None:
    """One line to the watchdog, started when the first thing is registered (call with _lock held)."""
    global _dog, _dog_pid
    if _dog is None or _dog_pid != os.getpid() or _dog.poll() is not None:
        try:
            _dog = subprocess.Popen(
                [sys.executable, "-m", "kvtui.runtime.procs.watchdog", run_id(), str(leftovers.entry_path())],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True,
                # Tagged as its own kvtui's: a kvtui started by another (a `kvtui web` tab) inherits
                # that one's tag, and its watchdog must not be among what that one's watchdog stops
                # first (it would leave this kvtui's servers to nobody).
                env={**os.environ, watchdog.TAG_ENV: run_id()},
            )
            _dog_pid = os.getpid()
        except OSError:
            _dog = None
            return
        # A new watchdog (the first registration, or the last one died): it learns everything.
        for g, label in _groups.items():
            _write(f"+g {g} {_starts.get(g, -1)} {label}")
        for p, (st, label) in _pids.items():
            _write(f"+p {p} {st} {label}")
        return
    _write(line)


def _write(line: str) -> None:
    if _dog is None or _dog.stdin is None:
        return
    try:
        _dog.stdin.write((line.replace("\n", " ") + "\n").encode("utf-8", "replace"))
        _dog.stdin.flush()
    except (OSError, ValueError):
        pass


def _changed() -> None:
    """Registry file and watchdog after a change (call with _lock held)."""
    dog = _dog.pid if _dog is not None and _dog_pid == os.getpid() else None
    leftovers.write_entry(run_id(), {g: (_starts.get(g, -1), lbl) for g, lbl in _groups.items()}, dict(_pids), dog)
    if not _groups and not _pids and _dog is not None and _dog_pid == os.getpid():
        _release_dog()


def _release_dog() -> None:
    """Nothing left to guard: close the pipe; the watchdog sees EOF with nothing registered and exits."""
    global _dog
    dog, _dog = _dog, None
    if dog is None:
        return
    try:
        if dog.stdin:
            dog.stdin.close()
        dog.wait(timeout=5.0)
    except Exception:  # pragma: no cover - it ends on its own; never block a stop on it
        pass


def register(pgid: int, label: str = "") -> None:
    with _lock:
        _groups[pgid] = label
        _starts[pgid] = watchdog.start_time(pgid) or -1
        _tell(f"+g {pgid} {_starts[pgid]} {label}")
        _changed()


def unregister(pgid: int) -> None:
    with _lock:
        if _groups.pop(pgid, None) is not None or pgid in _starts:
            _starts.pop(pgid, None)
            _write(f"-g {pgid}")
            _changed()


def register_pid(pid: int, label: str = "") -> None:
    """A single process (not a group of its own) to stop if kvtui dies: a load-generator worker."""
    with _lock:
        st = watchdog.start_time(pid)
        if st is None:
            return
        _pids[pid] = (st, label)
        _tell(f"+p {pid} {st} {label}")
        _changed()


def unregister_pid(pid: int) -> None:
    with _lock:
        if _pids.pop(pid, None) is not None:
            _write(f"-p {pid}")
            _changed()


def registered() -> dict[int, str]:
    with _lock:
        return dict(_groups)


def live_groups() -> list[leftovers.Leftover]:
    """What earlier kvtui runs (now gone) left running, checked to be theirs (see leftovers.py)."""
    return leftovers.live_groups()


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


def owns_group(pgid: int) -> bool:
    """Is `pgid` still one of ours, safe to signal? Its leader is the process registered (same
    start time) or a member carries this run's tag (`watchdog.group_is_ours`). A server whose
    group has gone leaves a number the kernel hands out again, to a terminal's shell as soon as
    anyone: a late or repeated stop must not signal that."""
    members = group_members(pgid)
    if not members:
        return False
    with _lock:
        start = _starts.get(pgid)
    return watchdog.group_is_ours(pgid, run_id(), start, members)


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
    deadline = clock.monotonic() + max(0.0, timeout_s)
    while True:
        if not group_alive(pgid):
            return True
        if clock.monotonic() >= deadline:
            return False
        clock.sleep(poll_s)


def kill_group(pgid: int, grace_s: float = 3.0) -> bool:
    """SIGTERM, wait up to grace_s, then SIGKILL. True when the group is gone.

    The caller vouches for `pgid` (a group it has just started); registered servers are stopped
    through `terminate` and `reap_all`, which check `owns_group` first."""
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
        # An unreaped leader holds its pid (the group is surely ours); once reaped, only the
        # run's tag on a member says the number has not gone to someone else.
        if proc.poll() is not None and not owns_group(pgid):
            break
        signal_group(pgid, sig)
        deadline = clock.monotonic() + wait_s
        while clock.monotonic() < deadline:
            if proc.poll() is not None and not group_alive(pgid):
                break
            clock.sleep(0.05)
        else:
            continue
        break
    try:
        proc.wait(timeout=5.0)
    except Exception:  # pragma: no cover - SIGKILL was sent
        pass
    if not owns_group(pgid):  # gone (or its number is someone else's now)
        unregister(pgid)


def reap_all(grace_s: float = 3.0) -> list[int]:
    """Kill every registered group (all get SIGTERM at once, then SIGKILL). Returns the pgids.

    They leave the registry (and the watchdog's list) only once signalled to the end: a kill -9
    in the middle leaves them to the watchdog.
    """
    with _lock:
        pgids = list(_groups)
    alive = [g for g in pgids if owns_group(g)]  # a stale registration's number may be someone else's now
    for g in alive:
        signal_group(g, signal.SIGTERM)
    deadline = clock.monotonic() + grace_s
    while alive and clock.monotonic() < deadline:
        alive = [g for g in alive if group_alive(g)]
        if alive:
            clock.sleep(0.1)
    for g in alive:
        if owns_group(g):
            signal_group(g, signal.SIGKILL)
    with _lock:
        for g in pgids:
            if _groups.pop(g, None) is not None:
                _write(f"-g {g}")
            _starts.pop(g, None)
        _changed()
    return pgids


def _at_exit() -> None:
    try:
        reap_all()
    except Exception:  # pragma: no cover - never fail an exit
        pass


atexit.register(_at_exit)


def _handler(signum: int, frame: FrameType | None) -> None:
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
                signal.signal(s, _installed.pop(s))

    return uninstall
