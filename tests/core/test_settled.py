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


KV_WK = 1_906_256  # the fp8-w+kv server's KV tokens on the H200 (docs/results/h200-8k512-early.md)


def test_a_load_on_the_walls_noisy_side_watches_longer() -> None:
    """kvtui.explore.protocol.watch_window: where N requests at full length do not fit the cache
    and the SLO allows no preemption, the window lasts max(2 × window_s, one request); else as the
    scenario says."""
    from kvtui.explore.protocol import ramp_for, watch_window

    sc = _sc()  # window_s 15 (the default)
    w = sc.ramp.window_s
    ramp = ramp_for(223, 215, False, 46.0, 5)
    watched = watch_window(sc, {"kv_cache_tokens": KV_WK}, 223, ramp)  # 223 × 8,704 > the cache
    assert watched.window_s == max(2 * w, 46.0) and "1,940,992 > 1,906,256" in (watched.window_why or "")
    assert watched.to_dict()["window_s"] == watched.window_s and watched.stagger_s == ramp.stagger_s
    short = watch_window(sc, {"kv_cache_tokens": KV_WK}, 223, ramp_for(223, 215, False, 10.0, 5))
    assert short.window_s == 2 * w  # a short request: twice the window still
    # whole requests fit: the scenario's window
    assert watch_window(sc, {"kv_cache_tokens": KV_WK}, 219, ramp).window_s is None
    assert "window_s" not in watch_window(sc, {"kv_cache_tokens": KV_WK}, 219, ramp).to_dict()
    # no KV figure, preemptions allowed, or lengths that vary: nothing to reckon with
    assert watch_window(sc, {}, 223, ramp).window_s is None
    assert watch_window(_sc(max_preemptions_per_request=0.5), {"kv_cache_tokens": KV_WK}, 223, ramp).window_s is None
    varied = scenario_from_dict({
        "server": {"max_model_len": 16384},
        "workload": {"prompt_tokens": {"dist": "uniform", "min": 4096, "max": 12288}, "output_tokens": 512},
        "slo": {"ttft_p95_ms": 3000, "max_preemptions_per_request": 0}}, source="s.toml")
    assert watch_window(varied, {"kv_cache_tokens": KV_WK}, 223, ramp).window_s is None


def test_a_pass_on_the_walls_noisy_side_is_settled_by_a_whole_watch_only() -> None:
    sc = _sc()
    srv = {"kv_cache_tokens": KV_WK}
    watch = {"window_s": 46.0, "watched_s": 46.1}
    why = settled_reason(_step(223, True, (True, True), ramp=watch), srv, sc)
    assert why and "no preemption in 46.1 s watched" in why and "1,940,992 > 1,906,256" in why
    # cut short (by the call's end, or a window closed by count) or no watch planned: in doubt
    assert settled_reason(_step(223, True, (True, True), ramp={"window_s": 46.0, "watched_s": 30.0}), srv, sc) is None
    assert settled_reason(_step(223, True, (True, True), ramp=watch, stopped_early=True), srv, sc) is None
    assert settled_reason(_step(223, True, (True, True)), srv, sc) is None
    # the latencies left open: in doubt, however long it watched
    assert settled_reason(_step(223, True, (True, None), ramp=watch), srv, sc) is None
    # above the steady state's bound (231 × 8,448 > the cache) a PASS contradicts the arithmetic: repeated
    assert settled_reason(_step(231, True, (True, True), ramp={"window_s": 52.4, "watched_s": 60.0}), srv, sc) is None


def test_an_offline_run_settles_the_noisy_pass_by_its_watch_with_the_knee_always_finds(tmp_path: Path) -> None:
    """fp8-w+kv at 8k / 512 in the simulator: the knee 223 sits on the wall's noisy side (223 × 8,704
    full-length tokens exceed the cache, 223 × 8,448 on average do not). Its step watches one request
    (46 s) and is settled by it; "always" repeats it, and finds the same knee."""
    from kvtui.explore.run import Run

    out = {}
    for how in ("always", "doubt"):
        sc = scenario_from_dict({
            "server": {"engine": "sim", "model": "llama-3.1-8b", "gpu": "H200", "max_model_len": 9216},
            "modes": [{"name": "fp8-w+kv", "dtype": "bfloat16", "quantization": "fp8", "kv_cache_dtype": "fp8"}],
            "workload": {"prompt_tokens": 8192, "output_tokens": 512},
            "slo": {"ttft_p95_ms": 3000, "itl_p95_ms": 300, "max_preemptions_per_request": 0},
            "ramp": {"start": 8, "max": 256, "resolution": 8, "warmup_s": 5, "window_s": 20, "min_samples": 80,
                     "confirm_when": how},
        }, source="s.toml")
        out[how] = Run(sc, tmp_path / f"{how}.json", fast=True).run()["modes"][0]
    knee = out["doubt"]["best_concurrency"]
    assert knee == out["always"]["best_concurrency"]
    kv = out["doubt"]["server"]["kv_cache_tokens"]
    assert knee * 8704 > kv >= knee * 8448  # the noisy side, where a repeat used to be due
    at_knee = [s for s in out["doubt"]["steps"] if s["load"] == knee]
    assert len(at_knee) == 1 and "watched" in (at_knee[0].get("settled") or "")
    ramp = at_knee[0]["ramp"]
    assert ramp["watched_s"] >= ramp["window_s"] >= 40 and at_knee[0]["sequential"]["max_looks"] == 1
    assert len(out["doubt"]["steps"]) < len(out["always"]["steps"])
    from kvtui.commands.headless_print import step_line

    assert f"[watched {ramp['watched_s']:.1f} s of {ramp['window_s']:.1f} s]" in step_line("fp8-w+kv", at_knee[0], [])


RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def test_every_published_h200_step_run_under_doubt_re_settles_as_it_recorded() -> None:
    """The settle rule, re-run on real H200 steps: each archived step of a run made with
    confirm_when = "doubt" gets the reason (or None) it recorded live. A change to the rule that would
    have settled (or repeated) a different H200 step fails here. The runs made without "doubt" are
    out: h200-2k256-doubt.json was published as "doubt" and ran "always" (docs/results/README.md)."""
    from kvtui.scenario.loader import scenario_from_snapshot
    from kvtui.snapshot.file import load_snapshot

    runs = 0
    reasons: list[str] = []
    for path in sorted(RESULTS.glob("*.json.xz")):
        doc = load_snapshot(path)
        if doc["scenario"].get("ramp", {}).get("confirm_when") != "doubt":
            continue
        runs += 1
        sc = scenario_from_snapshot(doc["scenario"], source=f"{path.name}: scenario")
        for m in doc["modes"]:
            for step in m.get("steps") or []:
                got = settled_reason(step, m.get("server") or {}, sc)
                assert got == step.get("settled"), (path.name, m["name"], step["concurrency"])
                reasons += [got] if got else []
    assert runs >= 4  # h200-8k512-doubt, -early, -watch, h200-2k256-four
    # not vacuous: the published steps hold settles of each kind (the test, the arithmetic, the watch)
    assert any("decided" in r for r in reasons) and any("KV" in r or "cache" in r for r in reasons), reasons
