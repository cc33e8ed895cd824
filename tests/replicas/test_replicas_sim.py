"""Several `kvtui sim serve` replicas behind one run, over real HTTP on 127.0.0.1.

The knee model (`--knee N`) streams at a fixed pace, so the figures do not depend on this
box's speed; what is asserted is where each request went, what each replica reported and what
the run says when one of them dies.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from pathlib import Path

import httpx
import pytest

from kvtui.explore import events as ev
from kvtui.explore.run import Run
from kvtui.io.records import read_records
from kvtui.io.scenario import load_scenario
from kvtui.report.markdown import render_markdown
from kvtui.report.text import step_row
from kvtui.runtime.procs.servers import ServerProcess, free_port
from kvtui.runtime.telemetry.prom import MetricsScraper
from kvtui.runtime.telemetry.prom_windows import merge_samples
from kvtui.runtime.telemetry.replicas import ReplicaScrapers

from scenario_factory import knee_toml

KEY = "replica-test-key-123456"


def start_replica() -> tuple[str, ServerProcess]:
    port = free_port()
    cmd = [sys.executable, "-m", "kvtui", "sim", "serve", "--port", str(port), "--knee", "6", "--knee-tpot-ms", "20"]
    proc = ServerProcess(cmd, env={"KVTUI_SIM_API_KEY": KEY}, secrets=[KEY])
    proc.start()
    base = f"http://127.0.0.1:{port}"
    proc.wait_ready(base + "/health", timeout_s=60, what="simulator")
    return base, proc


@pytest.fixture(scope="module")
def pair():
    started = [start_replica() for _ in range(2)]
    yield [b for b, _ in started]
    for _, p in started:
        p.stop()


def scenario(tmp_path: Path, urls: list[str], steps: str, window_s: float = 2.0, routing: str = "least_inflight",
             **ramp):
    text = knee_toml("replicas", ramp={"step": steps, "search": "linear", "warmup_s": 0.3, "window_s": window_s,
                                       "confirm": False, "min_samples": 1, **ramp},
                     slo={"tpot_p50_ms": 1000, "max_error_rate": 1.0})  # p50: a short window suffices
    text = text.replace('engine = "sim"', f'engine = "external"\nreplica_urls = {urls!r}\n'.replace("'", '"')
                        + f'api_key = "{KEY}"\nrouting = "{routing}"')
    p = tmp_path / "replicas.toml"
    p.write_text(text)
    return load_scenario(p)


def _stated_kv_tokens(base: str) -> int:
    """kv_cache_size_tokens of vllm:cache_config_info on one replica's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(base + "/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).text
    return next(int(s.labels["kv_cache_size_tokens"]) for fam in text_string_to_metric_families(text)
                for s in fam.samples if s.name == "vllm:cache_config_info")


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one instant (an end at the same time as a start closes first)."""
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return most


def test_two_replicas_least_in_flight_per_replica_view(tmp_path, pair):
    out = tmp_path / "two.json"
    doc = Run(scenario(tmp_path, pair, "4"), out).run()
    mode = doc["modes"][0]
    assert [r["name"] for r in mode["replicas"]] == ["r0", "r1"]
    assert [r["base_url"] for r in mode["replicas"]] == pair
    assert mode["endpoint"]["routing"] == "least_inflight"
    step = mode["steps"][0]
    recs = [r for r in read_records(out.with_name("two.records.jsonl")) if r.counted]
    by = {i: [r for r in recs if r.replica == i] for i in (0, 1)}
    assert by[0] and by[1] and all(r.replica in (0, 1) for r in recs)
    per = {r["name"]: r for r in step["replicas"]}
    assert per["r0"]["requests"] == len(by[0]) and per["r1"]["requests"] == len(by[1])
    assert per["r0"]["requests"] + per["r1"]["requests"] == step["requests"]
    # Least in flight with 4 slots over two equal replicas: each holds 2 at once, never more. Exact
    # from kvtui's own records (a slot releases its replica after its stream ended, then picks the
    # replica with fewer in flight); the servers' sampled running gauge can only agree (≤ 2): a
    # scrape between one request's end and the next one's start reads 1, more often on a busy CPU.
    every = [r for r in read_records(out.with_name("two.records.jsonl")) if r.ok and r.t_last is not None]
    for i in (0, 1):
        assert _most_at_once([(r.t_sent, r.t_last) for r in every if r.replica == i]) == 2, i
    assert 1 <= per["r0"]["running_max"] <= 2 and 1 <= per["r1"]["running_max"] <= 2
    # The KV caches as each replica states it on /metrics, summed: each replica holds its own.
    assert mode["server"]["kv_cache_tokens"] == sum(_stated_kv_tokens(b) for b in pair) > 0
    assert any("2 replicas: KV tokens" in w for w in mode["server"]["warnings"])
    # Each replica's TTFT n is its own requests, counted from kvtui's records (never averaged).
    assert per["r0"]["ttft_ms"]["n"] == len(by[0])
    # The dashboard's per-replica rows travel in the series.
    rows = [r for r in mode["series"] if r.get("replicas")]
    assert rows and {x["name"] for x in rows[-1]["replicas"]} == {"r0", "r1"}
    assert "replicas_lost" not in step
    md = render_markdown(doc)
    table = md[md.index("#### Per replica"):]
    assert re.search(r"\| 0 \| 4 \| r0 \| " + str(len(by[0])) + r" \| 0 \|", table)
    assert re.search(r"\| 0 \| 4 \| r1 \| " + str(len(by[1])) + r" \| 0 \|", table)


def test_round_robin_alternates(tmp_path, pair):
    out = tmp_path / "rr.json"
    Run(scenario(tmp_path, pair, "1", routing="round_robin"), out).run()
    seq = [r.replica for r in read_records(out.with_name("rr.records.jsonl"))]
    assert len(seq) >= 4 and all(a != b for a, b in zip(seq, seq[1:]))  # one slot: r0, r1, r0, …


def test_gateway_url_with_metrics_urls_gauges_per_replica(tmp_path, pair):
    """llm-d / KServe / a DP head: requests to one URL, the /metrics of what stands behind it
    read one by one: per-replica gauges, no per-replica latency (kvtui does not know who served)."""
    text = knee_toml("gateway", ramp={"step": "2", "search": "linear", "warmup_s": 0.3, "window_s": 2,
                                      "confirm": False, "min_samples": 1}, slo={"tpot_p50_ms": 1000})
    urls = ", ".join(f'"{b}/metrics"' for b in pair)
    text = text.replace('engine = "sim"', f'engine = "external"\nurl = "{pair[0]}"\nmetrics_urls = [{urls}]\n'
                                          f'api_key = "{KEY}"')
    p = tmp_path / "gw.toml"
    p.write_text(text)
    out = tmp_path / "gw.json"
    doc = Run(load_scenario(p), out).run()
    mode = doc["modes"][0]
    assert mode["endpoint"]["routing"] == "gateway" and [r["base_url"] for r in mode["replicas"]] == [None, None]
    per = mode["steps"][0]["replicas"]
    assert [r["name"] for r in per] == ["r0", "r1"]
    # The "gateway" sent all to r0: r1's gauge never saw a request. (r0's sampled running_max is 1 or
    # 2: a scrape can fall between two sends on a loaded host, so its exact peak is not asserted.)
    assert per[0]["running_max"] in (1, 2) and not per[1]["running_max"]
    assert all("requests" not in r and "ttft_ms" not in r for r in per)
    assert all(r.replica is None for r in read_records(out.with_name("gw.records.jsonl")))


def test_merged_histograms_bucket_by_bucket(tmp_path, pair):
    Run(scenario(tmp_path, pair, "2"), tmp_path / "h.json").run()  # both replicas have served requests
    alone = []
    for b in pair:
        with MetricsScraper(b + "/metrics", KEY) as s:
            alone.append(s.scrape())
    both = ReplicaScrapers([(f"r{i}", b + "/metrics", {"Authorization": f"Bearer {KEY}"}) for i, b in enumerate(pair)])
    merged = both.scrape()
    both.close()
    assert merged.ok and len(merged.replicas) == 2
    assert {"ttft", "e2e"} <= set(merged.histograms)
    for key, h in merged.histograms.items():
        a, b = alone[0].histograms[key], alone[1].histograms[key]
        assert h.count == a.count + b.count and h.count > 0
        for le, c in h.buckets.items():
            assert c == a.buckets.get(le, 0.0) + b.buckets.get(le, 0.0), (key, le)
    assert merged.generation_tokens == alone[0].generation_tokens + alone[1].generation_tokens
    assert merge_samples(alone).histograms["ttft"].buckets == merged.histograms["ttft"].buckets


def test_three_replicas_one_killed_mid_step(tmp_path, pair):
    victim_url, victim = start_replica()
    urls = pair + [victim_url]
    killed = threading.Event()

    def listener(e: ev.Event) -> None:
        # Kill replica r2 (SIGKILL) once it has finished requests inside the window of the step at 6.
        if isinstance(e, ev.Records) and not killed.is_set():
            if any(r.replica == 2 and r.phase == "window" and r.ok and r.load == 6 for r in e.records):
                os.killpg(victim.pgid, signal.SIGKILL)
                killed.set()

    out = tmp_path / "three.json"
    try:
        # 3, then 6 (where r2 dies: its failed requests are errors, infinite latency), then 9,
        # measured on the two that are left. A linear ramp: the fast search would start from the
        # KV-bound guess (the replicas state 3 × 1 M KV tokens on /metrics) at the top, 9, where the
        # SLO (p50 ≤ 1 s) holds, and stop.
        doc = Run(scenario(tmp_path, urls, "3,6,9", window_s=3.0, start=3, max=9), out,
                  listener=listener).run()
    finally:
        victim.stop()
    assert killed.is_set()
    mode = doc["modes"][0]
    i = next(k for k, s in enumerate(mode["steps"]) if s.get("replicas_lost"))
    assert i >= 1 and all("replicas_lost" not in s for s in mode["steps"][:i])  # all three served before
    first, second = mode["steps"][i], mode["steps"][i + 1]
    assert first["load"] == 6
    lost = first["replicas_lost"]
    assert [x["name"] for x in lost] == ["r2"]
    assert any("r2" in n and "goes on with r0, r1" in n for n in first["notes"])
    assert "r2 lost" in step_row(first)[-2]  # the verdict column names it
    # The run went on with the other two: the second step was measured, r2 got nothing there
    # (the dispatcher took it out after its connection was refused).
    recs = list(read_records(out.with_name("three.records.jsonl")))
    late = [r for r in recs if r.step == second["index"] and r.counted]
    assert late and {r.replica for r in late} <= {0, 1} and all(r.ok for r in late)
    assert "replicas_lost" not in second and second["errors"] == 0
    assert mode["best_concurrency"] is not None
