"""A preemption decides a step's FAIL where the SLO allows none (kvtui.core.protocol.preemption_decides):
the step ends there, live (the load generator's `decided`, from the telemetry's latest scrape) and in
the simulator (StepPlan.stop_on_preemption), with the verdict the whole window would have given."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kvtui.core.protocol import preemption_decides
from kvtui.io.scenario.loader import scenario_from_dict
from kvtui.runtime.telemetry.prom import parse_metrics
from kvtui.runtime.telemetry.replicas import light

DATA = Path(__file__).resolve().parents[1] / "telemetry" / "data" / "h200-vllm-0.26.0"


def _sc(how: str = "continuous", pre: float | None = 0, **ramp: object):
    slo: dict[str, object] = {"ttft_p95_ms": 3000, "itl_p95_ms": 300}
    if pre is not None:
        slo["max_preemptions_per_request"] = pre
    return scenario_from_dict({
        "server": {"engine": "sim", "model": "llama-3.1-8b", "gpu": "H200", "max_model_len": 9216},
        "modes": [{"name": "bf16", "dtype": "bfloat16"}],
        "workload": {"prompt_tokens": 8192, "output_tokens": 512},
        "slo": slo,
        "ramp": {"start": 8, "max": 256, "resolution": 8, "warmup_s": 5, "window_s": 20, "protocol": how,
                 "min_samples": 80, **ramp},
    }, source="s.toml")


def test_only_an_slo_that_allows_no_preemption_under_the_continuous_protocol_is_decided_by_one() -> None:
    assert preemption_decides(_sc())
    assert not preemption_decides(_sc(pre=0.5))
    assert not preemption_decides(_sc(pre=None))


def test_the_live_watch_reads_the_real_vllm_counter_since_the_step_began() -> None:
    """Real H200 vLLM 0.26 scrapes: 0 preemptions after c=128, 57 after c=256, 69 at c=512's KV wall."""
    from kvtui.explore.live_step import LiveStepExecutor

    def scrape(name: str, t: float):
        return parse_metrics((DATA / name).read_text(), t)

    def kept(name: str, t: float):  # what the telemetry thread keeps of a scrape (no histograms)
        return light(scrape(name, t))

    quiet, wall = scrape("a_after_c128.txt", 10.0), kept("a_after_c256.txt", 20.0)
    tel = SimpleNamespace(samples=[])
    ex = LiveStepExecutor.__new__(LiveStepExecutor)
    ex.run, ex.telemetry = SimpleNamespace(scenario=_sc()), tel
    watch = ex._preemption_watch(quiet)
    assert watch is not None
    assert watch() is None  # no scrape since the step began
    tel.samples.append(kept("a_after_c128.txt", 11.0))
    assert watch() is None  # the counter has not moved
    tel.samples.append(wall)
    why = watch()
    assert why and why.startswith("57 preemptions 10.0 s into the step") and "allows none" in why
    # The rule does not apply: no watch at all.
    ex.run = SimpleNamespace(scenario=_sc(pre=0.5))
    assert ex._preemption_watch(quiet) is None
    # A counter that went down (a restart) decides nothing.
    ex.run = SimpleNamespace(scenario=_sc())
    watch = ex._preemption_watch(wall)
    tel.samples.append(kept("a_after_c128.txt", 30.0))
    assert watch() is None


@pytest.mark.parametrize("mode", ["bf16", "fp8-w+kv"])
def test_a_step_past_the_kv_wall_ends_at_its_first_preemption_with_the_same_verdicts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """The simulator at 8k / 512 (the H200 workload of scripts/h200_answer.sh): the failing step
    above the knee ends at its first preemption, far short of its window; the search finds the same
    knee with the same verdict at every load as when each step runs its whole window."""
    import kvtui.core.protocol as protocol
    from kvtui.explore.run import Run
    from kvtui.io.scenario.schema import Mode

    def run(name: str) -> list[dict]:
        sc = _sc(confirm_when="doubt")
        if mode != "bf16":
            sc.modes = [Mode(name=mode, dtype="bfloat16", quantization="fp8", kv_cache_dtype="fp8")]
        doc = Run(sc, tmp_path / f"{name}.json", fast=True).run()
        return doc["modes"][0]["steps"]

    stopping = run("stop")
    monkeypatch.setattr(protocol, "preemption_decides", lambda sc: False)
    whole = run("whole")
    # The same verdict at every load. Without the rule there is no watch either (protocol.watch_window):
    # fp8-w+kv's 223, on the wall's noisy side, is then repeated rather than settled by its watch.
    assert {(s["load"], s["passed"]) for s in stopping} == {(s["load"], s["passed"]) for s in whole}
    fails = [(a, b) for a, b in zip(stopping, whole) if a["passed"] is False]
    assert fails
    for a, b in fails:
        assert a["early_stop"]["by"] == "preemption" and a["stopped_early"] and "allows none" in a["early_stop"]["why"]
        assert "early_stop" not in b and b["preemptions"] > 0
        assert a["duration_s"] < b["duration_s"] / 2
        assert "KV wall" in (a.get("settled") or "")  # and whether it needs a repeat is as before
    assert all("early_stop" not in s for s in stopping if s["passed"])
