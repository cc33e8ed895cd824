"""What limited a step, on figures captured from a real H200 run."""

import json
from pathlib import Path

from kvtui.explore.evaluate import client_limited, limited_by
from kvtui.scenario.schema import Slo

DATA = Path(__file__).with_name("data")


def test_h200_c256_is_prefill_bound_not_client_bound():
    """On the H200 (vLLM 0.26, 2k/256, bf16) kvtui first called c=256 "client"-limited: a 61 ms
    loop-lag p99 against a 4.7 s TTFT p50 at 37 % client CPU. The prefill queue (166 waiting,
    KV 65 % used) is what failed the SLO."""
    step = json.loads((DATA / "h200_bf16_c256_step.json").read_text())
    assert step["limited_by"] == "client"  # what the first run said
    assert not client_limited(step["client"], step["ttft_ms"])
    step["client_limited"] = False
    slo = Slo(latency={"ttft_p95_ms": 2000.0, "tpot_p95_ms": 50.0})
    assert limited_by(step, slo) == "prefill"


def test_saturated_or_lagging_client_is_flagged():
    ttft = {"p50": 100.0}
    assert client_limited({"cpu_share": 0.95}, ttft)
    assert client_limited({"cpu_share": 0.3, "loop_lag_ms_p99": 80.0}, ttft)
    assert client_limited({"cpu_share": 0.3, "dispatch_ms_p95": 30.0}, ttft)
    assert not client_limited({"cpu_share": 0.3, "loop_lag_ms_p99": 20.0, "dispatch_ms_p95": 1.0}, ttft)
