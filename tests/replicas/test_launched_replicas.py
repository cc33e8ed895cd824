"""`server.replicas = N`: kvtui launches N servers per mode, each on its own port with its own
per-run API key, and the shipped scenario `sim-replicas` runs two with no GPU."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import httpx

from kvtui.engines.replicas import ReplicatedEngine, create_for
from kvtui.paths import find_scenario
from kvtui.scenario import load_scenario
from kvtui.tui.svg import render_dashboard_svg


def test_each_launched_replica_has_its_own_port_and_key():
    sc = load_scenario(find_scenario("sim-replicas"))
    engine = create_for(sc)
    assert isinstance(engine, ReplicatedEngine)
    lines: list[str] = []
    ep = engine.start(sc, sc.modes[0], lines.append)
    try:
        assert [r.name for r in ep.replicas] == ["r0", "r1"] and ep.spreads
        r0, r1 = ep.replicas
        assert r0.base_url != r1.base_url
        assert r0.headers["Authorization"] != r1.headers["Authorization"]
        for mine, other in ((r0, r1), (r1, r0)):
            assert httpx.get(mine.base_url + "/v1/models", headers=mine.headers, trust_env=False).status_code == 200
            # one replica's key opens no other replica
            assert httpx.get(other.base_url + "/v1/models", headers=mine.headers, trust_env=False).status_code == 401
        facts = engine.facts()
        assert facts.kv_cache_tokens == r0.facts["kv_cache_tokens"] + r1.facts["kv_cache_tokens"]
        assert any(line.startswith("[r1] ") for line in lines)
        assert engine.check_alive() is None
    finally:
        engine.stop()
    assert engine.check_alive() is not None  # stopped: both gone
    for r in (r0, r1):
        try:
            httpx.get(r.base_url + "/health", timeout=2, trust_env=False)
            raise AssertionError(f"{r.name} still answers after stop")
        except httpx.ConnectError:
            pass


def test_shipped_scenario_runs_two_simulated_replicas(tmp_path):
    out = tmp_path / "rep.json"
    p = subprocess.run([sys.executable, "-m", "kvtui", "run", "sim-replicas", "--headless", "--out", str(out),
                        "--set", "ramp.max=8", "--set", "ramp.confirm=false", "--set", "ramp.window_s=4",
                        "--set", "workload.prompt_tokens=512", "--set", "workload.output_tokens=32"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["environment"]["simulated"] is True
    mode = doc["modes"][0]
    reps = mode["replicas"]
    assert [r["name"] for r in reps] == ["r0", "r1"] and reps[0]["base_url"] != reps[1]["base_url"]
    assert mode["server"]["kv_cache_tokens"] == sum(r["server"]["kv_cache_tokens"] for r in reps)
    step = mode["steps"][-1]
    per = step["replicas"]
    assert [r["name"] for r in per] == ["r0", "r1"]
    assert all(r["requests"] > 0 and r["kv_cache_usage_max"] is not None for r in per)
    assert sum(r["requests"] for r in per) == step["requests"]
    assert "api_key" not in json.dumps(reps) and "Bearer" not in out.read_text()
    # The dashboard's per-replica panel, drawn from the snapshot (replay): one line per replica.
    text = re.sub("<[^>]+>", "", render_dashboard_svg(doc, width=160, height=48, view="dashboard")).replace("&#160;", " ")
    lines = [ln for ln in text.splitlines() if re.match(r"^r[01] [█░]+ KV +\d+%  run \d+  wait \d+  preempt \d+", ln)]
    assert [ln[:2] for ln in lines] == ["r0", "r1"]
