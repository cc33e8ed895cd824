"""The continuous protocol in the offline simulator (`kvtui run --fast`): modelled time, no wall clock."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtui.cli import main as kvtui_main
from kvtui.explore.run import Run
from kvtui.scenario.loader import load_scenario
from kvtui.scenario.schema import Scenario


def _scenario(tmp: Path) -> Scenario:
    path = tmp / "s.toml"
    if not path.exists():
        assert kvtui_main(["init", "llama-3.1-8b", "--engine", "sim", "--gpu", "H200", "--out", str(path)]) == 0
    return load_scenario(path)


def _run(sc: Scenario, tmp: Path, name: str, protocol: str, modes: list[str], search: str | None = None) -> dict:
    sc.ramp.protocol = protocol
    if search:
        sc.ramp.search = search  # a bisection steps down too (where a step continues)
    return Run(sc, tmp / f"{name}.json", modes=modes, fast=True).run()


def test_continuous_steps_are_shorter_in_modelled_time_and_say_how_they_ran(tmp_path: Path) -> None:
    sc = _scenario(tmp_path)
    classic = _run(sc, tmp_path, "classic", "classic", ["fp8-kv"], "fast")
    cont = _run(_scenario(tmp_path), tmp_path, "cont", "continuous", ["fp8-kv"], "fast")
    a, b = classic["modes"][0], cont["modes"][0]
    # the same knee, within the search's resolution (one step of ~6 % at the 50 ms TPOT edge)
    assert abs(a["best_concurrency"] - b["best_concurrency"]) <= 0.07 * a["best_concurrency"]
    steps = b["steps"]
    window = sc.ramp.warmup_s + sc.ramp.window_s
    med_a = statistics.median(s["duration_s"] for s in a["steps"]) / window
    cont = [s["duration_s"] / window for s in steps if not s["drain"]["before"]]
    assert cont and statistics.median(cont) < med_a  # a continued step is shorter (modelled seconds)
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
    for prev, s in zip(steps, steps[1:]):
        if s.get("why") == "confirm" and s["load"] == prev["load"]:
            assert s["drain"]["before"], "a repeat of the step just before starts from an idle server"
        if s.get("why") == "confirm" and not s["drain"]["before"]:
            # continued: only down from another load, never from the step it confirms
            assert s["load"] < prev["load"] and s["continued_from"]["load"] == prev["load"]
        if s["load"] > prev["load"]:
            assert s["drain"]["before"], "a step up starts from an idle server (a continued one reads fast)"
    assert all("drain" not in s and "stopped_early" not in s for s in a["steps"])  # classic: as before


@pytest.mark.parametrize("bad", ["contiuous", "fast"])
def test_a_wrong_protocol_is_a_one_line_error(tmp_path: Path, bad: str) -> None:
    from kvtui.errors import UsageError
    from kvtui.scenario.loader import scenario_from_dict

    with pytest.raises(Exception) as e:
        scenario_from_dict({"ramp": {"protocol": bad}}, source="s.toml")
    assert "ramp.protocol" in str(e.value) and "\n" not in str(e.value).strip()
    assert isinstance(e.value, (UsageError, ValueError)) or "protocol" in str(e.value)


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tpot=st.sampled_from([35.0, 45.0, 60.0]), mode=st.sampled_from(["bf16", "fp8-w"]))
def test_on_a_monotone_curve_the_continuous_protocol_finds_the_linear_ramps_knee(tmp_path: Path, tpot: float,
                                                                                 mode: str) -> None:
    """The simulator's latency rises with the load (a monotone curve): the linear ramp, measured
    the classic way, and the continuous protocol find the same knee."""
    knees = []
    for proto in ("classic", "continuous"):
        sc = _scenario(tmp_path)
        sc.slo.latency = {"ttft_p95_ms": 2000.0, "tpot_p95_ms": tpot}
        sc.ramp.search, sc.ramp.step, sc.ramp.start, sc.ramp.max = "linear", "+32", 64, 320
        sc.ramp.confirm = False
        sc.ramp.window_s = 10.0
        import secrets

        doc = _run(sc, tmp_path, f"{proto}-{mode}-{tpot:g}-{secrets.token_hex(4)}", proto, [mode])
        knees.append(doc["modes"][0]["best_concurrency"])
    assert knees[0] == knees[1]
