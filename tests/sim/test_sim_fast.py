"""Fast mode (virtual-time client) and the scheduler's interface details."""

from __future__ import annotations

import pytest

from kvtui.io.scenario.schema import Mode, Scenario, Server
from kvtui.simulator.engine.fast import bench_serve, percentile, simulate_step
from kvtui.simulator.engine.scheduler import SchedulerSim, SimConfigError, SimRequest, peak_chunk_rate
from kvtui.simulator.model.catalog import load_gpu, load_model

M8B, H200 = load_model("llama-3.1-8b"), load_gpu("H200")


def sched(mode: Mode | None = None, **server) -> SchedulerSim:
    server.setdefault("max_model_len", 8192)
    return SchedulerSim(M8B, H200, mode or Mode("a"), Server(**server), seed=0)


def lengths(i: int) -> tuple[int, int]:
    return 500 + (i * 97) % 300, 50 + (i * 13) % 40


def check_records(res, load):
    for r in res.records:
        assert r.mode == "m" and r.load == load and r.t_intended == r.t_sent
        if r.ok:
            assert r.output_tokens == r.expected_output_tokens and r.prompt_tokens == r.expected_prompt_tokens
            assert len(r.itl) == r.output_tokens - 1
            assert r.t_first + sum(r.itl) == pytest.approx(r.t_last)
            assert r.ttft > 0 and all(g > 0 for g in r.itl)
        else:
            assert r.error == "cancelled" and r.phase != "window"


def test_closed_loop_phases_like_the_real_client():
    s = sched()
    res = simulate_step(s, lengths, 16, True, warmup_s=2.0, window_s=5.0, seed=3, mode_name="m", step_index=0)
    check_records(res, 16)
    phases = [r.phase for r in sorted(res.records, key=lambda r: r.t_sent)]
    assert phases[0] == "warmup" and "window" in phases and phases[-1] in ("tail", "window")
    # phases come in order: warmup, then window, then tail
    assert phases == sorted(phases, key=["warmup", "window", "tail"].index)
    w = res.window_records()
    assert w and all(r.ok for r in w)  # load held until every window request finished
    assert all(res.window_start <= r.t_sent < res.window_end for r in w)
    assert res.window_start >= res.t_start + 2.0  # warm-up lasted warmup_s ...
    # ... and every slot completed a request before the window opened
    done_before = [r for r in res.records if r.ok and r.t_last is not None and r.t_last <= res.window_start]
    assert len(done_before) >= 16
    assert res.window_end == pytest.approx(res.window_start + 5.0)
    assert all(r.t_sent >= res.window_end for r in res.records if r.phase == "tail")
    # the scheduler is drained for the next step
    assert not s.has_work() and res.stats_after.running == 0 and res.stats_after.waiting == 0
    assert res.stats_after.generation_tokens_total > res.stats_before.generation_tokens_total
    ts = [p.t for p in res.series]
    assert ts == sorted(ts) and len(ts) > 3


def test_closed_loop_keeps_n_in_flight():
    res = simulate_step(sched(), lengths, 12, True, warmup_s=1.0, window_s=4.0, seed=1, mode_name="m", step_index=0)
    deltas: dict[float, int] = {}
    for r in res.records:
        deltas[r.t_sent] = deltas.get(r.t_sent, 0) + 1
        if r.ok:
            deltas[r.t_last] = deltas.get(r.t_last, 0) - 1
    inflight = 0
    for t in sorted(deltas):  # a slot sends its next request at its last token's time
        inflight += deltas[t]
        if res.window_start <= t < res.window_end:
            assert inflight == 12
        assert inflight <= 12


def test_window_requests_bound_the_window():
    res = simulate_step(sched(), lengths, 8, True, warmup_s=0.5, window_s=100.0, window_requests=20, seed=0,
                        mode_name="m", step_index=2)
    assert len(res.window_records()) == 20 and all(r.step == 2 for r in res.records)


def test_open_loop_poisson_rate_and_intended_times():
    rate, window = 20.0, 30.0
    res = simulate_step(sched(), lengths, rate, False, warmup_s=2.0, window_s=window, seed=5, mode_name="m", step_index=0)
    check_records(res, rate)
    n = len(res.window_records())
    assert abs(n - rate * window) < 4 * (rate * window) ** 0.5  # Poisson count within 4 sigma
    gaps = sorted(b.t_intended - a.t_intended for a, b in zip(res.records, res.records[1:]))
    assert percentile(gaps, 50) == pytest.approx(0.6931 / rate, rel=0.3)  # exponential median


