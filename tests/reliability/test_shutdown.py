"""Shutdown of a real headless run: Ctrl-C, SIGTERM, SIGHUP (SSH drop), Ctrl-C twice, a bug inside kvtui.

Each test starts `python -m kvtui run … --headless` in its own session (as a shell starts a
job), waits until a step has been journaled, signals it the way the fault arrives in life
(Ctrl-C and a hang-up reach the terminal's whole foreground process group; `kill` reaches
the pid), and then checks:
- the exit code and the classified message;
- the snapshot is final (no journal left) and holds every step journaled before the signal,
  unchanged, with the records sidecar holding each step's window requests;
- no process is left: none carrying the run's tag in its environment (the simulator and the
  load workers inherit it, wherever they were re-parented), none in a process group seen
  under the run while it went.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from kvtui.io.records import read_records
from kvtui.io.snapshot.file import load_snapshot

from reliability_helpers import headless, journal_events, journal_steps, wait_until


def _steps_before(h, n: int = 1) -> list[dict]:
    """Wait until n steps are journaled and kvtui's server and workers are up; return the journal's steps."""
    wait_until(lambda: len(journal_steps(h.journal)) >= n, 120, f"{n} step(s) journaled", h.proc)
    h.note_groups()
    return [e["data"] for e in journal_events(h.journal) if e.get("event") == "step"]


def _check_final(h, before: list[dict], reason: str) -> dict:
    assert h.out.exists(), h.stderr()
    assert not h.journal.exists(), "the journal is removed once the snapshot is final"
    doc = load_snapshot(h.out)
    assert doc["run"]["finished"] is False
    assert doc["run"]["stop_reason"] == reason
    assert "load_warnings" not in doc
    by_key = {(m["name"], s["index"]): s for m in doc["modes"] for s in m["steps"]}
    for ev in before:  # every step journaled before the signal is in the snapshot, unchanged
        got = by_key[(ev["mode"], ev["step"]["index"])]
        assert json.loads(json.dumps(got)) == json.loads(json.dumps(ev["step"]))
    recs = list(read_records(h.records))
    for m in doc["modes"]:
        for s in m["steps"]:
            assert sum(1 for r in recs if r.mode == m["name"] and r.step == s["index"] and r.counted) == s["requests"]
    for p in (h.out, h.records):
        assert oct(os.stat(p).st_mode & 0o777) == "0o600"
    return doc


@pytest.mark.parametrize("sig,how", [
    (signal.SIGINT, "group"),  # Ctrl-C: the terminal signals the foreground process group
    (signal.SIGTERM, "pid"),  # kill PID, systemd, a batch scheduler
    (signal.SIGTERM, "group"),  # `timeout`, systemd's KillMode: the whole group (load workers included)
    (signal.SIGHUP, "group"),  # the SSH session drops: the terminal's hang-up reaches the group
])
def test_signal_stops_the_run_keeps_the_steps_and_leaves_no_process(tmp_path, knee_path, runs, sig, how):
    h = headless(tmp_path, knee_path)
    runs.append(h)
    before = _steps_before(h, 2)
    if how == "group":
        os.killpg(h.proc.pid, sig)
    else:
        h.proc.send_signal(sig)
    rc = h.wait()
    assert h.trackers_left() == []  # gone with kvtui, not a moment after
    name = signal.Signals(sig).name
    assert rc == 130, h.stderr()
    assert f"kvtui: {name}: stopping the load and the server, keeping what was measured" in h.stderr()
    assert "Traceback" not in h.stderr()
    doc = _check_final(h, before, f"stopped by {name}")
    assert doc["modes"][0]["complete"] is False  # cut mid-search: a resume measures it again
    # The step the signal cut (if it had begun) is kept for the record, with no verdict: its
    # in-flight requests were cancelled, so its figures describe only the early finishers.
    for s in doc["modes"][0]["steps"]:
        if s["aborted"]:
            assert s["aborted"] == f"stopped by {name}" and s["cut"] is True and s["passed"] is None
            assert "CUT SHORT" in h.stdout()
        else:
            assert "cut" not in s and s["passed"] is not None
    assert h.leftovers() == []
    assert "kvtui: snapshot" in h.stdout()


def test_ctrl_c_twice_still_stops_everything(tmp_path, knee_path, runs):
    """The impatient user: a second Ctrl-C while kvtui is stopping must not leave a server behind."""
    h = headless(tmp_path, knee_path)
    runs.append(h)
    before = _steps_before(h, 1)
    os.killpg(h.proc.pid, signal.SIGINT)
    wait_until(lambda: "SIGINT: stopping" in h.stderr(), 30, "the first Ctrl-C is acknowledged", h.proc, poll_s=0.005)
    os.killpg(h.proc.pid, signal.SIGINT)
    rc = h.wait()
    assert rc == 130, h.stderr()
    assert "Traceback" not in h.stderr()
    assert h.leftovers() == []
    # Whether the second Ctrl-C landed while stopping the load or after: the snapshot is final.
    doc = load_snapshot(h.out)
    assert doc["run"]["finished"] is False and doc["run"]["stop_reason"].startswith(("stopped by SIGINT", "interrupted"))
    got = {(m["name"], s["index"]) for m in doc["modes"] for s in m["steps"]}
    assert {(e["mode"], e["step"]["index"]) for e in before} <= got


# A bug inside kvtui: the step evaluation raises on the run's third step. Injected through a
# wrapper (no real part of kvtui fails on demand); everything else is the real command.
BUG = """
import sys
import kvtui.explore.run as run_mod
real = run_mod.evaluate_step
calls = {"n": 0}
def buggy(*a, **k):
    calls["n"] += 1
    if calls["n"] == 3:
        raise RuntimeError("injected fault in evaluate_step")
    return real(*a, **k)
