"""The server fails under a real run: killed (SIGKILL) or frozen (SIGSTOP) mid-step, failing at
startup, its port taken, nothing listening.

The first two run the real `Run` in this process against real `kvtui sim serve` processes (the
knee scenario: steps of about a second) and hit the server from the run's own listener at the
moment a step's measurement window is open, so the fault lands mid-step every time. The
others are real headless commands.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import uuid

import pytest

from kvtui.explore.run import Run
from kvtui.io.records import read_records
from kvtui.io.scenario import load_scenario
from kvtui.io.snapshot.file import load_snapshot

from reliability_helpers import TAG_ENV, cmdline, headless, journal_steps, tagged, wait_until


def _server_of(tag: str, mode: str) -> int:
    """pid of the simulator kvtui started for `mode` (its command line names the mode)."""
    found = [pid for pid, cmd in tagged(tag) if " sim serve " in f" {cmd} " and f"--mode {mode} " in cmd + " "]
    assert len(found) == 1, tagged(tag)
    return found[0]


class _Harness:
    """Run in a thread; the listener injects `fault` once, when `mode`'s step `at_step` is in its window."""

    def __init__(self, sc, out, mode: str, at_step: int, fault):
        self.mode, self.at_step, self.fault = mode, at_step, fault
        self.events: list = []
        self.steps_started = 0
        self.hit: dict = {}
        self.run = Run(sc, out, listener=self.on)
        self.doc = None
        self.error: BaseException | None = None

    def on(self, ev) -> None:
        self.events.append(ev)
        if ev.mode != self.mode:
            return
        if ev.kind == "step_started":
            self.steps_started += 1
        elif (ev.kind == "step_progress" and not self.hit and self.steps_started == self.at_step + 1
              and ev.data.get("phase") == "window" and ev.data.get("window_started", 0) > 0):
            self.hit = self.fault()

    def go(self, timeout_s: float = 300) -> dict:
        def target():
            try:
                self.doc = self.run.run()
            except BaseException as e:  # noqa: BLE001 - the test reports it
                self.error = e

        t = threading.Thread(target=target)
        t.start()
        t.join(timeout_s)
        assert not t.is_alive(), "the run did not end"
        if self.error:
            raise self.error
        return self.doc


@pytest.fixture
def tag(monkeypatch):
    t = uuid.uuid4().hex
    monkeypatch.setenv(TAG_ENV, t)  # every process the run starts inherits it
    yield t
    for pid, _ in tagged(t):
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def test_server_killed_mid_step_is_reported_and_the_next_mode_runs(tmp_path, knee_path, tag):
    sc = load_scenario(knee_path, ["ramp.max=8"])
    out = tmp_path / "run.json"

    def kill():
        pid = _server_of(tag, "first")
        os.kill(pid, signal.SIGKILL)
        return {"pid": pid}

    h = _Harness(sc, out, "first", at_step=1, fault=kill)
    doc = h.go()
    assert h.hit, "the fault was never injected"
    first, second = doc["modes"]
    # Classified: the engine crashed, killed by SIGKILL, while serving.
    assert first["error"]["kind"] == "crashed" and "SIGKILL" in first["error"]["message"], first["error"]
    errors = [e.data for e in h.events if e.kind == "error"]
    assert any("engine died" in str(x) and "SIGKILL" in str(x) for x in errors), errors
    # The finished step is kept whole; the step the kill cut is recorded as aborted.
    assert first["steps"][0]["aborted"] is None and first["steps"][0]["requests"] > 0
    cut = first["steps"][-1]
    assert cut["index"] == 1 and cut["aborted"] and cut["passed"] is False
    # The run went on: the second mode was measured in full (the knee model: 6 passes, 7 fails).
    assert "error" not in second and second["complete"] and second["best_concurrency"] == 6
    assert doc["run"]["finished"] is True
    # Final snapshot on disk, journal gone, every step there, and its records.
    back = load_snapshot(out)
    assert not out.with_name("run.json.journal").exists()
    assert [len(m["steps"]) for m in back["modes"]] == [len(first["steps"]), len(second["steps"])]
    recs = list(read_records(out.with_name("run.records.jsonl")))
    assert {r.mode for r in recs} == {"first", "second"}
    assert any(r.mode == "first" and r.step == 1 and r.error in ("connect", "truncated", "cancelled") for r in recs)
    assert tagged(tag) == []  # nothing left: the dead server's group, the workers, the second server


