"""The continuous protocol in the offline simulator (`kvtui run --fast`): modelled time, no wall clock."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtui.cli.entry import main as kvtui_main
from kvtui.explore.run import Run
from kvtui.io.scenario.loader import load_scenario
from kvtui.io.scenario.schema import Scenario


def _scenario(tmp: Path) -> Scenario:
    path = tmp / "s.toml"
    if not path.exists():
        assert kvtui_main(["init", "llama-3.1-8b", "--engine", "sim", "--gpu", "H200", "--out", str(path)]) == 0
    return load_scenario(path)


def _run(sc: Scenario, tmp: Path, name: str, modes: list[str], search: str | None = None) -> dict:
    if search:
        sc.ramp.search = search  # a bisection steps down too (where a step continues)
    return Run(sc, tmp / f"{name}.json", modes=modes, fast=True).run()


def test_continuous_steps_are_shorter_in_modelled_time_and_say_how_they_ran(tmp_path: Path) -> None:
    sc = _scenario(tmp_path)
    steps = _run(sc, tmp_path, "cont", ["fp8-kv"], "fast")["modes"][0]["steps"]
    window = sc.ramp.warmup_s + sc.ramp.window_s
    idle = [s["duration_s"] / window for s in steps if s["drain"]["before"]]
    cont = [s["duration_s"] / window for s in steps if not s["drain"]["before"]]
    # a continued step is shorter (modelled seconds) than one from an idle server, which spreads its
    # first sends over one request's duration
    assert idle and cont and statistics.median(cont) < statistics.median(idle)
    assert steps[0]["drain"] == {"before": True, "why": "the mode's first step"}
    assert any("continued_from" in s for s in steps), "no step continued from the one before"
    for s in steps:
        assert s["protocol"] == "continuous" and isinstance(s["stopped_early"], bool)
        seq = s["sequential"]
        assert seq["confidence"] == sc.ramp.confidence and seq["min_samples"] >= 40
        if s["stopped_early"]:
            # never decided on fewer window samples than the classic rule's minimum
            assert min(t["n"] for t in seq["targets"]) >= seq["min_samples"]
            assert s["samples"]["ttft"] >= seq["min_samples"]
        ramp = s["ramp"]
        assert ramp["settle"] in ("time", "turnover") and ramp["stagger_s"] >= 0
        # the window opens no sooner than the warm-up after the last new slot sent
        assert s["phases_s"]["warmup"] >= sc.ramp.warmup_s + (ramp["stagger_s"] if ramp["settle"] == "time"
                                                              and s["load"] > (s.get("continued_from") or
                                                                               {"load": 0})["load"] else 0) - 1e-6
    for prev, s in zip(steps, steps[1:]):
        if s.get("why") == "confirm" and s["load"] == prev["load"]:
            assert s["drain"]["before"], "a repeat of the step just before starts from an idle server"
        if s.get("why") == "confirm" and not s["drain"]["before"]:
            # continued: from another load, never from the step it confirms
            assert s["load"] != prev["load"] and s["continued_from"]["load"] == prev["load"]
        if s["load"] > prev["load"] and not (prev.get("preemptions") or prev.get("aborted")):
            assert not s["drain"]["before"], "a step up continues from the requests in flight"


def _steady_tpot_p95(sc: Scenario, mode_name: str, load: float) -> float:
    """The load's steady state: one long drained run, births spread over one request, the start discarded."""
    from kvtui.core.stats import percentile
    from kvtui.simulator.engine.continuous import ContinuousClient, StepPlan
    from kvtui.simulator.engine.fastrun import OfflineServer

    mode = next(m for m in sc.modes if m.name == mode_name)
    srv = OfflineServer(sc, mode, 1)
    res, _, _ = ContinuousClient(srv.sched, srv._sample, sc.seed).step(
        StepPlan(load=load, warmup_s=0.0, window_s=300.0, need=1, drain_before=True, stagger_s=12.0, settle="time"),
        0, 0)
    recs = [r for r in res.records if r.ok and r.t_sent >= res.t_start + 60 and r.tpot is not None]
    return percentile(sorted(r.tpot * 1e3 for r in recs), 0.95)


