"""kvtui run --parallel: one mode per free device at once, joined into one snapshot (issue 22 item 3).

Real parts: each lane is a real `kvtui run` process with its own CUDA_VISIBLE_DEVICES, serving
through a real `kvtui sim serve` over loopback HTTP (or offline with --fast where only the
lanes' bookkeeping is under test). The one mock: NVML's GPUs (this box has none) for which GPUs
count as free.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvtui.cli.entry import main as cli_main
from kvtui.cli.parallel import lane_env
from kvtui.explore import devices
from kvtui.io.scenario import load_scenario
from kvtui.io.snapshot.file import load_snapshot
from kvtui.report.markdown import render_markdown
from kvtui.runtime.telemetry import nvml

ROOT = Path(__file__).resolve().parents[2]

SCENARIO = """
name = "par"
[server]
engine = "sim"
devices = 2
extra_args = ["--knee", "4", "--knee-tpot-ms", "20"]
[workload]
prompt_tokens = 64
output_tokens = 16
[ramp]
start = 2
max = 4
warmup_s = 0.5
window_s = 1.0
min_samples = 5
[slo]
tpot_p95_ms = 50
[[modes]]
name = "baseline"
[[modes]]
name = "fp8-kv"
kv_cache_dtype = "fp8"
"""


def kvtui(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), "KVTUI_PREFLIGHT": "0", **(env or {})}
    e.pop("CUDA_VISIBLE_DEVICES", None) if env is None or "CUDA_VISIBLE_DEVICES" not in env else None
    return subprocess.run([sys.executable, "-m", "kvtui", *args], capture_output=True, text=True, env=e,
                          timeout=timeout)


def test_two_modes_on_two_simulated_devices_at_once_joined_into_one_snapshot(tmp_path):
    sp = tmp_path / "par.toml"
    sp.write_text(SCENARIO)
    out = tmp_path / "joined.json"
    r = kvtui("run", str(sp), "--parallel", "--headless", "--out", str(out), "--set", "ramp.start=4")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = load_snapshot(out)
    modes = {m["name"]: m for m in doc["modes"]}
    assert list(modes) == ["baseline", "fp8-kv"]
    # Each mode ran on its own lane's device, and says which.
    assert modes["baseline"]["ran_on"]["gpu_uuids"] == ["SIM-GPU-0"]
    assert modes["fp8-kv"]["ran_on"]["gpu_uuids"] == ["SIM-GPU-1"]
    assert doc["environment"]["gpu_uuids"] == ["SIM-GPU-0", "SIM-GPU-1"] and doc["environment"]["simulated"]
    lanes = doc["run"]["parallel"]["lanes"]
    assert [(ln["mode"], ln["devices"], ln["rc"]) for ln in lanes] == [("baseline", ["0"], 0), ("fp8-kv", ["1"], 0)]
    # At once: each mode started before the other finished.
    b, f = modes["baseline"], modes["fp8-kv"]
    assert b["started_at"] < f["finished_at"] and f["started_at"] < b["finished_at"]
    # The comparison and the report say the modes ran on different devices.
    (w,) = [w for w in doc["warnings"] if "ran on 2 devices" in w]
    assert "SIM-GPU-0 (baseline)" in w and "SIM-GPU-1 (fp8-kv)" in w
    assert "ran on 2 devices" in r.stdout
    assert all(m["steps"] and m["complete"] and not m.get("error") for m in doc["modes"]), \
        [(m["name"], m.get("error"), m.get("complete")) for m in doc["modes"]]
    assert all(st["autoscale"]["workers"] == st["client"]["workers"] >= 1 for m in doc["modes"] for st in m["steps"])
    # The joined sidecar holds every lane's per-request records.
    recs = [json.loads(x) for x in (tmp_path / "joined.records.jsonl").read_text().splitlines()]
    per_lane = sum(len(Path(ln["snapshot"]).with_name(Path(ln["snapshot"]).stem + ".records.jsonl").read_text()
                       .splitlines()) for ln in lanes)
    assert len(recs) == per_lane > 0 and {x["mode"] for x in recs} == {"baseline", "fp8-kv"}
    md = render_markdown(doc)
    assert "| baseline: ran on |" in md and "| fp8-kv: ran on |" in md


def test_more_modes_than_devices_queue_for_a_free_lane_and_a_failed_mode_is_named(tmp_path):
    sp = tmp_path / "par.toml"
    sp.write_text(SCENARIO + '[[modes]]\nname = "broken"\nmodel = "no-such-model-xyz"\n')
    out = tmp_path / "joined.json"
    # Offline steps (--fast): here the lanes' bookkeeping is under test, not the HTTP path.
    r = kvtui("run", str(sp), "--parallel", "--fast", "--headless", "--out", str(out))
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]  # a mode failed: the run says so
    doc = load_snapshot(out)
    modes = {m["name"]: m for m in doc["modes"]}
    assert list(modes) == ["baseline", "fp8-kv", "broken"]
    lanes = doc["run"]["parallel"]["lanes"]
    assert sorted(ln["mode"] for ln in lanes) == sorted(modes)
    assert {tuple(ln["devices"]) for ln in lanes} == {("0",), ("1",)}  # three modes over two lanes
    assert all(m["steps"] and not m.get("error") for n, m in modes.items() if n != "broken")
    (rc,) = [ln["rc"] for ln in lanes if ln["mode"] == "broken"]
    assert rc != 0 and not modes["broken"]["steps"]
    assert "no-such-model-xyz" in modes["broken"]["error"]["message"]  # why, from its lane
    assert modes["broken"]["ran_on"]["gpu_uuids"] in (["SIM-GPU-0"], ["SIM-GPU-1"])


def test_no_free_device_is_one_line_and_nothing_written(tmp_path, monkeypatch, capsys):
    sp = tmp_path / "par.toml"
    sp.write_text(SCENARIO)
    out = tmp_path / "joined.json"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cli_main(["run", str(sp), "--parallel", "--headless", "--out", str(out)]) == 1
    assert "no free device for a lane" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "joined.lanes").exists()
    code = cli_main(["run", str(sp), "--parallel", "--headless", "--out", str(out), "--engine", "external",
                     "--set", 'server.url="http://127.0.0.1:9"'])
    assert code == 2 and "--parallel: the external engine" in capsys.readouterr().err and not out.exists()


def _gpu(i: int, used: float = 0.3, procs=()):
    return nvml.GpuState(index=i, name="NVIDIA H200", uuid=f"GPU-{i}aaaaaaa-0000", mem_total_gib=139.8,
                         mem_free_gib=139.8 - used, processes=[nvml.GpuProcess(p, 30.0, "vllm") for p in procs])


@pytest.mark.parametrize("tp, lanes", [(1, [["GPU-0aaaaaaa-0000"], ["GPU-3aaaaaaa-0000"], ["GPU-4aaaaaaa-0000"]]),
                                       (2, [["GPU-0aaaaaaa-0000", "GPU-3aaaaaaa-0000"]])])
def test_free_gpus_are_those_no_process_holds_and_little_memory_is_used(monkeypatch, tmp_path, tp, lanes):
    states = [_gpu(0), _gpu(1, procs=[4242]), _gpu(2, used=20.0), _gpu(3), _gpu(4)]
    monkeypatch.setattr(nvml, "gpu_states", lambda env=None: (nvml.Inventory(available=True), states))
    sp = tmp_path / "g.toml"
    sp.write_text(SCENARIO.replace('engine = "sim"', 'engine = "vllm"'))
    sc = load_scenario(sp, [f"server.tensor_parallel_size={tp}"])
    plan = devices.plan_lanes(sc)
    assert plan.lanes == lanes  # by UUID: CUDA's device order may not be NVML's
    why = "; ".join(plan.left_out)
    assert "GPU 1 (NVIDIA H200, GPU-1aaaaaaa): in use by pid 4242 vllm" in why and "GPU 2" in why and "20.0 GiB in use" in why
    if tp == 2:
        assert "GPU 4" in why and "fewer than tensor_parallel_size = 2" in why
    env = lane_env(sc, plan.lanes[0])
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(plan.lanes[0])
    assert env.get("NCCL_NVLS_ENABLE") == ("0" if tp > 1 else os.environ.get("NCCL_NVLS_ENABLE"))


def test_simulated_devices_follow_cuda_visible_devices():
    assert devices.sim_device_ids(4, {}) == [0, 1, 2, 3]
    assert devices.sim_device_ids(4, {"CUDA_VISIBLE_DEVICES": "2,0,9"}) == [2, 0]
    assert devices.sim_device_ids(4, {"CUDA_VISIBLE_DEVICES": "1,x,3"}) == [1]  # CUDA stops at the first bad entry
    assert devices.sim_device_ids(4, {"CUDA_VISIBLE_DEVICES": ""}) == []


def test_parallel_json_is_the_answer_alone_on_stdout(tmp_path):
    # `--parallel --json` printed the lanes' progress and the text ending on stdout: a script's JSON
    # parse failed. As a sequential run: the answer (with the run it answers) alone there.
    import json

    sp = tmp_path / "par.toml"
    sp.write_text(SCENARIO)
    out = tmp_path / "joined.json"
    r = kvtui("run", str(sp), "--parallel", "--fast", "--json", "--out", str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    parsed = json.loads(r.stdout)
    assert parsed["run"]["snapshot"] == str(out) and parsed["run"]["simulated"] is True
    assert {row["mode"] for row in parsed["rows"]} == {"baseline", "fp8-kv"}
    assert "lane" in r.stderr and "ANSWER:" not in r.stdout


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_a_node_where_a_lane_log_goes_is_refused_and_never_hangs(tmp_path, kind):
    """Outputs checked like inputs (issue 30), the lanes' files too: a FIFO planted where a lane's
    log goes once stopped the log pump, then the lane (its output pipe full), then the run."""
    sc = tmp_path / "par.toml"
    sc.write_text(SCENARIO)
    out = tmp_path / "par.json"
    lanes = tmp_path / "par.lanes"
    lanes.mkdir()
    node = lanes / "00-baseline.log"
    if kind == "fifo":
        os.mkfifo(node)
    else:
        node.symlink_to(tmp_path / "elsewhere.log")
    p = kvtui("run", str(sc), "--parallel", "--headless", "--fast", "--out", str(out))
    assert p.returncode == 2 and "00-baseline.log" in p.stderr and "not a regular file" in p.stderr, p.stdout + p.stderr
    assert os.path.lexists(node) and (node.is_fifo() if kind == "fifo" else node.is_symlink())
    assert not (tmp_path / "elsewhere.log").exists()