def test_open_loop_overload_grows_the_queue():
    light = simulate_step(sched(), lengths, 5.0, False, 1.0, 10.0, seed=1, mode_name="m", step_index=0)
    heavy = simulate_step(sched(), lengths, 400.0, False, 1.0, 10.0, seed=1, mode_name="m", step_index=0)
    ttft = lambda r: percentile([x.ttft for x in r.window_records() if x.ok], 90)  # noqa: E731
    assert ttft(heavy) > 5 * ttft(light)
    assert max(p.waiting for p in heavy.series) > max(p.waiting for p in light.series)


def test_fast_mode_512_concurrent_2k_256_runs_and_hits_the_kv_wall():
    """A step of 512 concurrent 2k/256 requests in bf16 KV: the KV cache holds ~390 of them."""
    res = simulate_step(sched(), lambda i: (2048, 256), 512, True, 2.0, 10.0, seed=0, mode_name="m", step_index=0)
    assert res.stats_after.preemptions_total > 0
    assert max(p.kv_usage for p in res.series) > 0.95
    assert max(p.running for p in res.series) < 512
    fp8 = simulate_step(sched(Mode("b", kv_cache_dtype="fp8")), lambda i: (2048, 256), 512, True, 2.0, 10.0, seed=0,
                        mode_name="m", step_index=0)
    assert fp8.stats_after.preemptions_total == 0 and max(p.running for p in fp8.series) == 512


def test_too_long_request_is_a_400_not_a_crash():
    res = simulate_step(sched(max_model_len=1024), lambda i: (2000, 10) if i == 3 else (100, 10), 4, True, 0.2, 1.0,
                        seed=0, mode_name="m", step_index=0)
    bad = [r for r in res.records if r.error == "http_4xx"]
    assert bad and bad[0].http_status == 400 and "maximum context length" in bad[0].detail


def test_bench_serve_summary():
    summary, recs = bench_serve(sched(), 64, 32, 2048, 256)
    assert summary["completed"] == 64 and len(recs) == 64
    assert summary["output_throughput"] == pytest.approx(64 * 256 / summary["duration"])
    assert summary["p99_ttft_ms"] >= summary["median_ttft_ms"] > 0


# --- the scheduler's interface ----------------------------------------------------------------
def test_facts_and_memory_like_vllm():
    s = sched(Mode("d", kv_cache_dtype="fp8", quantization="fp8"))
    f = s.facts()
    assert (f.block_size, f.max_num_seqs, f.max_num_batched_tokens, f.device, f.kv_cache_dtype) == (16, 1024, 8192, "GPU", "fp8")
    assert f.prefix_caching is True and f.num_gpu_blocks * 16 == f.kv_cache_tokens
    assert f.max_concurrency_reported == pytest.approx(f.kv_cache_tokens / 8192, rel=0.001)
    assert f.max_concurrency_len == 8192 and f.cuda_graph_gib > 0 and f.activation_peak_gib > 0
    assert any("fp8" in w for w in f.warnings)
    m = s.memory()
    assert m.used_gib == pytest.approx(m.weights_gib + m.activation_gib + m.non_torch_gib + m.kv_cache_gib + m.cuda_graph_gib
                                       + s.cal.nvml_overhead_gib)
    assert m.used_gib < m.gpu_total_gib and m.kv_in_use_gib == 0
    assert sched(enable_prefix_caching=False).facts().prefix_caching is False


def test_add_abort_and_kv_usage():
    s = sched()
    s.add(SimRequest("x", 4000, 100))
    with pytest.raises(ValueError):
        s.add(SimRequest("x", 10, 10))  # duplicate id
    with pytest.raises(ValueError, match="maximum context length"):
        s.add(SimRequest("y", 8000, 500))
    out = s.step()
    assert out.prefill_tokens == 4000 and out.tokens == {"x": 1} and out.duration_s > 0
    assert s.stats().kv_usage > 0 and s.memory().kv_in_use_gib > 0
    s.abort("x")
    assert not s.has_work() and s.stats().kv_usage == 0 and s.stats().requests_aborted_total == 1
    s.abort("x")  # idempotent


def test_chunked_prefill_and_token_budget():
    s = sched(max_model_len=32768)
    s.add(SimRequest("long", 20000, 4))
    steps = 0
    while not s.step().tokens:
        steps += 1
    assert steps == 2  # 8192 + 8192 + 3616: the first token comes with the third chunk
    assert s.prompt_tokens_total == 20000


