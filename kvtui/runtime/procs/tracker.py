"""multiprocessing's resource tracker: started quietly, and gone before kvtui exits.

The load generator's workers are spawned, and spawning starts the resource tracker: a child
of kvtui that lives until every holder of its pipe has closed it. Left to itself it notices
kvtui's exit only a moment *after* kvtui has gone: long enough, on a busy machine, to be
found as a process kvtui left behind. `stop` closes kvtui's end of the pipe and waits for
the tracker (bounded), so that when kvtui has exited, so has everything it started.
"""

from __future__ import annotations

import contextlib
import os
import sys
from multiprocessing import resource_tracker

from kvtui import clock


def start_quietly() -> None:
    """Start the tracker with its stderr on /dev/null.

    The tracker is handed `sys.stderr.fileno()`: under Textual that is the app's print
    capture (fileno -1: "bad value(s) in fds_to_keep"), and the real terminal would get
    its warnings mid-screen.
    """
    saved = sys.stderr
    try:
        with open(os.devnull, "w") as devnull:
            sys.stderr = devnull
            resource_tracker.ensure_running()
    except Exception:
        pass
    finally:
        sys.stderr = saved


def stop(timeout_s: float = 5.0) -> bool:
    """Stop this process's tracker, if it started one, and reap it. True when none is left.

    Closing our end of its pipe is the tracker's own signal to finish (CPython's
    `ResourceTracker._stop` does the same, but waits without a bound). The wait is bounded:
    a worker still alive holds the pipe too, and the tracker then ends when that worker does.
    """
    tracker = resource_tracker._resource_tracker
    with getattr(tracker, "_lock", None) or contextlib.nullcontext():  # not while a spawn starts it
        fd, pid = getattr(tracker, "_fd", None), getattr(tracker, "_pid", None)
        if fd is None or pid is None:
            return True
        try:
            os.close(fd)
        except OSError:
            pass
        tracker._fd = None  # type: ignore[attr-defined]  # CPython's private field, not in typeshed
    deadline = clock.monotonic() + timeout_s
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # already reaped (or not ours to reap)
            done = pid
        if done == pid:
            tracker._pid = None  # type: ignore[attr-defined]  # CPython's private field, not in typeshed
            return True
        if clock.monotonic() >= deadline:
            return False
        clock.sleep(0.02)
