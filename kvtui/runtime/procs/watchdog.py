"""The watchdog: a tiny process that outlives kvtui and stops its servers when kvtui dies unseen.

SIGKILL of kvtui (or the OOM killer) runs no handler, no `finally`, no atexit: the servers'
process groups would run on, GPU memory held. So while anything is registered with the
reaper, kvtui keeps a pipe to this process (`python -m kvtui.runtime.procs.watchdog RUN_ID`, in a
session of its own so that a Ctrl-C or a group signal meant for kvtui does not reach it).
kvtui writes one line per change:

    +g PGID START LABEL     a server's process group (START: the leader's start time, /proc ticks)
    -g PGID                 stopped by kvtui itself
    +p PID START LABEL      a single process (a load-generator worker)
    -p PID

End of file on the pipe means kvtui is gone (the kernel closes the write end of a dead
process) or has nothing registered any more. Whatever is still registered then gets SIGTERM,
3 s, SIGKILL — but only processes that are provably the run's: carrying its tag in their
environment (`KVTUI_RUN_ID`, set on every server kvtui launches and inherited by vLLM's
EngineCore and workers), or in a group whose leader is still the very process registered
(same pid, same start time). A group number reused by someone else (a younger process that
carries no tag) is never signalled. Tagged processes that left their group are stopped too.

Only the standard library: it starts in a fraction of a second and cannot break with kvtui.
"""

from __future__ import annotations

import os
import signal
import sys

from kvtui import clock

TAG_ENV = "KVTUI_RUN_ID"
GRACE_S = 3.0


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = stat[stat.rfind(")") + 2:].split()
    if len(rest) < 20 or rest[0] in ("Z", "X"):
        return None
    try:
        return int(rest[19])
    except ValueError:
        return None


def pgrp_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        return int(stat[stat.rfind(")") + 2:].split()[2])
    except (OSError, ValueError, IndexError):
        return None


def run_tag(pid: int) -> str | None:
    """The KVTUI_RUN_ID in the process's environment (readable for our own processes), or None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return None
    key = TAG_ENV.encode() + b"="
    for item in env.split(b"\0"):
        if item.startswith(key):
            return item[len(key):].decode("ascii", "replace")
    return None


def all_pids() -> list[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def tagged(run_id: str) -> list[int]:
    """Live processes that carry `run_id` (never this process)."""
    me = os.getpid()
    return [p for p in all_pids() if p != me and start_time(p) is not None and run_tag(p) == run_id]


def group_is_ours(pgid: int, run_id: str, leader_start: int | None, members: list[int]) -> bool:
    """Is the process group `pgid` provably the run's: its leader is the very process registered
    (same pid, same start time), or a member carries the run's tag.

    Nothing else counts, and "started after the leader" in particular does not: once a server's
    group has gone, its number can be handed to any new process once the pids go round (pid_max
    is 32768 on many boxes), a terminal's shell included. Every process kvtui launches
    carries the tag (`reaper.server_env()`), inherited by its children."""
    if leader_start is not None and leader_start >= 0 and start_time(pgid) == leader_start:
        return True
    return any(run_tag(p) == run_id for p in members)


def victims(run_id: str, groups: dict[int, int], pids: dict[int, int]) -> tuple[list[int], list[int]]:
    """(process groups, single pids) of the run that are still alive."""
    members: dict[int, list[int]] = {}
    for p in all_pids():
        g = pgrp_of(p)
        if g in groups:
            members.setdefault(g, []).append(p)
    live_groups = [g for g, start in groups.items() if members.get(g) and group_is_ours(g, run_id, start, members[g])]
    live_pids = [p for p, start in pids.items() if start_time(p) == start]
    for p in tagged(run_id):  # left its group (or was never registered): stop it on its own
        if pgrp_of(p) not in live_groups and p not in live_pids:
            live_pids.append(p)
    return live_groups, live_pids


def stop(run_id: str, groups: dict[int, int], pids: dict[int, int], grace_s: float = GRACE_S) -> int:
    """SIGTERM, up to grace_s, SIGKILL. Returns how many groups and pids were signalled."""
    g, p = victims(run_id, groups, pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pg in g:
            try:
                os.killpg(pg, sig)
            except OSError:
                pass
        for pid in p:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        if sig == signal.SIGKILL:
            break
        deadline = clock.monotonic() + grace_s
        while clock.monotonic() < deadline:
            g, p = victims(run_id, groups, pids)
            if not g and not p:
                return 1
            clock.sleep(0.1)
    return len(g) + len(p)


def _parse(line: str, groups: dict[int, int], pids: dict[int, int]) -> None:
    parts = line.split(" ", 3)
    try:
        op, num = parts[0], int(parts[1])
        start = int(parts[2]) if len(parts) > 2 and parts[2].lstrip("-").isdigit() else -1
    except (IndexError, ValueError):
        return
    table = groups if op[1:] == "g" else pids if op[1:] == "p" else None
    if table is None:
        return
    if op[0] == "+":
        table[num] = start
    elif op[0] == "-":
        table.pop(num, None)


def main(argv: list[str]) -> int:
    run_id = argv[0] if argv else ""
    registry = argv[1] if len(argv) > 1 else ""
    # kvtui decides when to stop on Ctrl-C or a hang-up; this process only acts on kvtui's death.
    for s in (signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    groups: dict[int, int] = {}
    pids: dict[int, int] = {}
    for raw in sys.stdin.buffer:
        _parse(raw.decode("utf-8", "replace").rstrip("\n"), groups, pids)
    if groups or pids:
        stop(run_id, groups, pids)
        if registry:  # the dead run's registry entry: nothing of it is left to find
            try:
                os.unlink(registry)
            except OSError:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
