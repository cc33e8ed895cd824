"""Properties of the memory model and the scheduler (hypothesis)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvtui.io.scenario.schema import Mode, Server
from kvtui.simulator.engine.fast import simulate_step
from kvtui.simulator.engine.scheduler import SchedulerSim, SimRequest
from kvtui.simulator.model.catalog import bundled_models, gpu_names, load_gpu, load_model
from kvtui.simulator.model.estimator import estimate_memory, resolve_settings
from kvtui.simulator.model.roofline import Calibration, load_calibration

TINY = load_model("tiny-llama")
H200 = load_gpu("H200")
TINY_BLOCK = 16 * TINY.kv_bytes_per_token(2)  # bytes of one bf16 KV block

models = st.sampled_from(bundled_models())
gpus = st.sampled_from(gpu_names())
formats = st.sampled_from(["bf16", "fp8", "int8", "int4"])
kv_dtypes = st.sampled_from(["auto", "fp8"])


def _est(model, gpu, weights, kv, **over):
    m, g = load_model(model), load_gpu(gpu)
    return estimate_memory(m, g, weights, kv, resolve_settings(m, g, max_model_len=over.pop("mml", 4096), **over),
                           prompt_tokens=1024, output_tokens=256)


@settings(max_examples=150, deadline=None)
@given(models, gpus, formats, kv_dtypes, st.floats(0.3, 0.98), st.floats(0.3, 0.98))
def test_more_memory_never_lowers_capacity(model, gpu, weights, kv, u1, u2):
    lo, hi = sorted((u1, u2))
    a = _est(model, gpu, weights, kv, gpu_memory_utilization=lo)
    b = _est(model, gpu, weights, kv, gpu_memory_utilization=hi)
    assert b.kv_tokens >= a.kv_tokens
    assert b.kv_bound_concurrency >= a.kv_bound_concurrency
    assert b.admitted_concurrency >= a.admitted_concurrency
    assert b.max_concurrency_reported >= a.max_concurrency_reported


@settings(max_examples=100, deadline=None)
@given(models, formats, kv_dtypes, st.integers(1 << 20, 1 << 38), st.integers(1 << 20, 1 << 38))
def test_more_explicit_kv_bytes_never_lower_capacity(model, weights, kv, b1, b2):
    lo, hi = sorted((b1, b2))
    a = _est(model, "H200", weights, kv, kv_cache_memory_bytes=lo)
    b = _est(model, "H200", weights, kv, kv_cache_memory_bytes=hi)
    assert b.kv_tokens >= a.kv_tokens and b.admitted_concurrency >= a.admitted_concurrency


@settings(max_examples=200, deadline=None)
@given(models, gpus, formats, st.floats(0.3, 0.98), st.integers(1, 8))
def test_fp8_kv_never_holds_fewer_tokens(model, gpu, weights, util, tp):
    auto = _est(model, gpu, weights, "auto", gpu_memory_utilization=util, tp=tp)
    fp8 = _est(model, gpu, weights, "fp8", gpu_memory_utilization=util, tp=tp)
    assert fp8.kv_tokens >= auto.kv_tokens
    assert fp8.kv_tokens >= 2 * auto.kv_tokens - 16  # exactly double, up to one block of rounding
    assert fp8.kv_bound_concurrency >= auto.kv_bound_concurrency


def _tiny(blocks: int, max_batched: int = 512, caching: bool = False, max_seqs: int = 256, kv: str = "auto", mml: int = 0):
    """The 4-layer model with a KV cache of `blocks` bf16 blocks (twice as many in fp8)."""
    srv = Server(max_model_len=mml or blocks * 16, kv_cache_memory_bytes=blocks * TINY_BLOCK,
                 max_num_batched_tokens=max_batched, max_num_seqs=max_seqs, enable_prefix_caching=caching)
    return SchedulerSim(TINY, H200, Mode("m", kv_cache_dtype=kv), srv, seed=0)


def _demand(s: SchedulerSim) -> int:
    """Blocks the running sequences need for the tokens the scheduler will give them this step."""
    budget, need, bs = s.max_batched, 0, s.block_size
    for r in s.running:
        if budget <= 0:
            break
        n = min(r.num_tokens - r.computed, budget)
        need += max(0, math.ceil((r.computed + n) / bs) - r.nblocks)
        budget -= n
    return need


requests = st.lists(st.tuples(st.integers(1, 400), st.integers(1, 120)), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests, st.integers(30, 160), st.integers(32, 1024), st.booleans(), st.integers(0, 3))
def test_preemption_exactly_when_demand_exceeds_free_blocks(reqs, blocks, max_batched, caching, shared):
    s = _tiny(blocks, max_batched, caching, mml=blocks * 16)
    for i, (p, o) in enumerate(reqs):
        assume(math.ceil((p + o - 1) / 16) <= blocks - 1)  # one block is vLLM's null block
        # a few requests share a prompt prefix, so prefix hits and shared blocks happen too
        base = (i % shared if shared else i) << 16
        s.add(SimRequest(f"r{i}", p, o, list(range(base, base + p // 16))))
    total_preempted = 0
    for _ in range(20_000):
        if not s.has_work():
            break
        demand, free = _demand(s), s.pool.free
        out = s.step()
        assert bool(out.preempted) == (demand > free), (demand, free, out.preempted)
        total_preempted += len(out.preempted)
        assert 0 <= s.pool.free <= s.pool.total
    assert not s.has_work()
    assert s.stats().preemptions_total == total_preempted
    assert s.pool.free == s.pool.total  # every block came back
    assert s.generation_tokens_total == sum(o for _, o in reqs)


@settings(max_examples=100, deadline=None)
@given(requests, st.integers(40, 400))
def test_no_preemption_when_every_request_fits_at_once(reqs, blocks):
    need = sum(math.ceil((p + o - 1) / 16) for p, o in reqs)  # the last sampled token is never cached
    assume(need <= blocks - 1 and all(p + o <= blocks * 16 for p, o in reqs))
    s = _tiny(blocks, 4096)
    for i, (p, o) in enumerate(reqs):
        s.add(SimRequest(f"r{i}", p, o))
    while s.has_work():
        s.step()
    assert s.preemptions_total == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 64), st.integers(16, 600), st.integers(1, 200), st.integers(30, 300), st.integers(30, 300))
def test_more_kv_memory_never_admits_fewer(n, prompt, output, b1, b2):
    """A burst of n identical requests: the peak number running at once never drops with more blocks."""
    lo, hi = sorted((b1, b2))
    assume(math.ceil((prompt + output - 1) / 16) <= lo - 1)

    def peak(blocks):
        s = _tiny(blocks, 2048, mml=lo * 16)
        for i in range(n):
            s.add(SimRequest(f"r{i}", prompt, output))
        best = 0
        while s.has_work():
            s.step()
            best = max(best, len(s.running))
        return best

    assert peak(hi) >= peak(lo)


def test_fp8_kv_holds_the_burst_that_preempts_with_bf16():
    """The CPU-build story of VLLM.md: same bytes, fp8 KV holds twice the tokens, no preemption."""
    reqs = [(1330, 128)] * 24
    auto, fp8 = _tiny(1400, 2048, mml=2048), _tiny(1400, 2048, kv="fp8", mml=2048)
    for s in (auto, fp8):
        for i, (p, o) in enumerate(reqs):
            s.add(SimRequest(f"r{i}", p, o))
        while s.has_work():
            s.step()
    assert fp8.facts().kv_cache_tokens == 2 * auto.facts().kv_cache_tokens
    assert auto.preemptions_total > 0 and fp8.preemptions_total == 0


# --- determinism ------------------------------------------------------------------------------
def _records(closed: bool, seed: int, jitter: float = 0.0):
    cal = load_calibration()
    cal.step_jitter = jitter
    s = SchedulerSim(load_model("llama-3.1-8b"), H200, Mode("a"), Server(max_model_len=4096), calibration=cal, seed=seed)
    lengths = lambda i: (300 + (i * 37) % 200, 40 + (i * 11) % 30)  # noqa: E731
    r = simulate_step(s, lengths, 24 if closed else 30.0, closed, warmup_s=0.5, window_s=3.0, seed=seed, mode_name="a", step_index=0)
    return [x.to_json() for x in r.records]


@pytest.mark.parametrize("closed", [True, False])
def test_same_seed_same_records(closed):
    assert _records(closed, 7) == _records(closed, 7)
    assert _records(closed, 7, jitter=0.1) == _records(closed, 7, jitter=0.1)


def test_seed_changes_open_loop_arrivals_and_jitter():
    assert _records(False, 1) != _records(False, 2)
    assert _records(True, 1, jitter=0.1) != _records(True, 2, jitter=0.1)


def test_calibration_defaults_are_priors():
    assert Calibration().name == "uncalibrated priors"


def test_cache_compaction_during_a_preemption_keeps_every_held_key():
    """Thousands of cached blocks on a small pool under preemption: the pool compacts its key
    table inside a step (a preemption releases blocks), and the step's own registrations must
    land in the compacted table (they were lost once, and a later release raised KeyError)."""
    s = _tiny(40, 256, caching=True, mml=40 * 16)
    n = 0
    compactions = 0
    for wave in range(60):
        for _ in range(12):  # more than the pool holds: preemption every wave
            s.add(SimRequest(f"r{n}", 150, 60, list(range(n << 16, (n << 16) + 150 // 16))))
            n += 1
        while s.has_work():
            before = len(s.pool.cached)
            s.step()
            compactions += len(s.pool.cached) < before - 100
            held = [k for r in s.running for k in r.keys]
            assert all(k in s.pool.cached and s.pool.cached[k] > 0 for k in held)
    assert s.preemptions_total > 0 and compactions > 0
    assert s.pool.free == s.pool.total
