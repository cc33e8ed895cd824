"""kill -9 of kvtui leaves nothing running: the watchdog stops the servers and load workers of
the dead run, and the next run finds (and with --kill-stale stops) what an earlier one left.

Real processes throughout: `kvtui run --headless` with the simulator, SIGKILLed mid-step;
the registry under a private KVTUI_STATE_DIR (so that the engineers' own runs on this
machine are never counted).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kvtui.runtime.procs import leftovers, watchdog

from reliability_helpers import headless, journal_steps, tagged, wait_until
from scenario_factory import knee_toml


def _state_env(tmp_path) -> dict:
    d = tmp_path / "state"
    return {"KVTUI_STATE_DIR": str(d)}


def test_kill_9_mid_step_leaves_no_server_and_no_load_worker(tmp_path, knee_path, runs):
    env = _state_env(tmp_path)
    h = headless(tmp_path, knee_path, env=env)
    runs.append(h)
    wait_until(lambda: len(journal_steps(h.journal)) >= 1, 120, "a step journaled", h.proc)
    h.note_groups()
    kids = tagged(h.tag)
    servers = [p for p, cmd in kids if "sim serve" in cmd]
    workers = [p for p, cmd in kids if "multiprocessing" in cmd and "resource_tracker" not in cmd]
    dogs = [p for p, cmd in kids if "kvtui.runtime.procs.watchdog" in cmd]
    assert servers and workers and len(dogs) == 1, kids
    entry = Path(env["KVTUI_STATE_DIR"]) / "procs" / f"{h.proc.pid}.json"
    doc = json.loads(entry.read_text())
    assert set(map(int, doc["groups"])) >= set(servers)  # the registry names the run's server groups
    assert oct(entry.stat().st_mode & 0o777) == "0o600"
    h.proc.kill()  # SIGKILL: no handler, no atexit, no finally
    h.proc.wait(10)
    left = h.leftovers(grace_s=15.0)
    assert left == [], left
    assert not entry.exists(), "the watchdog removes the dead run's registry entry once it stopped everything"


STUCK = r"""
import os, signal, subprocess, sys, time
from kvtui.runtime.procs import reaper
# A server that ignores SIGTERM (the watchdog must escalate) and a child of it that left the group.
code = "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
       "subprocess.Popen([sys.executable, '-c', 'import os, time; os.setsid(); time.sleep(600)']); time.sleep(600)"
env = {**os.environ, **reaper.server_env()}
victim = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, env=env)
reaper.register(victim.pid, "stubborn server")
print(victim.pid, flush=True)
time.sleep(600)
"""


def _tagged_with(run_id: str) -> list[int]:
    return watchdog.tagged(run_id)


def test_watchdog_escalates_and_finds_processes_that_left_the_group(tmp_path):
    env = {**os.environ, **_state_env(tmp_path)}
    p = subprocess.Popen([sys.executable, "-c", STUCK], stdout=subprocess.PIPE, text=True, env=env)
    try:
        victim = int(p.stdout.readline())
        run_id = watchdog.run_tag(victim)
        assert run_id and run_id.startswith(f"{p.pid}.")
        wait_until(lambda: len(_tagged_with(run_id)) >= 2, 30, "the server and its escaped child")
        p.kill()
        p.wait(10)
        wait_until(lambda: not _tagged_with(run_id), 30, "everything of the killed run stopped")
    finally:
        p.kill()
        for pid in watchdog.tagged(run_id or "-"):
            os.kill(pid, signal.SIGKILL)


LEAVER = r"""
import os, subprocess, sys, time
from kvtui.runtime.procs import reaper
env = {**os.environ, **reaper.server_env()}
victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
reaper.register(victim.pid, "sim serve --port 1234")
reaper._dog.kill()  # no watchdog: as if it had been killed along with kvtui (kill -9 of the whole session)
reaper._dog.wait()
print(victim.pid, flush=True)
os.kill(os.getpid(), 9)
"""


def test_the_next_run_names_leftovers_and_kill_stale_stops_them(tmp_path, knee_path, runs):
    env = _state_env(tmp_path)
    p = subprocess.run([sys.executable, "-c", LEAVER], capture_output=True, text=True, env={**os.environ, **env}, timeout=60)
    victim = int(p.stdout.split()[0])
    try:
        assert watchdog.start_time(victim) is not None
        # A plain run: one warning naming what was left, and the hint; the leftover stays.
        h = headless(tmp_path, knee_path, "--set", "ramp.max=1", "--mode", "first", env=env)
        runs.append(h)
        assert h.wait() == 0, h.stderr()
        err = h.stderr()
        assert "kvtui: warning: an earlier kvtui run (pid" in err
        assert "sim serve --port 1234" in err and "--kill-stale" in err
        assert watchdog.start_time(victim) is not None
        # --kill-stale stops it (only it: the run's own server ran and was stopped as usual).
        h2 = headless(tmp_path, knee_path, "--set", "ramp.max=1", "--mode", "first", "--kill-stale",
                      out=tmp_path / "run2.json", env=env)
        runs.append(h2)
        assert h2.wait() == 0, h2.stderr()
        assert "stopped what the earlier kvtui run" in h2.stderr()
        wait_until(lambda: watchdog.start_time(victim) is None, 10, "the leftover stopped")
        # A third run finds nothing.
        h3 = headless(tmp_path, knee_path, "--set", "ramp.max=1", "--mode", "first", out=tmp_path / "run3.json", env=env)
        runs.append(h3)
        assert h3.wait() == 0, h3.stderr()
        assert "earlier kvtui run" not in h3.stderr()
    finally:
        try:
            os.killpg(victim, signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.parametrize("registered", [-1000, 1000], ids=["reused-by-a-younger-process", "registered-later"])
def test_a_pid_reused_by_another_process_is_never_signalled(tmp_path, monkeypatch, registered):
    """A registry entry whose processes are gone and whose pid now belongs to someone else. The
    realistic case is the first: the number went round (pid_max 32768) and a new process, a
    terminal's shell say, leads a group of that number; it started after the registered leader."""
    monkeypatch.setenv("KVTUI_STATE_DIR", str(tmp_path))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        st = watchdog.start_time(other.pid)
        d = tmp_path / "procs"
        d.mkdir()
        # The dead owner's entry names `other`'s group, with another start time and another run id.
        (d / "1.json").write_text(json.dumps({"pid": 1, "start": -5, "run_id": "999.1.dead",
                                              "groups": {str(other.pid): {"start": st + registered, "label": "x"}},
                                              "pids": {}}))
        (d / "2.json").write_text("{not json")
        assert leftovers.live_groups() == []
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