def test_max_num_seqs_caps_running():
    s = sched(max_num_seqs=8)
    for i in range(20):
        s.add(SimRequest(f"r{i}", 100, 50))
    for _ in range(5):
        s.step()
        assert len(s.running) <= 8
    assert s.stats().waiting == 12


def test_async_scheduling_admits_arrivals_one_step_later():
    s = sched()
    s.add(SimRequest("a", 100, 20))
    assert s.step().tokens == {"a": 1}  # idle engine: scheduled at once
    s.add(SimRequest("b", 100, 20))
    first = s.step()
    assert "b" not in first.tokens  # arrived while busy: step k+1 was already scheduled
    assert "b" in s.step().tokens


def test_prefix_cache_hits_and_counters():
    s = sched()
    h = list(range(1000, 1000 + 64))  # 64 full blocks = 1024 tokens
    s.add(SimRequest("a", 1030, 5, h))
    while s.has_work():
        s.step()
    s.add(SimRequest("b", 1030, 5, h))
    out = s.step()
    assert out.prefill_tokens == 1030 - 1024
    st = s.stats()
    assert st.prefix_cache_hits_total == 1024 and st.prefix_cache_queries_total == 2 * 1030
    s2 = sched(enable_prefix_caching=False)
    s2.add(SimRequest("a", 1030, 5, h))
    assert s2.step().prefill_tokens == 1030 and s2.stats().prefix_cache_queries_total == 0


def test_does_not_start_when_the_model_does_not_fit():
    with pytest.raises(SimConfigError, match="No available memory"):
        SchedulerSim(load_model("llama-3.1-70b"), load_gpu("L4"), Mode("a"), Server(max_model_len=8192))


def test_step_time_ordering_between_modes():
    """fp8 weights make a prefill step faster on Hopper; fp8 KV makes a long-context decode faster."""
    def t(mode, prompt, n):
        s = sched(mode)
        for i in range(n):
            s.add(SimRequest(f"r{i}", prompt, 2))
        return s.step().duration_s

    assert t(Mode("c", quantization="fp8"), 2048, 4) < 0.75 * t(Mode("a"), 2048, 4)
    s_auto, s_fp8 = sched(), sched(Mode("b", kv_cache_dtype="fp8"))
    for s in (s_auto, s_fp8):
        for i in range(200):
            s.add(SimRequest(f"r{i}", 3000, 60))
        while any(r.out == 0 for r in s.running) or s.waiting or s.incoming:
            s.step()
    assert s_fp8.step().duration_s < 0.8 * s_auto.step().duration_s


def test_peak_chunk_rate_for_slow_motion():
    sc = Scenario()
    sc.ramp.max = 256
    r = peak_chunk_rate(sc, sc.modes[0])
    assert 1000 < r < 200_000
    sc.ramp.max = 8
    assert peak_chunk_rate(sc, sc.modes[0]) < r


@pytest.mark.parametrize("arrival", ["constant", "bursty"])
def test_open_loop_spaces_its_sends_as_ramp_arrival_says(arrival):
    """The simulator's open loop draws its gaps as the live workers do (kvtui.core.arrivals): before, it
    drew Poisson gaps whatever `ramp.arrival` said."""
    rate = 20.0
    res = simulate_step(sched(), lengths, rate, False, warmup_s=1.0, window_s=10.0, seed=5, mode_name="m",
                        step_index=0, arrival=arrival, burst_size=4)
    check_records(res, rate)
    sent = sorted(r.t_intended for r in res.records)
    gaps = [b - a for a, b in zip(sent, sent[1:])]
    assert len(gaps) > 100
    if arrival == "constant":
        assert all(g == pytest.approx(1 / rate) for g in gaps)
    else:  # bursts of 4 sent together, the bursts 4 / rate apart on average
        assert sum(1 for g in gaps if g == 0) == pytest.approx(len(gaps) * 3 / 4, abs=4)
        assert (sent[-1] - sent[0]) / len(gaps) == pytest.approx(1 / rate, rel=0.25)
    poisson = simulate_step(sched(), lengths, rate, False, warmup_s=1.0, window_s=10.0, seed=5, mode_name="m",
                            step_index=0)
    assert [r.t_intended for r in poisson.records] != [r.t_intended for r in res.records]
