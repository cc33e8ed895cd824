"""kvtui/runtime/procs/tracker.py: the resource tracker the load generator's spawns start is reaped
before kvtui exits (it used to outlive the TUI by a moment: found as a leftover by CI)."""

from __future__ import annotations

import multiprocessing as mp
import os
from multiprocessing import resource_tracker
from pathlib import Path

from kvtui.runtime.procs import tracker


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_stop_reaps_the_tracker_a_spawn_started_and_a_later_spawn_starts_another():
    ctx = mp.get_context("spawn")
    for _ in range(2):  # stopped, then needed again: started again, stopped again
        p = ctx.Process(target=os.getpid)
        p.start()
        p.join(60)
        pid = resource_tracker._resource_tracker._pid
        assert pid is not None and _alive(pid)
        assert tracker.stop() is True
        assert not _alive(pid) and not Path(f"/proc/{pid}").exists()  # reaped: not even a zombie
        assert resource_tracker._resource_tracker._fd is None


def test_stop_without_a_tracker_is_a_no_op():
    tracker.stop()
    assert tracker.stop() is True
