"""The harness prepared apart from its requests (kvtui.quality.harness.HarnessSession), against the simulator
over HTTP: a prepared worker sends nothing until it is told to go, then scores what the one-shot path scores;
one closed before `go` leaves no process and sends nothing; one that dies before it is ready gives "not run"
with a reason; quality at the knee prepares the harness before it starts the knee's load.

Why: quality at the knee used to start the load first, and the worker then imported torch and loaded its
datasets under it; on a host whose server saturates the CPUs that took minutes, the load running all along.

The simulator's request count (its /metrics: finished + running + waiting) is what "sent nothing" means here.
Skips where lm-eval is not installed. The simulator and the task folder are conftest.py's (`sim`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from kvtui.io.scenario.loader import load_scenario
from kvtui.quality.harness import HarnessSession, harness_env, run_suites, spec_for
from kvtui.quality.harness_worker import STOPPED

pytest.importorskip("lm_eval")
pytestmark = pytest.mark.slow

SUITES = '["mine_a", "mine_both", "mine_c"]'


def _scenario(root: Path, extra: str = "") -> Any:
    path = root / "prepared.toml"
    path.write_text(f'[quality]\nenabled = true\nsuite_paths = ["evals"]\nsuite_limit = 0\nsuite_fewshot = 2\n'
                    f'suites = {SUITES}\n{extra}')
    return load_scenario(str(path))


def _requests(endpoint: Any) -> float:
    """Every generation request the simulator has seen: finished, running, waiting."""
    text = httpx.get(endpoint.base_url + "/metrics", headers=endpoint.headers(), timeout=10).text
    names = ("vllm:request_success_total", "vllm:num_requests_running", "vllm:num_requests_waiting")
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(names))


def _items(res: dict[str, Any]) -> dict[str, Any]:
    # text_sha is left out: the simulator's reply text depends on its request id, which differs between runs.
    return {n: (t.get("not_run"), [(x["id"], x["key"], x["ok"], x["answer"], x["target"]) for x in t["items"]])
            for n, t in res.items()}


def _gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)  # the worker ran in a process group of its own: anything it started, too
    except ProcessLookupError:
        return True
    return False


def test_a_prepared_worker_sends_nothing_until_go_then_scores_as_the_one_shot_path(sim):
    endpoint, root = sim
    sc = _scenario(root)
    once = run_suites(endpoint, sc)
    lines: list[str] = []
    with HarnessSession(endpoint, sc, on_log=lines.append) as s:
        before = _requests(endpoint)
        ready_s = s.wait_ready(300)
        assert ready_s is not None and ready_s > 0, s.why
        time.sleep(1.0)  # what a worker that did not wait would have sent by now has landed
        assert _requests(endpoint) == before  # ready: imports, task index and data loaded, nothing sent
        s.go()
        res = s.result(300)
    assert _requests(endpoint) > before
    assert _items(res) == _items(once)
    assert res["mine_a"]["n"] == 6 and res["mine_both"]["n"] == 10 and "no task 'mine_c'" in res["mine_c"]["not_run"]
    assert any(ln.startswith("[kvtui] quality suites took ") and "of it preparing" in ln for ln in lines), lines
    assert _gone(s.pid)


def test_a_prepared_session_closed_before_go_leaves_no_process_and_sends_nothing(sim):
    endpoint, root = sim
    sc = _scenario(root)
    before = _requests(endpoint)
    s = HarnessSession(endpoint, sc)
    try:
        assert s.wait_ready(300) is not None, s.why
        pid = s.pid
        assert pid is not None and not _gone(pid)
    finally:
        s.close()
    assert _gone(pid)
    res = s.result()  # never told to go: every suite not run, with why
    assert all(t["not_run"] and t["n"] is None for t in res.values())
    assert "never told to go" in res["mine_a"]["not_run"]
    time.sleep(1.0)
    assert _requests(endpoint) == before


def test_the_worker_told_nothing_ends_by_itself_and_sends_nothing(sim, tmp_path):
    # EOF on stdin (the parent closed it, or died) instead of `go`: exit 0, OUT says why, no request.
    endpoint, root = sim
    sc = _scenario(root)
    spec, out = tmp_path / "spec.json", tmp_path / "out.json"
    spec.write_text(json.dumps(spec_for(endpoint, sc)))
    before = _requests(endpoint)
    p = subprocess.Popen([sys.executable, "-m", "kvtui.quality.harness_worker", "--wait", str(spec), str(out)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=harness_env(endpoint.api_key), cwd=tmp_path)
    try:
        assert p.stdout is not None and p.stdin is not None
        assert p.stdout.readline().strip() == "ready"  # the protocol's stdout holds that one line only
        p.stdin.close()
        assert p.wait(120) == 0
        assert p.stdout.read() == ""
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    doc = json.loads(out.read_text())
    assert doc["suites"]["mine_a"] == doc["suites"]["mine_both"] == {"status": "not run", "why": STOPPED}
    assert "no task 'mine_c'" in doc["suites"]["mine_c"]["why"]  # its own reason, from preparing
    assert _requests(endpoint) == before


def test_a_worker_that_dies_before_ready_gives_not_run_with_a_reason(sim):
    endpoint, root = sim
    sc = _scenario(root)
    lines: list[str] = []
    with HarnessSession(endpoint, sc, on_log=lines.append) as s:
        s.start()
        assert s.pid is not None
        os.kill(s.pid, signal.SIGKILL)  # long before it could have imported lm-eval
        assert s.wait_ready(300) is None
        s.go()  # not ready: nothing to do
        res = s.result(300)
    assert set(res) == {"mine_a", "mine_both", "mine_c"}
    for t in res.values():
        assert t["not_run"].startswith("the harness exited -9") and "\n" not in t["not_run"]
        assert t["n"] is None and t["items"] == []
    assert any(ln.startswith("[kvtui] quality suites not run: the harness exited -9") for ln in lines)


class _Load:
    """The knee's load generator, reduced to what the test needs: real chat requests to the simulator in a
    closed loop of one until told to stop, and when the first one was sent."""

    def __init__(self, endpoint: Any, sent_before: list[float]):
        self.endpoint = endpoint
        self.first_send: float | None = None
        self.sent_before = sent_before  # the simulator's request count when the load started

    def run_step(self, params: Any, should_stop: Any = None) -> Any:
        self.sent_before.append(_requests(self.endpoint))
        records = []
        with httpx.Client(base_url=self.endpoint.base_url, headers=self.endpoint.headers(), timeout=60) as c:
            while not (should_stop and should_stop()):
                if self.first_send is None:
                    self.first_send = time.monotonic()
                r = c.post("/v1/chat/completions", json={"model": self.endpoint.model, "max_tokens": 8,
                                                         "messages": [{"role": "user", "content": "load"}]})
                records.append(r.status_code)
        return SimpleNamespace(records=records)


def test_quality_at_the_knee_prepares_the_harness_before_the_load(sim):
    from kvtui.explore.knee_quality import measure_at_knee
    from kvtui.quality.runner import run_suite

    endpoint, root = sim
    sc = _scenario(root, 'tasks = ["quotation"]\nitems = 2\nconcurrency = 1\nat_knee = true\n[ramp]\nwarmup_s = 0.2\n')
    alone = run_suite(endpoint, sc)
    events: list[tuple[float, str]] = []
    run = SimpleNamespace(scenario=sc, closed=True, stopping=False, stop_reason=None,
                          emit=lambda e: events.append((time.monotonic(), getattr(e, "line", "") or str(e))))
    sent_before: list[float] = []
    load = _Load(endpoint, sent_before)
    tel = SimpleNamespace(scrape_now=lambda: None, window=lambda a, b: {})
    executor = SimpleNamespace(run=run, endpoint=endpoint, loadgen=load, telemetry=tel, _time_scale=lambda: 1.0,
                               _drain=lambda t: None)
    md = {"name": "bf16", "quality": {"tasks": alone["tasks"]},
          "steps": [{"load": 2, "passed": True, "why": "search"}, {"load": 4, "passed": False, "why": "search"}]}
    start = _requests(endpoint)
    out = measure_at_knee(executor, md)
    assert "skipped" not in out, out
    assert isinstance(out["harness_ready_s"], float) and out["harness_ready_s"] > 0
    assert out["tasks"]["mine_a"]["n"] == 6 and out["tasks"]["quotation"]["n"] == 2
    assert out["load_requests"] and out["load_requests"] > 0
    # The order: the harness said it was ready (and had sent nothing) before the load's first request.
    ready = [t for t, line in events if "the harness prepared its suites" in line and "before the load" in line]
    assert len(ready) == 1 and load.first_send is not None and load.first_send >= ready[0]
    assert sent_before == [start]
    assert not [line for _t, line in events if "suites not run" in line]