@pytest.mark.parametrize("mode,load", [("bf16", 149.0), ("fp8-w", 232.0)])
def test_a_step_reads_the_steady_state(tmp_path: Path, mode: str, load: float) -> None:
    """What a step measures is the steady state of its load (bench/protocol_bias.py across a whole
    comparison): a continuous step, first or continued from another load, reads the long run's TPOT
    p95 within 2 %; a step whose slots are all born within a second (the retired classic protocol's
    ramp, as the prediction's pilot still runs it: OfflineServer.step) reads it higher."""
    sc = _scenario(tmp_path)
    truth = _steady_tpot_p95(sc, mode, load)
    sc.ramp.search, sc.ramp.confirm = "linear", False
    sc.ramp.start, sc.ramp.step, sc.ramp.max = load * 0.9, f"+{load * 0.1:g}", load
    sc.slo.latency = {"tpot_p95_ms": 1e4}  # every step passes: both loads are measured
    doc = Run(sc, tmp_path / "c.json", modes=[mode], fast=True).run()
    steps = doc["modes"][0]["steps"]
    assert [s["load"] for s in steps] == [load * 0.9, load] and "continued_from" in steps[1]
    got = steps[1]["tpot_ms"]["p95"]
    assert abs(got / truth - 1) <= 0.02, (got, truth)
    from kvtui.core.evaluate import StepContext, evaluate_step
    from kvtui.simulator.engine.fastrun import OfflineServer

    res = OfflineServer(sc, sc.mode(mode), 2).step(mode, 0, load, True, 0, 1)
    ctx = StepContext(load=load, t_window_start=res.window_start, t_window_end=res.window_end)
    old = evaluate_step(list(res.records), ctx, sc.slo)["tpot_ms"]["p95"]
    assert abs(old / truth - 1) > abs(got / truth - 1), (old, got, truth)


@pytest.mark.parametrize("bad", ["contiuous", "fast"])
def test_a_wrong_protocol_is_a_one_line_error(tmp_path: Path, bad: str) -> None:
    from kvtui.errors import UsageError
    from kvtui.io.scenario.loader import scenario_from_dict

    with pytest.raises(Exception) as e:
        scenario_from_dict({"ramp": {"protocol": bad}}, source="s.toml")
    assert "ramp.protocol" in str(e.value) and "\n" not in str(e.value).strip()
    assert isinstance(e.value, (UsageError, ValueError)) or "protocol" in str(e.value)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tpot=st.sampled_from([35.0, 45.0, 60.0]), mode=st.sampled_from(["bf16", "fp8-w"]),
       search=st.sampled_from(["fast", "seeded"]))
def test_on_a_monotone_curve_the_continuous_protocol_finds_the_linear_ramps_knee(tmp_path: Path, tpot: float,
                                                                                 mode: str, search: str) -> None:
    """The simulator's latency rises with the load (a monotone curve): measured the continuous way, the
    search (galloping and bisecting, or seeded by the prediction) finds the knee a linear ramp finds,
    to the resolution both use (32): every load either one passed is below every load either one
    failed (one threshold, bracketed by both), and the two knees are within the resolution.

    One exception, noise at the threshold: the same load can be measured on both sides of the target
    by two runs (their requests differ, since the searches reach the load by different paths). That is
    allowed only where both readings lie within 5 % of the target, about the sampling error of a p95
    over the ~80 requests a step counts (found: fp8-w at load 160 read 34.42 ms after 128 and 35.14 ms
    after a step down from 320, against 35)."""
    import secrets

    def near(step: dict) -> bool:
        return abs(step["tpot_ms"]["p95"] / tpot - 1) <= 0.05

    knees, passed, failed = [], [], []
    for how in ("linear", search):
        sc = _scenario(tmp_path)
        sc.slo.latency = {"ttft_p95_ms": 2000.0, "tpot_p95_ms": tpot}
        sc.ramp.search, sc.ramp.start, sc.ramp.max = how, 64, 320
        sc.ramp.step = "+32" if how == "linear" else sc.ramp.step
        sc.ramp.resolution = 32
        sc.ramp.confirm = False
        sc.ramp.window_s = 10.0
        doc = _run(sc, tmp_path, f"{how}-{mode}-{tpot:g}-{secrets.token_hex(4)}", [mode])
        m = doc["modes"][0]
        knees.append(m["best_concurrency"])
        passed += [(s["load"], near(s)) for s in m["steps"] if s["passed"]]
        failed += [(s["load"], near(s)) for s in m["steps"] if s["passed"] is False]
    assert None not in knees and passed and failed, knees
    crossed = [(p, f) for p in passed for f in failed if p[0] >= f[0]]
    assert all(p[1] and f[1] for p, f in crossed), (knees, sorted(passed), sorted(failed))
    assert abs(knees[0] - knees[1]) < 32, knees