def test_server_frozen_mid_step_times_out_and_is_killed(tmp_path, knee_path, tag):
    """SIGSTOP: the process lives, its socket accepts, nothing answers. Requests end at their
    per-request timeout, the step ends as an error burst, and the stop escalates to SIGKILL."""
    sc = load_scenario(knee_path, ["ramp.start=2", "ramp.max=3", "ramp.step=\"+1\"", "ramp.search=\"linear\"",
                                   "ramp.confirm=false", "ramp.min_samples=5", "slo={tpot_p50_ms=35}",
                                   "ramp.request_timeout_s=2", "ramp.max_error_burst=3",
                                   "server.stop_timeout_s=3", "modes=[{name=\"first\"}]"])
    out = tmp_path / "run.json"

    def freeze():
        pid = _server_of(tag, "first")
        os.kill(pid, signal.SIGSTOP)
        return {"pid": pid}

    h = _Harness(sc, out, "first", at_step=1, fault=freeze)
    doc = h.go()
    assert h.hit, [e.data for e in h.events if e.kind in ("warning", "error")]
    (first,) = doc["modes"]
    frozen = first["steps"][1]
    assert frozen["passed"] is False and frozen["error_burst"] and frozen["limited_by"] == "errors"
    assert frozen["errors_by_class"].get("timeout", 0) >= 1, frozen["errors_by_class"]
    recs = [r for r in read_records(out.with_name("run.records.jsonl")) if r.step == 1]
    timeouts = [r for r in recs if r.error == "timeout"]
    assert timeouts and all("within 2 s" in r.detail for r in timeouts)
    assert first["steps"][0]["aborted"] is None and first["steps"][0]["requests"] > 0  # measured before the freeze, kept
    assert doc["run"]["finished"] is True
    warnings = [str(e.data) for e in h.events if e.kind == "warning"]
    assert any("metrics unavailable: timed out" in w for w in warnings), warnings  # the frozen /metrics, said once
    # kvtui's own SIGKILL of the frozen server at the end is no "engine died" error.
    assert [e.data for e in h.events if e.kind == "error"] == []
    assert tagged(tag) == []  # the stopped server was killed (SIGINT/SIGTERM wait while stopped)


BROKEN = """
[[modes]]
name = "broken"
extra_args = ["--no-such-flag"]
"""


def test_engine_failing_at_startup_is_classified_and_the_run_goes_on(tmp_path, knee_path, runs):
    """The simulator refuses a flag (as vLLM does): the mode gets a classified error, the next mode runs, exit 1."""
    sp = tmp_path / "broken.toml"
    sp.write_text(knee_path.read_text().replace('[[modes]]\nname = "first"\n[[modes]]\nname = "second"\n', BROKEN + '[[modes]]\nname = "second"\n'))
    h = headless(tmp_path, sp, "--set", "ramp.max=4")
    runs.append(h)
    rc = h.wait()
    out = h.stdout()
    assert rc == 1, out + h.stderr()
    assert "kvtui: error: mode broken: bad_flag: " in out and "--no-such-flag" in out
    assert "Traceback" not in out + h.stderr()
    doc = load_snapshot(h.out)
    broken, second = doc["modes"]
    assert broken["error"]["kind"] == "bad_flag" and broken["steps"] == []
    assert "--no-such-flag" in broken["error"]["log_tail"]
    assert second["complete"] and second["steps"] and "error" not in second
    assert h.leftovers() == []


def test_port_already_taken(tmp_path, knee_path, runs):
    """server.port names a port another process holds: classified, no retry on another port, exit 1.
    The pre-flight refuses a taken port before any mode (tests/pkg/test_preflight.py); here it is
    skipped, as when the port is taken between the pre-flight and a mode's start."""
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen(8)
    port = squatter.getsockname()[1]
    try:
        h = headless(tmp_path, knee_path, "--set", f"server.port={port}", env={"KVTUI_PREFLIGHT": "0"})
        runs.append(h)
        rc = h.wait()
    finally:
        squatter.close()
    out = h.stdout()
    assert rc == 1, out + h.stderr()
    doc = load_snapshot(h.out)
    assert [m["error"]["kind"] for m in doc["modes"]] == ["port_taken", "port_taken"], [m.get("error") for m in doc["modes"]]
    assert out.count("kvtui: error: mode ") == 2 and "port_taken" in out
    assert "Traceback" not in out + h.stderr()
    assert h.leftovers() == []


def test_connection_refused_by_an_external_server(tmp_path, runs):
    from reliability_helpers import external_scenario, free_port

    sp = external_scenario(tmp_path, f"http://127.0.0.1:{free_port()}")
    h = headless(tmp_path, sp)
    runs.append(h)
    rc = h.wait()
    out = h.stdout()
    assert rc == 1
    assert "kvtui: error: mode baseline: connect: cannot reach http://127.0.0.1:" in out
    assert "Traceback" not in out + h.stderr()
    doc = load_snapshot(h.out)
    assert doc["modes"][0]["error"]["kind"] == "connect"
    assert h.leftovers() == []
