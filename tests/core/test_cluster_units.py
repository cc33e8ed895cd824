"""kvtui run --cluster's decisions that need no cluster (issue 48): which nodes are refused before any
lane starts, and the warning when the modes ran on different GPU types. The lanes themselves run on a
real local Ray cluster in tests/e2e/test_cluster_lanes.py."""

from __future__ import annotations

from kvtui.cluster.driver import gpu_type_warning, refusals
from kvtui.cluster.view import LanesView
from kvtui.io.scenario import load_scenario


def _node(i: int, **kw):
    return {"node_id": f"{i:02d}" + "ab" * 20, "host": f"gpu-{i}", "kvtui_version": "0.1.0", "kvtui_digest": "d1",
            "vllm_version": "0.26.0", **kw}


def _scenario(tmp_path, extra: str = "", engine: str = "vllm"):
    p = tmp_path / "s.toml"
    p.write_text(f'name = "s"\n[server]\nengine = "{engine}"\n{extra}\n[[modes]]\nname = "bf16"\n')
    return load_scenario(p, [])


def test_a_node_with_another_kvtui_or_vllm_is_refused_in_one_line_naming_it(tmp_path):
    sc = _scenario(tmp_path, 'vllm_version = "0.26"')
    nodes = [_node(1), _node(2, kvtui_digest="d2", vllm_version=None), _node(3, kvtui_version="0.2.0"),
             _node(4, vllm_version="0.25.1"), _node(5, vllm_version="0.26.3+cpu")]
    lines = refusals(nodes, sc, "0.1.0", "d1")
    assert len(lines) == 3  # one line per refused node, every reason in it
    two, three, four = lines
    assert two.startswith("node 02ababababab (gpu-2): another kvtui build") and "no vLLM installed" in two
    assert three.startswith("node 03ababababab (gpu-3): kvtui 0.2.0, the driver runs 0.1.0")
    assert four == "node 04ababababab (gpu-4): vLLM 0.25.1, the scenario asks for 0.26 (server.vllm_version)"
    # No version asked: the nodes must agree; the simulator needs no vLLM at all.
    sc = _scenario(tmp_path)
    (odd,) = refusals([_node(1), _node(2), _node(3, vllm_version="0.27.0")], sc, "0.1.0", "d1")
    assert odd.startswith("node 03ababababab (gpu-3): vLLM 0.27.0, node 01ababababab (gpu-1) has 0.26.0")
    assert refusals([_node(1, vllm_version=None)], _scenario(tmp_path, engine="sim"), "0.1.0", "d1") == []


def test_modes_on_different_gpu_types_are_warned():
    ran = [{"mode": "bf16", "gpu_names": ["NVIDIA H100 80GB HBM3"]}, {"mode": "fp8-kv", "gpu_names": ["NVIDIA H200"]},
           {"mode": "fp8-w", "gpu_names": ["NVIDIA H200"]}, {"mode": "lost", "gpu_names": []}]
    w = gpu_type_warning(ran)
    assert w is not None and "NVIDIA H100 80GB HBM3 (bf16)" in w and "NVIDIA H200 (fp8-kv, fp8-w)" in w
    assert gpu_type_warning(ran[1:]) is None


def test_the_lanes_view_follows_a_lane_from_queued_to_retried_to_done():
    said: list[str] = []
    v = LanesView([("L1", "bf16"), ("L2", "fp8-kv")], on_line=said.append)
    assert [r[2] for r in v.table()] == ["queued", "queued"]
    v.apply({"lane": "L1", "kind": "started", "attempt": 1, "node_id": "aaaa" * 10, "host": "g1", "gpu_ids": ["0"],
             "gpu_names": ["NVIDIA H200"]})
    v.apply({"lane": "L1", "kind": "step", "step": {"load": 8, "load_kind": "concurrency", "ttft_p95_ms": 812.4,
                                                    "tpot_p95_ms": 31.0, "output_tok_s": 1520.0, "passed": True}})
    v.apply({"lane": "L1", "kind": "started", "attempt": 2, "node_id": "bbbb" * 10, "host": "g2", "gpu_ids": ["3"],
             "gpu_names": ["NVIDIA H200"]})
    v.apply({"lane": "L1", "kind": "mode_done", "knee": 24})
    v.set_state("L1", "done")
    row = v.table()[0]
    assert row[:7] == ("L1", "bf16", "done", "bbbbbbbbbbbb", "g2", "GPU 3 NVIDIA H200", "2") and row[9] == "24"
    assert v.rows["L1"].nodes == ["aaaa" * 10, "bbbb" * 10]
    assert "mode bf16 retried on node bbbbbbbbbbbb (g2), GPU 3 NVIDIA H200, try 2: node aaaaaaaaaaaa was lost" \
        in "\n".join(said)
    assert v.table()[1][2] == "queued"