STALE = r"""
import json, os, signal, subprocess, sys, time
from kvtui.runtime.procs import reaper, watchdog
env = {**os.environ, **reaper.server_env()}
def sleeper(tagged):
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                            env=env if tagged else None)
# A server that exited long ago, its number since handed to an untagged stranger: the registry
# still holds it, with the old leader's (earlier) start time.
stranger = sleeper(False)
reaper.register(stranger.pid, "sim serve (gone)")
reaper._starts[stranger.pid] -= 1000
# A server whose leader exited and whose tagged child lives on: still ours.
orphan = sleeper(True)
reaper.register(orphan.pid, "vllm (leader gone)")
reaper._starts[orphan.pid] -= 1000
# A live server, as registered.
live = sleeper(True)
reaper.register(live.pid, "vllm")
owned = {n: reaper.owns_group(p.pid) for n, p in (("stranger", stranger), ("orphan", orphan), ("live", live))}
gone = subprocess.Popen([sys.executable, "-c", "pass"])  # the registered leader, exited and reaped
gone.wait()
reaper.terminate(gone, stranger.pid, 3.0, graceful=False)  # a late, repeated stop of that server
reaper.reap_all(1.0)
time.sleep(0.5)
print(json.dumps({"owned": owned, "alive": {n: p.poll() is None for n, p in
                  (("stranger", stranger), ("orphan", orphan), ("live", live))}}), flush=True)
stranger.kill()
"""


def test_a_stale_registration_never_signals_the_group_that_now_has_its_number(tmp_path):
    """In kvtui itself (a late stop, the exit's reap): a registered group is signalled only while
    its leader is the process registered or a member carries the run's tag."""
    env = {**os.environ, **_state_env(tmp_path)}
    out = subprocess.run([sys.executable, "-c", STALE], capture_output=True, text=True, env=env, timeout=60)
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["owned"] == {"stranger": False, "orphan": True, "live": True}, out.stderr
    assert doc["alive"] == {"stranger": True, "orphan": False, "live": False}, out.stderr


# Two modes on two simulated devices (the knee model), ramped one load at a time: both lanes
# are still measuring when the parent is killed.
PARALLEL = knee_toml("par-kill", knee=4, slowdown=None, server={"devices": 2},
                     modes=[{"name": "baseline"}, {"name": "fp8-kv", "kv_cache_dtype": "fp8"}],
                     ramp={"step": "+1", "search": "linear", "warmup_s": 0.5, "window_s": 3.0},
                     slo={"tpot_p95_ms": 500})


def test_kill_9_of_a_parallel_run_leaves_no_lane_server_or_worker(tmp_path, runs):
    """`kvtui run --parallel` SIGKILLed while both lanes measure: the lanes (kvtui runs of their own,
    registered with the parent's reaper), their simulator servers and load workers all go."""
    env = {**_state_env(tmp_path), "KVTUI_PREFLIGHT": "0"}
    sc = tmp_path / "par.toml"
    sc.write_text(PARALLEL)
    h = headless(tmp_path, sc, "--parallel", env=env)
    runs.append(h)

    def lanes_measuring() -> list[tuple[int, str]]:
        kids = tagged(h.tag)
        lanes = [p for p, cmd in kids if "--mode" in cmd and "sim serve" not in cmd]
        servers = [p for p, cmd in kids if "sim serve" in cmd]
        workers = [p for p, cmd in kids if "multiprocessing" in cmd and "resource_tracker" not in cmd]
        return kids if len(lanes) == 2 and len(servers) == 2 and len(workers) >= 2 else []

    before = wait_until(lanes_measuring, 120, "two lanes, each with its simulator and a load worker", h.proc)
    h.note_groups()
    h.proc.kill()  # SIGKILL of the parent: no handler runs in it
    h.proc.wait(10)
    left = h.leftovers(grace_s=20.0)
    assert left == [], (left, before)
