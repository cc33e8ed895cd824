"""ramp.confirm_when = "doubt": a knee step's verdict is repeated only where neither the sequential
test nor the KV cache's arithmetic settled it (kvtui/explore/settled.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtui.explore.search import FastSearch
from kvtui.explore.settled import settled_reason
from kvtui.scenario.loader import scenario_from_dict
from kvtui.scenario.schema import Ramp

KV = 949_840  # the fp8-w server's KV tokens on the H200 (docs/results/h200-8k512-w.md)


def _sc(**slo: object):
    return scenario_from_dict({
        "server": {"max_model_len": 9216},
        "workload": {"prompt_tokens": 8192, "output_tokens": 512},
        "slo": {"ttft_p95_ms": 3000, "itl_p95_ms": 300, "max_preemptions_per_request": 0, **slo},
        "ramp": {"confirm_when": "doubt"},
    }, source="s.toml")


def _step(load: float, passed: bool, decided: tuple[bool | None, bool | None], pre: float = 0, **kw: object) -> dict:
    checks = [{"target": "ttft_p95_ms", "ok": True}, {"target": "itl_p95_ms", "ok": True},
              {"target": "preemptions_per_request", "ok": not pre, "value": pre}]
    return {"load": load, "passed": passed, "preemptions": pre, "errors": 0, "checks": checks,
            "sequential": {"targets": [{"target": "ttft", "decided": decided[0]},
                                       {"target": "itl", "decided": decided[1]}]}, **kw}


def test_a_pass_is_settled_by_the_test_and_a_cache_that_holds_every_request_whole() -> None:
    sc = _sc()
    why = settled_reason(_step(109, True, (True, True)), {"kv_cache_tokens": KV}, sc)
    assert why and "decided PASS" in why and "949,840" in why  # 109 × 8,704 = 948,736 fit
    # one target left open by the test: in doubt
    assert settled_reason(_step(109, True, (None, True)), {"kv_cache_tokens": KV}, sc) is None
    # 110 × 8,704 > the cache: a steady state may or may not preempt in the next window
    assert settled_reason(_step(110, True, (True, True)), {"kv_cache_tokens": KV}, sc) is None
    # no KV figure from the server: nothing to reckon with
    assert settled_reason(_step(109, True, (True, True)), {}, sc) is None
    # an error, or a client flag: in doubt
    assert settled_reason(_step(109, True, (True, True), errors=1), {"kv_cache_tokens": KV}, sc) is None
    assert settled_reason(_step(109, True, (True, True), flags=["client_stalled"]), {"kv_cache_tokens": KV}, sc) is None


def test_a_fail_is_settled_by_the_test_or_a_steady_state_the_cache_cannot_hold() -> None:
    sc = _sc()
    assert "ttft decided FAIL" in (settled_reason(_step(300, False, (False, None)), {"kv_cache_tokens": KV}, sc) or "")
    # 117 × (8,192 + 256) = 988,416 > 949,840: every repeat would preempt
    why = settled_reason(_step(117, False, (None, True), pre=5), {"kv_cache_tokens": KV}, sc)
    assert why and "KV wall" in why and "988,416" in why
    # 112 × 8,448 = 946,176 fits on average: the preemptions might not come back
    assert settled_reason(_step(112, False, (None, True), pre=2), {"kv_cache_tokens": KV}, sc) is None
    # an SLO that allows preemptions: the arithmetic settles nothing
    loose = _sc(max_preemptions_per_request=0.5)
    assert settled_reason(_step(117, False, (None, True), pre=5), {"kv_cache_tokens": KV}, loose) is None


def test_the_confirmation_repeats_only_the_verdicts_in_doubt() -> None:
    ramp = Ramp(start=8, max=256, resolution=8, confirm_when="doubt")
    s = FastSearch(ramp, guess=109)
    nxt = s.next()
    while nxt is not None and not s.s.confirming:  # to the bracket at the resolution; every fail settled
        s.record(nxt, nxt <= 109, "the KV wall" if nxt > 109 else None)
        nxt = s.next()
    fail = s.s.fail
    assert s.s.confirming and nxt == 109 and fail is not None and fail - 109 <= 8  # only the pass is repeated
    s.record(109, True)
    assert s.next() is None
    r = s.result()
    assert r.best == 109 and r.first_fail == fail and r.confirmed and set(r.settled) == {fail}
    assert f"{fail:g} settled without a repeat" in r.describe()
    # "always": both repeated, whatever settled them
    s2 = FastSearch(Ramp(start=8, max=256, resolution=8), guess=109)
    while (nxt := s2.next()) is not None:
        s2.record(nxt, nxt <= 109, "the KV wall" if nxt > 109 else "decided PASS")
    assert [x for x, _ in s2.s.history][-2:] == [109, s2.s.fail] and s2.result().settled == {}


@pytest.mark.parametrize("bad", ["sometimes", "Doubt"])
def test_a_wrong_confirm_when_is_a_one_line_error(bad: str) -> None:
    with pytest.raises(Exception) as e:
        scenario_from_dict({"ramp": {"confirm_when": bad}}, source="s.toml")
    assert "ramp.confirm_when" in str(e.value) and "\n" not in str(e.value).strip()


def test_an_offline_run_skips_the_settled_repeat_and_finds_the_same_knee(tmp_path: Path) -> None:
    """The simulator at 8k / 512 with a TTFT/ITL SLO and no preemption allowed (the H200 workload of
    scripts/h200_answer.sh): the KV-wall failure above the knee is settled by the cache's
    arithmetic and not repeated; the knee is the one "always" finds."""
    from kvtui.explore.run import Run

    knees, steps = {}, {}
    for how in ("always", "doubt"):
        sc = scenario_from_dict({
            "server": {"engine": "sim", "model": "llama-3.1-8b", "gpu": "H200", "max_model_len": 9216},
            "modes": [{"name": "fp8-w", "dtype": "bfloat16", "quantization": "fp8"}],
            "workload": {"prompt_tokens": 8192, "output_tokens": 512},
            "slo": {"ttft_p95_ms": 3000, "itl_p95_ms": 300, "max_preemptions_per_request": 0},
            "ramp": {"start": 8, "max": 256, "resolution": 8, "warmup_s": 5, "window_s": 20,
                     "confirm_when": how},
        }, source="s.toml")
        doc = Run(sc, tmp_path / f"{how}.json", fast=True).run()
        m = doc["modes"][0]
        knees[how], steps[how] = m["best_concurrency"], m["steps"]
    assert knees["doubt"] == knees["always"]
    fail_load = min(s["load"] for s in steps["doubt"] if s["passed"] is False and s["load"] > knees["doubt"])
    settled = [s for s in steps["doubt"] if s["load"] == fail_load and s.get("settled")]
    assert settled and "KV wall" in settled[0]["settled"]
    assert [s for s in steps["doubt"] if s["load"] == fail_load and s["why"] == "confirm"] == []
    assert len(steps["doubt"]) < len(steps["always"])


def test_a_live_steps_end_look_counts_the_requests_its_end_cut() -> None:
    """At 8k / 512 a request outlives the window: when a held step ends, its window requests are
    cut copies (error "cancelled", tokens so far). The end look counts their TTFT and gaps (the H200
    run of 2026-12-04 saw n = 0 on every step before this: no verdict could be settled)."""
    from kvtui.load.records import Record
    from kvtui.load.samples import slo_samples

    done = Record(id="a", mode="m", step=0, load=8, phase="window", t_intended=0.0, t_sent=0.0, t_first=0.5,
                  t_last=2.0, itl=[0.1] * 4, output_tokens=5)
    cut = Record(id="b", mode="m", step=0, load=8, phase="window", t_intended=1.0, t_sent=1.0, t_first=1.25,
                 itl=[0.2, 0.3], status="error", error="cancelled")
    waiting = Record(id="c", mode="m", step=0, load=8, phase="window", t_intended=1.5, t_sent=1.5,
                     status="error", error="cancelled")
    plain = slo_samples([done, cut, waiting])
    assert plain["ttft"] == [500.0] and len(plain["itl"]) == 4
    xs = slo_samples([done, cut, waiting], cut=True)
    assert xs["ttft"][:2] == [500.0, 250.0] and xs["ttft"][2] == float("inf")  # a PASS never rests on a wait
    assert sorted(xs["itl"])[-2:] == [200.0, 300.0] and len(xs["itl"]) == 6
    assert xs["tpot"] == plain["tpot"] and len(xs["tpot"]) == 1  # TPOT only over whole requests
