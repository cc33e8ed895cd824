"""Issue 50, part A: a stop is never a verdict; every read from a server has a total deadline and
honours the run's stop; pre-flight checks what a mode's start will need. Real parts: the offline
run, a raw socket server that trickles, the fault server over real HTTP, kvtui's own processes."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from reliability_helpers import external_scenario, headless, runs  # noqa: F401

# -- 1. a stop is never a verdict ---------------------------------------------------------------


def _fast_run_stopped_at(tmp_path: Path, event_type: type, resume=None, out: str = "cut.json"):
    from kvtui.explore import events as ev  # noqa: F401
    from kvtui.explore.run import Run
    from kvtui.io.scenario import load_scenario
    from kvtui.io.scenario.defaults import demo_scenario_path

    sc = load_scenario(str(demo_scenario_path()), [])
    holder: dict = {}

    def listener(e):
        if isinstance(e, event_type) and "r" in holder:
            holder["r"].stop("stopped by SIGINT")

    r = Run(sc, tmp_path / out, listener=listener, fast=True, publish=False, resume=resume)
    holder["r"] = r
    return r.run()


@pytest.mark.parametrize("at", ["EngineReady", "ModeStarting"])
def test_a_stop_in_a_modes_start_is_no_verdict_and_resume_runs_it_again(tmp_path, at):
    """Ctrl-C while a mode starts (`kvtui run --fast`, its model and prediction being built) once
    recorded "no load met the SLO" with complete: true, and --resume kept it as finished."""
    from kvtui.explore import events as ev
    from kvtui.report.answer import answer_text
    from kvtui.report.outcome import stopped_line

    doc = _fast_run_stopped_at(tmp_path, getattr(ev, at))
    first = doc["modes"][0]
    assert first["complete"] is False, first
    assert "no load met" not in (first.get("search") or {}).get("describe", "")
    assert doc["run"]["outcome"] == "stopped" and first["name"] in doc["run"]["modes_cut"], doc["run"]
    text = answer_text(doc)
    assert "did not finish" in text and "no load met" not in text, text
    assert f"cut short: {first['name']}" in (stopped_line(doc) or "")
    # --resume runs the cut mode again (it is not kept as a finished one)
    from kvtui.io.snapshot.file import load_snapshot

    prev = load_snapshot(tmp_path / "cut.json")
    again = _fast_run_stopped_at(tmp_path, type(None), resume=prev, out="again.json")
    assert first["name"] not in again["resumed_from"]["modes"]
    m = next(m for m in again["modes"] if m["name"] == first["name"])
    assert m["complete"] is True and m["steps"] and m.get("best_concurrency") is not None


def test_preflight_fails_a_model_build_whose_extras_are_missing(tmp_path, monkeypatch):
    """A real-model scenario passed pre-flight ("ok … the first mode builds it") and every mode
    then failed: building the model needs kvtui[real]. Now the pre-flight says so and fails."""
    from kvtui.io.scenario import load_scenario
    from kvtui.models import build
    from kvtui.preflight import Preflight, _check_models

    monkeypatch.setenv("KVTUI_MODELS_DIR", str(tmp_path / "models"))  # nothing built there
    if not build.missing_converters():  # this interpreter has kvtui[real]: take one away
        monkeypatch.setattr(build, "_converter_versions",
                            lambda: {"torch": "2", "transformers": None, "gguf": "1", "accelerate": "1"})
    p = tmp_path / "real.toml"
    p.write_text('name = "real"\n[server]\nengine = "vllm"\nmodel = "kvtui:smollm2-135m-instruct"\n'
                 'max_model_len = 2048\n[[modes]]\nname = "bf16"\n[workload]\nprompt_tokens = 64\noutput_tokens = 8\n')
    pf = Preflight()
    sc = load_scenario(str(p), [])
    _check_models(pf, sc, sc.modes)  # the model check of the pre-flight (the vLLM and GPU ones aside)
    model = [c for c in pf.checks if c.name == "model"]
    assert model and model[0].status == "fail", [c.line() for c in pf.checks]
    assert "kvtui[real]" in model[0].line() and "not built yet" in model[0].line()
    assert not pf.ok


# -- 2. total deadlines ---------------------------------------------------------------------------


class Trickler:
    """A raw TCP server that answers one byte every `gap_s` (in its headers, or in its body after
    whole headers): no per-read timeout ever fires."""

    def __init__(self, gap_s: float = 0.3, where: str = "headers"):
        self.gap_s, self.where = gap_s, where
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.done.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c: socket.socket) -> None:
        try:
            c.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n"
            if self.where == "body":
                c.sendall(head + b"\r\n")
                head = b""
            for b in head + b" " * 100000:
                if self.done.is_set():
                    return
                c.sendall(bytes([b]))
                time.sleep(self.gap_s)
        except OSError:
            pass
        finally:
            c.close()

    def close(self) -> None:
        self.done.set()
        self.sock.close()


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_trickled_answer_ends_at_its_total_deadline_and_at_the_stop(where):
    """A byte every 0.3 s never trips a 2 s read timeout: the answer's whole deadline (1.5 s) ends
    it, and a thread's stop ends it within STOP_POLL_S (headers or body trickled alike).

    End to end on the wall: the whole answer would take 8 hours, so a bound of seconds says the
    deadline ended it (bounded work, not an SLO). The exact cut (at 1.5 s, at the stop's next
    byte, within STOP_POLL_S) is proven on a virtual clock: tests/reliability/test_virtual_deadlines.py."""
    from kvtui.safeio import fetch, http_client, thread_stop

    srv = Trickler(0.3, where)
    try:
        with http_client(timeout=2.0) as c:
            t0 = time.monotonic()
            with pytest.raises(httpx.TimeoutException):
                fetch(c, "GET", srv.url + "/health", total_s=1.5)
            assert time.monotonic() - t0 < 1.5 + 15, "the total deadline did not end the trickle"
            # no deadline given: the client's read timeout (2 s) bounds the whole answer
            t0 = time.monotonic()
            with pytest.raises(httpx.TimeoutException):
                fetch(c, "GET", srv.url + "/v1/models")
            assert time.monotonic() - t0 < 2.0 + 15, "the read timeout did not bound the whole answer"
            stop = threading.Event()
            threading.Timer(0.5, stop.set).start()
            t0 = time.monotonic()
            with thread_stop(stop.is_set), pytest.raises(httpx.TimeoutException, match="stopp"):
                fetch(c, "GET", srv.url + "/version", total_s=60)
            assert time.monotonic() - t0 < 30, "the stop did not end the trickle (its deadline is 60 s)"
    finally:
        srv.close()


def test_a_trickled_metrics_scrape_and_tokenize_probe_end_at_their_deadline():
    """The /metrics scrape (timeout 1 s) and the token-space discovery's /tokenize probes hold a
    whole-answer deadline too (bounds of seconds against hours of trickle: bounded work, not an
    SLO; the exact cuts are proven on a virtual clock in test_virtual_deadlines.py)."""
    from kvtui.runtime.load.workload import discover_token_space
    from kvtui.runtime.telemetry.prom import MetricsScraper

    srv = Trickler(0.2, "headers")
    try:
        t0 = time.monotonic()
        with MetricsScraper(srv.url + "/metrics", timeout_s=1.0) as s:
            sample = s.scrape()
        assert not sample.ok and "timed out" in (sample.error or "")
        assert time.monotonic() - t0 < 1.0 + 15, "the scrape's deadline did not end the trickle"
        t0 = time.monotonic()
        space = discover_token_space(srv.url, "m", {}, timeout_s=0.5, budget_s=3.0)
        assert time.monotonic() - t0 < 3.0 + 15, "discovery did not keep its budget"
        assert space is not None
    finally:
        srv.close()


def test_external_start_keeps_startup_timeout_with_a_trickling_models(tmp_path, fault_server_factory, runs):  # noqa: F811
    """A trickling /v1/models ignored server.startup_timeout_s = 10: the start now ends at it."""
    fs = fault_server_factory("--trickle", "/v1/models:1")
    sc = external_scenario(tmp_path, fs.url + "/v1")
    h = headless(tmp_path, sc, "--set", "server.startup_timeout_s=3")
    runs.append(h)
    t0 = time.monotonic()
    rc = h.wait(60)
    assert time.monotonic() - t0 < 3 + 40, h.stderr()  # bounded work: the trickle alone would hold it far longer
    assert rc == 1, h.stderr()
    err = h.stdout() + h.stderr()
    assert "server.startup_timeout_s = 3 s" in err and "Traceback" not in err, err
    doc = json.loads(h.out.read_text())
    assert doc["modes"][0]["error"]["kind"] == "timeout"


def test_sigterm_is_prompt_with_a_trickling_health_and_every_completion_503(tmp_path, fault_server_factory, runs):  # noqa: F811
    """Every completion 503 and a /health that trickles: the run once printed no step for 45 s and
    ignored SIGTERM for 20 s (the run thread inside check_alive). It now stops within seconds,
    with its snapshot."""
    fs = fault_server_factory("--http", "503:0:1000000", "--trickle", "/health:1:1")
    sc = external_scenario(tmp_path, fs.url + "/v1")
    h = headless(tmp_path, sc, "--set", "ramp.max=64")
    runs.append(h)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and "trickle/health" not in json.dumps(fs.stats()):
        time.sleep(0.2)
    time.sleep(1.0)  # well inside a /health answer that never ends
    assert h.proc.poll() is None, h.stderr()
    t0 = time.monotonic()
    h.proc.send_signal(signal.SIGTERM)
    rc = h.wait(30)
    took = time.monotonic() - t0
    # bounded work, not an SLO: SIGTERM was ignored for 20 s (the run thread inside check_alive)
    assert took < 15.0, f"SIGTERM took {took:.1f} s\n{h.stderr()[-1500:]}"
    assert rc == 130, h.stderr()
    assert h.out.exists() and not h.journal.exists()
    doc = json.loads(h.out.read_text())
    assert doc["run"]["stop_reason"] and "SIGTERM" in doc["run"]["stop_reason"]
    m = doc["modes"][0]
    assert not (m.get("complete") and not m.get("error")) or m["search"].get("done"), m.get("search")


@pytest.mark.slow
def test_a_kv_figure_that_stops_arriving_is_named_in_the_step_line(tmp_path, fault_server_factory, runs):  # noqa: F811
    """/metrics that trickles after its first answers: the KV column went blank with no word. The
    step line now says KV — and why; the snapshot's step carries metrics_missing."""
    fs = fault_server_factory("--trickle", "/metrics:0.5:1")
    sc = external_scenario(tmp_path, fs.url + "/v1")
    h = headless(tmp_path, sc, "--set", "ramp.window_s=3", "--set", "ramp.max=2")
    runs.append(h)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and h.proc.poll() is None and "[baseline] c=" not in h.stdout():
        time.sleep(0.2)
    h.proc.send_signal(signal.SIGTERM)  # the first step's line is enough
    h.wait(60)
    out = h.stdout()
    lines = [ln for ln in out.splitlines() if ln.startswith("[baseline] c=")]
    assert lines and all("KV — (no /metrics:" in ln and "timed out" in ln for ln in lines), out
    doc = json.loads(h.out.read_text())
    assert all(s.get("metrics_missing") for s in doc["modes"][0]["steps"])
