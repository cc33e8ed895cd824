"""ramp.confirm_when = "doubt": a knee step's verdict is repeated only where neither the sequential
test nor the KV cache's arithmetic settled it (kvtui/core/settled.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtui.core.search import FastSearch
from kvtui.core.settled import settled_reason
from kvtui.io.scenario.loader import scenario_from_dict
from kvtui.io.scenario.schema import Ramp

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
    from kvtui.core.record import Record
    from kvtui.core.samples import slo_samples

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
    """kvtui.core.protocol.watch_window: where N requests at full length do not fit the cache
    and the SLO allows no preemption, the window lasts max(2 × window_s, one request); else as the
    scenario says."""
    from kvtui.core.protocol import ramp_for, watch_window

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
    from kvtui.cli.headless_print import step_line

    assert f"[watched {ramp['watched_s']:.1f} s of {ramp['window_s']:.1f} s]" in step_line("fp8-w+kv", at_knee[0], [])


RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def test_every_published_h200_step_run_under_doubt_re_settles_as_it_recorded() -> None:
    """The settle rule, re-run on real H200 steps: each archived step of a run made with
    confirm_when = "doubt" gets the reason (or None) it recorded live. A change to the rule that would
    have settled (or repeated) a different H200 step fails here. The runs made without "doubt" are
    out: h200-2k256-doubt.json was published as "doubt" and ran "always" (docs/RESULTS.md)."""
    from kvtui.io.scenario.loader import scenario_from_snapshot
    from kvtui.io.snapshot.file import load_snapshot

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


# --- a pass whose own samples are too few, pooled with the loads above it (settled.pooled_pass) ----------

ALPHA = 0.75 * 0.05 / 2  # the end look's α′: ¾ of 1 − confidence over two targets (one look)


def _pooled_step(load: float, passed: bool, ttft: tuple[int, int, float], itl: tuple[int, int, bool | None] = (16_000, 600, True),
                 early: bool | None = None) -> dict:
    """A judged step as the continuous protocol records it at 8k / 512: TTFT over its 41–65 window
    requests, ITL over their ~16,000 token gaps (docs/results/h200-8k512-itl100.json.xz)."""
    (n, above, value), (gn, gabove, gdecided) = ttft, itl
    return {"load": load, "passed": passed, "why": "search", "preemptions": 0, "errors": 0,
            "checks": [{"target": "ttft_p95_ms", "ok": True, "value": value, "n": n},
                       {"target": "itl_p95_ms", "ok": passed, "value": 30.0 if passed else 180.0, "n": gn},
                       {"target": "preemptions_per_request", "ok": True, "value": 0}],
            "sequential": {"stopped_early": early is not None, "verdict": early, "alpha_per_look": ALPHA,
                           "min_samples": 40, "margin": 0.1,
                           "targets": [{"target": "ttft", "n": n, "above": above, "decided": None},
                                       {"target": "itl", "n": gn, "above": gabove, "decided": gdecided}]}}


def _itl100():
    return _sc(itl_p95_ms=100)


def test_a_pass_too_small_to_decide_is_settled_by_the_loads_measured_above_it() -> None:
    """The H200's bf16 at 8k / 512, ITL p95 ≤ 100 ms: 20 passed (TTFT p95 454 ms of 3 s over 41
    requests, none above: no count that small decides a p95), 28 failed on ITL (TTFT 490 ms over 49)."""
    from kvtui.core.settled import pooled_pass, resettled

    sc, server = _itl100(), {"kv_cache_tokens": KV}
    knee = _pooled_step(20, True, (41, 0, 454.4))
    above = _pooled_step(28, False, (49, 0, 490.5), (16_400, 935, False))
    assert settled_reason(knee, server, sc) is None  # alone: in doubt, as recorded on the H200
    why = settled_reason(knee, server, sc, [above])
    assert why and "decided PASS" in why and "ttft on 90 samples pooled with 28's" in why
    assert pooled_pass(knee, [above], sc) == "ttft on 90 samples pooled with 28's: a higher load is no faster"
    # measured in order: the pass is settled once the load above it has been measured
    assert resettled([knee], server, sc) == []
    assert resettled([knee, above], server, sc) == [(knee, why)]
    # a later verdict at the same load is the one the search keeps: only that one may be settled
    again = _pooled_step(20, True, (42, 0, 402.2))
    assert [s for s, _ in resettled([knee, above, again], server, sc)] == [again]


@pytest.mark.parametrize("case, knee, above", [
    # the pooled samples have too many above the limit: 3 of 90 does not decide a p95 at α′
    ("too many above", (41, 0, 454.4), (49, 3, 2600.0)),
    # a higher load near its limit (within the 10 % margin) vouches for nothing
    ("not clear of the limit", (41, 0, 454.4), (49, 0, 2800.0)),
    # its own test had the samples to decide (n ≥ 78): its doubt stands, nothing is pooled
    ("own test had power", (80, 2, 2500.0), (90, 0, 500.0)),
    # fewer than the step's minimum samples: not a window the rule reads at all
    ("under the minimum", (30, 0, 454.4), (90, 0, 500.0)),
])
def test_pooling_settles_nothing_where_the_evidence_is_not_there(case: str, knee: tuple, above: tuple) -> None:
    sc, server = _itl100(), {"kv_cache_tokens": KV}
    assert settled_reason(_pooled_step(20, True, knee), server, sc,
                          [_pooled_step(28, False, above, (16_400, 935, False))]) is None, case


def test_pooling_reads_only_what_the_sampling_did_not_choose() -> None:
    """An early stop is chosen by its outcome: a FAIL's by slow samples (it can only add to the
    count above), a PASS's by quick ones (not pooled). A target the step's own samples left open
    for another reason than their count (ITL near its limit) is not pooled either."""
    sc, server = _itl100(), {"kv_cache_tokens": KV}
    knee = _pooled_step(20, True, (41, 0, 454.4))
    assert settled_reason(knee, server, sc, [_pooled_step(28, False, (49, 0, 490.5), (13_000, 822, False), early=False)])
    assert settled_reason(knee, server, sc, [_pooled_step(28, True, (49, 0, 490.5), (13_000, 500, True), early=True)]) is None
    near = _pooled_step(26, True, (50, 0, 442.3), (18_979, 918, None))  # fp8-kv's 26: 4.84 % of gaps above
    assert settled_reason(near, server, sc, [_pooled_step(34, False, (49, 0, 468.3), (17_245, 1051, False))]) is None
    # a FAIL is never settled by pooling (a higher load's samples say nothing for it)
    fail = _pooled_step(28, False, (49, 0, 490.5), (16_400, 935, None))
    assert settled_reason(fail, server, sc, [_pooled_step(36, False, (65, 0, 500.0), (22_700, 1544, False))]) is None


def test_the_pooled_test_keeps_its_error_rate_where_the_lower_load_sits_on_the_limit() -> None:
    """By simulation: the lower load's TTFT is above its limit exactly 5 % of the time (its p95 on the
    limit: a PASS would be wrong), the higher load's at least as often. The pooled rule decides PASS
    at most α′ of the time; were the higher load faster (the monotone premise broken), it could."""
    import random

    from kvtui.core.settled import pooled_pass

    sc = _itl100()
    rng = random.Random(7)

    def rate(theta_above: float, trials: int = 4000) -> float:
        wrong = 0
        for _ in range(trials):
            x1 = sum(rng.random() < 0.05 for _ in range(41))
            x2 = sum(rng.random() < theta_above for _ in range(49))
            knee = _pooled_step(20, True, (41, x1, 454.4))
            if pooled_pass(knee, [_pooled_step(28, False, (49, x2, 490.5), (16_400, 935, False))], sc):
                wrong += 1
        return wrong / trials

    assert rate(0.05) <= ALPHA and rate(0.08) <= ALPHA
    assert rate(0.0) > 5 * ALPHA  # not vacuous: a higher load that were faster would mislead it


def test_an_offline_run_pools_the_knee_pass_and_finds_the_same_knee(tmp_path: Path) -> None:
    """The simulator at 8k / 512 under ITL p95 ≤ 100 ms (scripts/h200_answer.sh ITL_P95_MS=100):
    under "doubt" the knee's pass is settled by the fail above it and not repeated; "always" finds
    the same knee in more steps. A --resume from a journal written before the fail settled the
    pass settles it again, and measures nothing more."""
    from kvtui.explore.run import Run
    from kvtui.io.snapshot.file import load_snapshot

    knees, steps, docs = {}, {}, {}
    for how in ("always", "doubt"):
        sc = scenario_from_dict({
            "server": {"engine": "sim", "model": "llama-3.1-8b", "gpu": "H200", "max_model_len": 9216},
            "modes": [{"name": "bf16", "dtype": "bfloat16"}],
            "workload": {"prompt_tokens": 8192, "output_tokens": 512, "jitter": 0.1, "ignore_eos": True},
            "slo": {"ttft_p95_ms": 3000, "itl_p95_ms": 100, "max_error_rate": 0.01, "max_preemptions_per_request": 0},
            "ramp": {"start": 8, "max": 256, "resolution": 8, "warmup_s": 5, "window_s": 20,
                     "protocol": "continuous", "confirm_when": how},
        }, source="s.toml")
        docs[how] = Run(sc, tmp_path / f"{how}.json", fast=True).run()
        m = docs[how]["modes"][0]
        knees[how], steps[how] = m["best_concurrency"], m["steps"]
    assert knees["doubt"] == knees["always"] is not None
    knee_steps = [s for s in steps["doubt"] if s["load"] == knees["doubt"]]
    assert len(knee_steps) == 1 and "pooled with" in (knee_steps[0].get("settled") or "")
    assert len(steps["doubt"]) < len(steps["always"])
    # --resume from a journal written before the fail settled the pass (a live run's replay; an
    # offline one measures a cut mode again): the replayed search settles it as the run did
    from kvtui.core.search_seeded import SeededSearch
    from kvtui.explore.resume import Resume
    from kvtui.io.scenario.loader import scenario_from_snapshot
    from kvtui.io.snapshot.file import SnapshotWriter

    cut = load_snapshot(tmp_path / "doubt.json")
    old = cut["modes"][0]
    for i, s in enumerate(old["steps"]):
        if s["load"] == knees["doubt"]:
            s.pop("settled", None)
        s.setdefault("t_rel_start", 30.0 * i)  # a live run's time line (offline steps have none)
        s.setdefault("t_rel_end", 30.0 * i + 28.0)
    sc = scenario_from_snapshot(cut["scenario"])
    for with_sc in (None, sc):  # without the scenario the replay cannot settle it: the repeat is asked for
        search = SeededSearch(sc.ramp, True, knee=old["steps"][0]["load"])
        md: dict = {"name": "bf16", "steps": []}
        writer = SnapshotWriter(tmp_path / f"replay-{with_sc is not None}.json", {"modes": [md]})
        kept, _ = Resume([], lambda e: None).replay_finished_steps(search, md, old, 0.0, writer, with_sc)
        assert kept == len(old["steps"])
        if with_sc is None:
            assert search.next() == knees["doubt"]  # in doubt: the confirmation repeats it
        else:
            assert search.next() is None and search.result().best == knees["doubt"]
            assert "pooled with" in (next(s for s in md["steps"] if s["load"] == knees["doubt"]).get("settled") or "")


def test_replayed_on_the_published_h200_verdicts_the_search_is_the_runs_own_and_pooling_keeps_every_knee() -> None:
    """scripts/replay_search_rules.py feeds a published run's measured verdicts to this kvtui's
    search. With the settles the run recorded, it asks for the very steps the run measured (the
    replay is the run's search). With this kvtui's rules on h200-8k512-itl100 (ITL p95 ≤ 100 ms),
    every knee is the same, and the knee passes that pooling settles are not repeated."""
    import importlib.util

    from kvtui.io.scenario.loader import scenario_from_snapshot
    from kvtui.io.snapshot.file import load_snapshot

    spec = importlib.util.spec_from_file_location("replay", Path(__file__).resolve().parents[2] / "scripts"
                                                  / "replay_search_rules.py")
    assert spec and spec.loader
    replay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay)
    for name in ("h200-8k512-doubt", "h200-8k512-early", "h200-8k512-watch", "h200-2k256-four"):
        doc = load_snapshot(RESULTS / f"{name}.json.xz")
        sc = scenario_from_snapshot(doc["scenario"])
        for m in doc["modes"]:
            r = replay.replay_mode(m, sc, as_recorded=True)
            assert r["loads"] == [s["load"] for s in m["steps"]] and r["cut"] is None, (name, m["name"])
    doc = load_snapshot(RESULTS / "h200-8k512-itl100.json.xz")
    sc = scenario_from_snapshot(doc["scenario"])
    steps = {}
    for m in doc["modes"]:
        r = replay.replay_mode(m, sc, as_recorded=False)
        assert r["best"] == m["best_concurrency"] and r["cut"] is None, m["name"]
        steps[m["name"]] = r["loads"]
        if m["name"] != "fp8-kv":  # its 26 sat on the ITL limit (4.84 % of gaps stalled): in doubt, repeated
            knee = m["best_concurrency"]
            assert "pooled with" in r["settled"].get(f"{knee:g}", "") or r["loads"].count(knee) > 1, m["name"]
    assert steps["bf16"] == [20, 28] and steps["fp8-kv"] == [26, 34, 26]


def test_a_pass_queued_for_its_repeat_is_dropped_once_the_repeat_above_it_settles_it() -> None:
    """The confirmation repeats the first fail first where the pass was the last step measured; if
    that repeat's samples make up the pooled count, the pass is not repeated after it."""
    def search(ramp: Ramp) -> FastSearch:
        s = FastSearch(ramp, guess=28)
        nxt = s.next()
        while nxt is not None and not s.s.confirming:  # 28 fails, 14 and 21 pass: 21 was the last step
            s.record(nxt, nxt <= 21)
            nxt = s.next()
        assert s.s.confirming and nxt == 28 and s.s.confirm_queue == [21]
        s.record(28, False)
        s.settle(21, "ttft on 98 samples pooled with 28's: a higher load is no faster")
        return s

    s = search(Ramp(start=8, max=256, resolution=8, confirm_when="doubt"))
    assert s.next() is None
    r = s.result()
    assert r.best == 21 and r.first_fail == 28 and r.confirmed and set(r.settled) == {21}
    assert "21 settled without a repeat" in r.describe()
    a = search(Ramp(start=8, max=256, resolution=8))  # "always": repeated whatever settled it
    assert a.next() == 21
