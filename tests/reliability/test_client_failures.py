"""The client's own failures are the client's, named, never a verdict about the server (issue 18).

Real headless runs against the fault server: a load-generator worker SIGKILLed mid-step, the
whole kvtui stopped (SIGSTOP, as Ctrl-Z does) and continued, kvtui out of file descriptors.
In-process, against the same real server: a load task that raises (a burst_size of 0 divides
by zero in the open-loop arrivals) and a prompt the factory cannot build (a dataset row it
cannot use) — a client bug is the fault no real part produces on demand, so it is injected.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time

import pytest

from kvtui.io.records import read_records
from kvtui.io.scenario.schema import Length, Workload
from kvtui.io.snapshot.file import load_snapshot
from kvtui.runtime.load.protocol import StepSpec, WorkerConfig
from kvtui.runtime.load.worker import _Worker
from kvtui.runtime.load.workload import TokenSpace

from reliability_helpers import cmdline, descendants, external_scenario, headless, wait_until


def _workers(pid: int) -> list[int]:
    return [p for p in descendants(pid) if "spawn_main" in cmdline(p)]


def _records_grow(h):
    return h.records.exists() and h.records.stat().st_size > 0


def test_a_worker_killed_mid_step_gives_no_final_answer_and_resume_continues(tmp_path, runs, fault_server_factory):
    srv = fault_server_factory("--gap-ms", "20", "--tokens", "16")
    sp = external_scenario(tmp_path, srv.url)
    h = headless(tmp_path, sp, "--set", "ramp.window_s=4")
    runs.append(h)
    wait_until(lambda: _workers(h.proc.pid) and _records_grow(h), 60, "a step in flight", h.proc)
    for p in _workers(h.proc.pid):
        os.kill(p, signal.SIGKILL)
    rc = h.wait()
    out = h.stdout() + h.stderr()
    assert rc == 1 and "Traceback" not in out, out[-3000:]
    assert "load generator failed" in out and "load-generator process died" in out
    doc = load_snapshot(h.out)
    m = doc["modes"][0]
    assert m["complete"] is False and m["error"]["kind"] == "client"
    assert m["steps"][-1].get("cut") and m["steps"][-1]["passed"] is None
    assert m["steps"][-1]["flags"]["client_failed"]
    assert h.leftovers() == []
    # --resume does not keep it as final: the mode is measured on (from its finished steps), and now finishes.
    # (with the same settings: a resume refuses another way of measuring, ramp.window_s included)
    h2 = headless(tmp_path, sp, "--set", "ramp.window_s=4", "--resume", str(h.out), out=tmp_path / "run2.json")
    runs.append(h2)
    assert h2.wait() == 0, h2.stdout()[-3000:]
    doc2 = load_snapshot(h2.out)
    assert "baseline" not in doc2["resumed_from"]["modes"]  # not kept as it was: measured on
    assert doc2["modes"][0]["complete"] is True
    assert not any("client_failed" in (s.get("flags") or {}) for s in doc2["modes"][0]["steps"])


def test_a_stopped_client_is_flagged_and_its_step_measured_again(tmp_path, runs, fault_server_factory):
    srv = fault_server_factory("--gap-ms", "20", "--tokens", "16")
    h = headless(tmp_path, external_scenario(tmp_path, srv.url), "--set", "ramp.window_s=4", "--set", "ramp.max=2")
    runs.append(h)
    wait_until(lambda: _records_grow(h), 60, "a step in flight", h.proc)
    os.killpg(h.proc.pid, signal.SIGSTOP)  # Ctrl-Z stops the whole foreground job
    time.sleep(3)
    os.killpg(h.proc.pid, signal.SIGCONT)
    rc = h.wait()
    assert h.trackers_left() == []  # a finished run reaped its resource tracker before exiting
    assert rc == 0, h.stdout()[-3000:] + h.stderr()[-3000:]
    steps = load_snapshot(h.out)["modes"][0]["steps"]
    stalled = [s for s in steps if "client_stalled" in (s.get("flags") or {})]
    assert stalled, steps
    for s in stalled:
        assert s["passed"] is None and s["limited_by"] == "client" and s["flags"]["client_stalled"] >= 2
        # The same load measured again after it, with a verdict of its own.
        later = steps[steps.index(s) + 1:]
        assert any(x["load"] == s["load"] and "client_stalled" not in (x.get("flags") or {}) for x in later)
    assert "client_stalled=" in h.stdout()


RLIMIT_WRAPPER = (
    "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)); "
    "sys.argv = ['kvtui'] + sys.argv[1:]; runpy.run_module('kvtui', run_name='__main__', alter_sys=True)"
)


def test_out_of_file_descriptors_is_the_clients_failure_not_the_servers(tmp_path, runs, fault_server_factory):
    srv = fault_server_factory("--gap-ms", "20", "--tokens", "16")
    h = headless(tmp_path, external_scenario(tmp_path, srv.url), "--set", "ramp.start=96", "--set", "ramp.max=96",
                 wrapper=RLIMIT_WRAPPER)
    runs.append(h)
    rc = h.wait()
    out = h.stdout() + h.stderr()
    assert rc == 1 and "Traceback" not in out, out[-3000:]
    assert "out of file descriptors" in out and "limited by errors" not in out
    step = load_snapshot(h.out)["modes"][0]["steps"][0]
    assert step["limited_by"] == "client" and step["passed"] is None
    assert step["flags"]["client_errors"] > 0 and step["errors_by_class"].get("connect", 0) == 0
    assert any(r.error == "client" for r in read_records(h.records))


# ----------------------------------------------------------------------------- in-process


class _Pipe:
    """The worker's end of the parent pipe: what it sends is kept."""

    def __init__(self):
        self.sent: list[tuple] = []

    def send(self, msg):
        self.sent.append(msg)