run_mod.evaluate_step = buggy
from kvtui.cli.entry import main
sys.exit(main(sys.argv[1:]))
"""


def test_an_exception_inside_kvtui_stops_everything_and_finalises(tmp_path, knee_path, runs):
    h = headless(tmp_path, knee_path, wrapper=BUG)
    runs.append(h)
    wait_until(lambda: h.proc.poll() is not None or len(journal_steps(h.journal)) >= 1, 120, "a step journaled", h.proc)
    h.note_groups()
    rc = h.wait()
    assert rc == 1
    err = h.stderr()
    assert "RuntimeError: injected fault in evaluate_step" in err
    doc = load_snapshot(h.out)
    assert not h.journal.exists()
    assert doc["run"]["finished"] is False
    assert doc["run"]["stop_reason"] == "kvtui failed: RuntimeError: injected fault in evaluate_step"
    steps = doc["modes"][0]["steps"]
    assert [s["index"] for s in steps] == [0, 1]  # the two evaluated steps, none lost
    assert h.leftovers() == []


def test_sighup_while_the_engine_starts(tmp_path, knee_path, runs):
    """The SSH session drops before the first step: nothing measured, nothing left running."""
    h = headless(tmp_path, knee_path)
    runs.append(h)
    wait_until(lambda: "starting the engine" in h.stdout(), 60, "the engine is starting", h.proc, poll_s=0.01)
    h.note_groups()
    time.sleep(0.3)  # somewhere inside the simulator's start
    h.note_groups()
    os.killpg(h.proc.pid, signal.SIGHUP)
    rc = h.wait()
    assert rc == 130, h.stderr()
    doc = load_snapshot(h.out)
    assert doc["run"]["stop_reason"] == "stopped by SIGHUP"
    assert all(not m["steps"] for m in doc["modes"])
    assert [m["name"] for m in doc["modes"]] == ["first"]  # the second mode never started
    assert h.leftovers() == []


def test_under_nohup_a_hang_up_does_not_stop_the_run(tmp_path, knee_path, runs):
    """`nohup kvtui run …`: the user asked the run to outlive the SSH session. A hang-up to the
    whole group neither stops kvtui nor kills its server or load workers; SIGTERM still does."""
    h = headless(tmp_path, knee_path, nohup=True)
    runs.append(h)
    first = len(_steps_before(h, 1))
    os.killpg(h.proc.pid, signal.SIGHUP)
    wait_until(lambda: len(journal_steps(h.journal)) >= first + 2, 120, "two more steps after the hang-up", h.proc)
    assert h.proc.poll() is None
    assert "SIGHUP is ignored (nohup)" in h.stderr()
    h.proc.send_signal(signal.SIGTERM)
    assert h.wait() == 130, h.stderr()
    assert load_snapshot(h.out)["run"]["stop_reason"] == "stopped by SIGTERM"
    assert h.leftovers() == []


STARTING = """
name = "starting"
[server]
engine = "vllm"
model = "stand-in"
startup_timeout_s = 600
stop_timeout_s = 5
[[modes]]
name = "first"
[[modes]]
name = "second"
[workload]
prompt_tokens = 16
output_tokens = 8
"""

# Stands in for a vLLM that takes minutes to start (weights, torch.compile, CUDA graphs): a real
# process, launched the way kvtui launches vLLM, that prints a startup line and never serves.
SLOW_VLLM = "import time; print('INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.0.0-stand-in', flush=True); time.sleep(600)"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_a_long_engine_start_ends_the_start(tmp_path, runs, sig):
    """SSH drops (or the job is killed) during a minutes-long vLLM start: kvtui must not wait it out."""
    import shlex
    import sys

    sp = tmp_path / "starting.toml"
    sp.write_text(STARTING)
    h = headless(tmp_path, sp, env={"KVTUI_VLLM_LAUNCHER": shlex.join([sys.executable, "-c", SLOW_VLLM])})
    runs.append(h)
    server = wait_until(lambda: [p for p in __import__("reliability_helpers").descendants(h.proc.pid) if "stand-in" in __import__("reliability_helpers").cmdline(p)],
                        60, "the engine process is up", h.proc)
    h.note_groups()
    assert h.seen_pgids >= {server[0]}
    if sig == signal.SIGHUP:
        os.killpg(h.proc.pid, sig)
    else:
        h.proc.send_signal(sig)
    rc = h.wait(120)  # the startup timeout is 600 s: waiting it out would fail here
    name = signal.Signals(sig).name
    assert rc == 130, h.stderr()
    assert "Traceback" not in h.stderr()
    doc = load_snapshot(h.out)
    assert doc["run"]["stop_reason"] == f"stopped by {name}"
    assert [m["name"] for m in doc["modes"]] == ["first"]
    assert doc["modes"][0]["error"]["kind"] == "cancelled", doc["modes"][0].get("error")
    assert h.leftovers() == []


# A background thread of kvtui dies (issue 18: MemoryError in the telemetry thread, the run
# finished with exit 0 and no telemetry). Injected into the telemetry's per-second row.
TELEMETRY_BUG = """
import sys
import kvtui.explore.telemetry_loop as run_mod
real = run_mod.TelemetryLoop._row
calls = {"n": 0}
def buggy(self, *a, **k):
    calls["n"] += 1
    if calls["n"] == 4:
        raise MemoryError("injected into the telemetry thread")
    return real(self, *a, **k)