def test_a_step_down_retires_the_requests_nearest_their_end(tmp_path: Path) -> None:
    """A continued step down from 40 to 30 slots: the 10 slots that send no more are those whose
    requests had the fewest tokens left at the change, so the load is down to 30 soonest."""
    from kvtui.simulator.engine.continuous import ContinuousClient, StepPlan
    from kvtui.simulator.engine.fastrun import OfflineServer

    sc = _scenario(tmp_path)
    mode = next(m for m in sc.modes if m.name == "bf16")
    srv = OfflineServer(sc, mode, 1)
    client = ContinuousClient(srv.sched, srv._sample, 0)
    plan = StepPlan(load=40, warmup_s=2.0, window_s=5.0, need=1, drain_before=True, stagger_s=10.0, settle="time")
    client.step(plan, 0, 0)
    left = {rid: (ent[0].expected_output_tokens or 0) - (len(ent[0].itl) + 1 if ent[0].t_first is not None else 0)
            for rid, ent in client.live.items()}
    left.update({rec.id: rec.expected_output_tokens or 0 for _t, _req, rec, _slot in client.ingest})
    assert len(left) == 40
    res, info, _ = client.step(StepPlan(load=30, warmup_s=2.0, window_s=5.0, need=1, settle="time"), 1, 10_000)
    by_id = {r.id: r for r in res.records}
    # A carried request whose slot went on sent another at its end; the retired ones did not: the
    # requests sent in this step number (carried requests that ended) − 10 before the window opens.
    nearest = sorted(left, key=lambda rid: left[rid])[:10]
    assert all(by_id[rid].t_last is not None for rid in nearest)
    last_retired_end = max(by_id[rid].t_last for rid in nearest)
    others_end = sorted(by_id[rid].t_last for rid in left if rid not in nearest and by_id[rid].t_last is not None)
    # the load is at 30 once the 10 nearest their end have ended: before any other carried one ended
    assert others_end and last_retired_end <= others_end[0] + 1e-9
    assert res.window_start is not None and res.window_start >= last_retired_end


def test_a_tpot_slo_counts_the_requests_sent_by_the_cutoff_and_holds_for_no_other(tmp_path: Path) -> None:
    # The default scenario's SLO judges TPOT: the "births" tail rule (kvtui.core.births). A step's
    # TPOT and E2E are over the window requests sent by one request's duration before its end, each
    # whole; the step ends once they have finished, while the later ones still stream (carried on).
    from kvtui.core.evaluate import reevaluate
    from kvtui.io.records import read_records

    sc = _scenario(tmp_path)
    assert {m for m, _, _ in sc.slo.targets()} >= {"tpot"}
    doc = _run(sc, tmp_path, "births", ["bf16"])
    steps = doc["modes"][0]["steps"]
    recs = list(read_records(tmp_path / "births.records.jsonl"))
    held_out = 0
    for s in steps:
        cut = s["births"]["cutoff"]
        assert cut is not None and s["t_window_start"] < cut < s["t_window_end"]
        mine = [r for r in recs if r.step == s["index"] and r.phase == "window"]
        born = [r for r in mine if r.t_intended <= cut]
        assert s["births"]["requests"] == len(born) == s["samples"]["tpot"] == s["samples"]["e2e"]
        assert len(born) >= 2 * s["sequential"]["min_samples"]  # twice the classic rule's samples (births.py)
        assert all(r.ok and r.t_last is not None and r.t_last <= s["t_end"] + 1e-5 for r in born)  # records: µs
        assert s["samples"]["ttft"] == len(mine)  # TTFT is over every window request
        held_out += sum(1 for r in mine if r.t_last is None or r.t_last > s["t_end"])
        again = reevaluate(s, [r for r in recs if r.step == s["index"]], sc.slo)
        assert again["tpot_ms"] == s["tpot_ms"] and again["passed"] == s["passed"]
    assert held_out, "every step waited for all its window requests (the whole tail)"
