"""What earlier kvtui runs left running: a registry of each run's servers, read by the next run.

Each kvtui process that launches something keeps one file, `<state dir>/procs/<pid>.json`
(0600, in a 0700 folder; written atomically), naming its run id, its own start time and the
process groups and pids it registered with the reaper. The file goes when the run ends
normally, or when the watchdog has stopped what a killed run left.

A file whose owner is gone (its pid dead, or reused: another start time) with processes
still alive is a leftover. "Still alive and ours" is checked the watchdog's way
(`watchdog.group_is_ours`): a process carries the run's tag (KVTUI_RUN_ID) in its
environment, or the group's leader is the very process registered (same start time).
Nothing else is ever signalled.

The state dir: $KVTUI_STATE_DIR, else $XDG_RUNTIME_DIR/kvtui, else ~/.local/state/kvtui.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from kvtui import clock
from kvtui.runtime.procs import watchdog


def state_dir() -> Path:
    if os.environ.get("KVTUI_STATE_DIR"):
        return Path(os.environ["KVTUI_STATE_DIR"])
    if os.environ.get("XDG_RUNTIME_DIR") and Path(os.environ["XDG_RUNTIME_DIR"]).is_dir():
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "kvtui"
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "kvtui"


def registry_dir() -> Path:
    return state_dir() / "procs"


def entry_path(pid: int | None = None) -> Path:
    return registry_dir() / f"{pid or os.getpid()}.json"


def write_entry(run_id: str, groups: dict[int, tuple[int, str]], pids: dict[int, tuple[int, str]],
                watchdog_pid: int | None = None) -> None:
    """This process's registry file (removed when nothing is registered). Never raises."""
    path = entry_path()
    try:
        if not groups and not pids:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        doc = {
            "pid": os.getpid(), "start": watchdog.start_time(os.getpid()), "run_id": run_id,
            "groups": {str(g): {"start": s, "label": lbl} for g, (s, lbl) in groups.items()},
            "pids": {str(p): {"start": s, "label": lbl} for p, (s, lbl) in pids.items()},
            "watchdog": {"pid": watchdog_pid, "start": watchdog.start_time(watchdog_pid)} if watchdog_pid else None,
        }
        from kvtui.errors import UsageError
        from kvtui.safeio import atomic_write

        try:  # a private temp file renamed into place: a link or FIFO planted at its name is refused
            atomic_write(path, json.dumps(doc), "process registry")
        except UsageError:
            pass
    except OSError:
        pass  # a registry we cannot write must not stop a run: the watchdog still guards it


@dataclass
class Leftover:
    """Processes of one earlier kvtui run that are still alive (its owner is gone)."""

    owner_pid: int
    run_id: str
    groups: dict[int, int] = field(default_factory=dict)  # pgid -> leader start (for the check)
    pids: dict[int, int] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)
    path: Path | None = None

    def live(self) -> tuple[list[int], list[int]]:
        return watchdog.victims(self.run_id, self.groups, self.pids)

    def describe(self) -> str:
        g, p = self.live()
        what = "; ".join(lbl[:120] for lbl in self.labels if lbl) or "servers"
        return (f"an earlier kvtui run (pid {self.owner_pid}, gone) left {len(g)} process group(s) "
                f"{', '.join(map(str, g))}{' and pids ' + ', '.join(map(str, p)) if p else ''} running: {what}")


def _owner_alive(doc: dict) -> bool:
    """The run, or its watchdog (busy stopping what the run left), is still there: not a leftover yet."""
    for who in (doc, doc.get("watchdog") or {}):
        pid, start = who.get("pid"), who.get("start")
        if isinstance(pid, int) and start is not None and watchdog.start_time(pid) == start:
            return True
    return False


def live_groups() -> list[Leftover]:
    """Leftovers of earlier runs whose owner is gone. Files of finished leftovers are removed."""
    out: list[Leftover] = []
    d = registry_dir()
    try:
        files = sorted(d.glob("*.json"))
    except OSError:
        return out
    for f in files:
        try:
            if not f.is_file() or f.stat().st_size > 1_000_000:
                continue
            doc = json.loads(f.read_text(encoding="utf-8"))
            if not isinstance(doc, dict) or _owner_alive(doc):
                continue
            lo = Leftover(owner_pid=int(doc.get("pid") or 0), run_id=str(doc.get("run_id") or ""), path=f)
            for key, table in (("groups", lo.groups), ("pids", lo.pids)):
                for k, v in (doc.get(key) or {}).items():
                    table[int(k)] = int(v.get("start") or 0)
                    lo.labels.append(str(v.get("label") or ""))
        except (OSError, ValueError, TypeError, AttributeError):
            continue  # a damaged file is no reason to signal anything
        g, p = lo.live()
        if g or p:
            out.append(lo)
        else:
            f.unlink(missing_ok=True)
    return out


def stop_leftovers(leftovers: list[Leftover], grace_s: float = 3.0) -> list[str]:
    """Stop them (SIGTERM, grace, SIGKILL), the watchdog's way. Returns one line per run stopped."""
    done = []
    for lo in leftovers:
        watchdog.stop(lo.run_id, lo.groups, lo.pids, grace_s)
        deadline = clock.monotonic() + 5.0
        while any(lo.live()) and clock.monotonic() < deadline:
            clock.sleep(0.1)
        g, p = lo.live()
        if g or p:
            done.append(f"could not stop what run pid {lo.owner_pid} left: groups {g} pids {p}")
            continue
        if lo.path is not None:
            lo.path.unlink(missing_ok=True)
        done.append(f"stopped what the earlier kvtui run (pid {lo.owner_pid}) left running")
    return done


def check_at_start(kill_stale: bool, err, ask=None) -> None:
    """Before a run: name what earlier runs left; stop it with --kill-stale or when the user says so.

    `ask`: a yes/no prompt (an interactive terminal), or None: one warning line per leftover.
    """
    found = live_groups()
    if not found:
        return
    for lo in found:
        err.write(f"kvtui: warning: {lo.describe()}\n")
    if not kill_stale and ask is not None:
        kill_stale = ask(f"kvtui: stop {'them' if len(found) > 1 else 'it'} now? [y/N] ")
    if kill_stale:
        for line in stop_leftovers(found):
            err.write(f"kvtui: {line}\n")
    else:
        err.write("kvtui: (they hold ports and GPU memory; `kvtui run --kill-stale …` stops them)\n")
    err.flush()