run_mod.TelemetryLoop._row = buggy
from kvtui.cli.entry import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_dead_telemetry_thread_fails_the_run_loudly(tmp_path, knee_path, runs):
    h = headless(tmp_path, knee_path, wrapper=TELEMETRY_BUG)
    runs.append(h)
    wait_until(lambda: h.proc.poll() is not None or "starting the engine" in h.stdout(), 120, "the engine starting", h.proc)
    h.note_groups()
    rc = h.wait()
    assert rc == 1, h.stdout() + h.stderr()
    out = h.stdout() + h.stderr()
    assert "telemetry thread failed: MemoryError: injected into the telemetry thread" in out
    doc = load_snapshot(h.out)
    assert doc["run"]["stop_reason"] == "kvtui failed: telemetry thread failed: MemoryError: injected into the telemetry thread"
    assert len(doc["modes"]) == 1  # the second mode never ran
    assert h.leftovers() == []


def test_sigterm_during_token_space_discovery_against_a_slow_tokenize(tmp_path, runs):
    """Hundreds of 3 s /tokenize probes (hours of discovery): SIGTERM still ends the run as a termination."""
    import subprocess
    import sys

    import httpx

    from reliability_helpers import HERE, free_port

    port = free_port()
    srv = subprocess.Popen([sys.executable, str(HERE / "echo_server.py"), "127.0.0.1", str(port), "slow-tokenize"],
                           start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(url + "/health", timeout=1, trust_env=False).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, 30, "the slow server up")
        sp = tmp_path / "slow.toml"
        sp.write_text(f'name = "slow"\n[server]\nengine = "external"\nurl = "{url}"\nmax_model_len = 4096\n'
                      '[[modes]]\nname = "a"\n[[modes]]\nname = "b"\n[workload]\nprompt_tokens = 16\noutput_tokens = 4\n'
                      '[ramp]\nstart = 1\nmax = 1\nwindow_s = 1\nwarmup_s = 0.1\n')
        h = headless(tmp_path, sp)
        runs.append(h)
        wait_until(lambda: "[a] ready in" in h.stdout(), 60, "the external server in use", h.proc)
        time.sleep(4)  # inside discovery (the first probe alone takes 3 s)
        os.killpg(h.proc.pid, signal.SIGTERM)  # as `timeout` and systemd send it: the whole group
        rc = h.wait(60)
        assert rc == 130, h.stdout() + h.stderr()
        err = h.stderr()
        assert "kvtui: SIGTERM: stopping" in err and "load-generator" not in err + h.stdout()
        doc = load_snapshot(h.out)
        assert doc["run"]["stop_reason"] == "stopped by SIGTERM"
        assert [m["name"] for m in doc["modes"]] == ["a"]  # the second mode never started
        assert h.leftovers() == []
    finally:
        srv.kill()
        srv.wait(10)