def _worker(url: str) -> _Worker:
    w = Workload(prompt_tokens=Length(value=16), output_tokens=Length(value=4))
    space = TokenSpace(ids=list(range(100, 164)), words=[f" w{i}" for i in range(64)], verified=True, source="test")
    cfg = WorkerConfig(base_url=url, model="fault", headers={}, workload=dataclasses.asdict(w),
                       space=dataclasses.asdict(space), max_model_len=4096, salt=1, seed=1, request_timeout_s=10)
    return _Worker(_Pipe(), cfg)


def _run_step(worker: _Worker, spec: StepSpec, seconds: float) -> dict:
    async def go():
        q: asyncio.Queue = asyncio.Queue()
        q.put_nowait(("phase", "window"))
        loop = asyncio.get_running_loop()
        loop.call_later(seconds, q.put_nowait, ("stop",))
        await worker.run_step(spec, q)

    asyncio.run(go())
    status = [m[1] for m in worker.conn.sent if m[0] == "status"]
    records = [r for m in worker.conn.sent if m[0] == "records" for r in m[1]]
    return {"status": status[-1], "records": records}


def test_a_load_task_that_raises_is_a_named_client_failure(fault_server_factory, capfd):
    srv = fault_server_factory("--gap-ms", "2")
    spec = StepSpec("m", 0, 5.0, closed=False, arrival="bursty", burst_size=0)
    got = _run_step(_worker(srv.url), spec, 1.0)
    # burst_size 0, which the scenario's range refuses: the arrivals task raises (kvtui.core.arrivals)
    assert "ValueError" in (got["status"].client_failure or "") and "burst_size" in got["status"].client_failure
    assert "Task exception was never retrieved" not in capfd.readouterr().err


def test_a_prompt_the_client_cannot_build_is_a_client_error_and_the_slots_live_on(fault_server_factory, capfd):
    srv = fault_server_factory("--gap-ms", "2")
    w = _worker(srv.url)

    def bad_build(counter, conv=None):
        raise TypeError("prompt must be a str, not int")  # what {"prompt": 5} once did

    w.factory.build = bad_build
    got = _run_step(w, StepSpec("m", 0, 2.0, closed=True, max_error_burst=5), 1.0)
    recs = got["records"]
    assert recs and all(r["error"] == "client" and "TypeError" in r["detail"] for r in recs)
    assert "client errors in a row" in (got["status"].client_failure or "")
    assert "Task exception was never retrieved" not in capfd.readouterr().err
