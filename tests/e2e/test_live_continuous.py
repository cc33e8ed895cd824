"""Continuous steps on a live server (`ramp.protocol = "continuous"`): the load generator keeps a
step's requests in flight at its end, and the next step continues from them where the protocol
allows (a step up or down, a confirmation from another load); elsewhere (a repeat of the step just
before, after the KV wall) it releases them and drains.

A real run over HTTP against the live simulator (the demo, fast-forwarded; the `--seed` knob keeps
the HTTP simulator, where the demo alone runs in process, kvtui.explore.pacing), judged on the live
client's own records. What is checked is how the live steps ran and that every live request
reached the records file exactly once.
"""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

QUICK = ["--set", "ramp.window_s=2", "--set", "ramp.warmup_s=1", "--set", "server.time_scale=0.05"]


def _run(tmp_path, protocol, *extra):
    out = tmp_path / f"{protocol}.json"
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", "sim-demo", "--headless", "--out", str(out),
                        "--mode", "fp8-kv", *QUICK, "--set", f'ramp.protocol="{protocol}"', *extra],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "120"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    recs = [json.loads(x) for x in out.with_name(out.stem + ".records.jsonl").read_text().splitlines() if x.strip()]
    return json.loads(out.read_text()), recs


def test_live_steps_continue_up_and_down_and_write_each_request_once(tmp_path):
    doc, recs = _run(tmp_path, "continuous", "--set", 'server.extra_args=["--seed", "0"]')
    assert doc["run"]["fast"] is False  # the HTTP simulator, judged on the live client's own records
    steps = doc["modes"][0]["steps"]
    assert steps[0]["drain"] == {"before": True, "why": "the mode's first step"}
    continued = [s for s in steps if not s["drain"]["before"]]
    assert continued, [s["drain"] for s in steps]
    for prev, s in zip(steps, steps[1:]):
        if s["load"] != prev["load"] and not (prev.get("preemptions") or prev.get("aborted")):
            assert not s["drain"]["before"], (prev["load"], s["load"], s["drain"])
        if not s["drain"]["before"]:
            assert s["load"] != prev["load"]
            ramp = s["ramp"]
            if s["load"] > prev["load"]:  # the new slots start at the steady state's rate, not at once
                assert ramp["settle"] == "time" and ramp["stagger_s"] > 0, ramp
            assert s["continued_from"] == {"step": prev["index"], "load": prev["load"],
                                           "in_flight": s["continued_from"]["in_flight"]}
            assert 0 < s["continued_from"]["in_flight"] <= prev["load"]
        if s.get("why") == "confirm" and s["load"] == prev["load"]:
            assert s["drain"]["before"]
    # Every id once (a carried request's record comes once, under the step it was sent in), no cut copy.
    ids = [x["id"] for x in recs]
    assert len(ids) == len(set(ids))
    assert not any("carried into the next step" in (x.get("detail") or "") for x in recs)
    # requests sent in one step ended in the next: carried, not cancelled
    by_id = {x["id"]: x for x in recs}
    assert len(by_id) == len(recs) and any(x.get("status") == "ok" and x.get("phase") == "tail" for x in recs)


def test_a_live_step_whose_verdict_is_decided_closes_its_window_early(tmp_path):
    """The sequential test looks during a live step's window (kvtui.explore.live_look), cohort by
    cohort, judged on the live client's own records (`--seed`: the HTTP simulator). Under a TTFT
    target no request can meet (1 ms), each step's FAIL is decided on its first whole cohort: the
    window closes there, long before its 400 modelled seconds (20 s wall at ×20), the tail runs, and
    the step says what closed it. No window request was sent after the window closed."""
    doc, recs = _run(tmp_path, "continuous", "--set", 'server.extra_args=["--seed", "0"]',
                     "--set", "ramp.window_s=400", "--set", "slo.ttft_p95_ms=1")
    steps = doc["modes"][0]["steps"]
    assert steps and doc["modes"][0]["best_concurrency"] is None
    for s in steps:
        assert s["stopped_early"] and s["early_stop"]["by"] == "sequential", s.get("early_stop")
        seq = s["sequential"]
        assert seq["verdict"] is False and seq["share"] == 0.25 and seq["targets"][0]["decided"] is False
        assert s["t_window_end"] - s["t_window_start"] < 400 * 0.05  # the by-time rule could not close it yet
        sent = [x["t_intended"] for x in recs if x["step"] == s["index"] and x["phase"] == "window"]
        assert sent and max(sent) <= s["t_window_end"]
