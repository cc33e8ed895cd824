"""kvtui run --cluster: the lanes of a comparison on a real Ray cluster (issue 48).

Real parts: a local multi-node Ray cluster (ray.cluster_utils.Cluster: a head without GPUs and
GPU nodes with one fake GPU each, every node its own raylet), each lane a real `kvtui run --mode`
on the node Ray placed it, the simulator engine (offline with --fast where the figures are
compared, over loopback HTTP where a stop or a lost node must cut a live lane). One cluster for
the module: starting one costs ~15 s on this box.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from kvtui.cli.entry import main as cli_main  # noqa: E402
from kvtui.io.snapshot.file import load_snapshot  # noqa: E402

# In the live queue (tests/conftest.py's "rest" group, one test after another on one xdist worker): the
# lanes' simulators must not share the two cores with another live test, and the one cluster is started once.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

SCENARIO = """
name = "clu"
[server]
engine = "sim"
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

# A live lane that is cut inside its first step: a long window.
LONG_SETS = ["ramp.window_s=30", "ramp.confirm=false"]
LONG = [x for o in LONG_SETS for x in ("--set", o)]


def _env() -> dict[str, str]:
    path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "KVTUI_PREFLIGHT": "0", "PYTHONPATH": os.pathsep.join(path)}


@pytest.fixture(scope="module")
def cluster():
    # The nodes' raylets, and so their workers and lanes, take this environment when they start:
    # this kvtui first on the path, no pre-flight (the lanes' simulator needs none).
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "KVTUI_PREFLIGHT")}
    os.environ.update(_env())
    try:
        # Three GPU nodes (the head one of them: a raylet fewer to start), a fake GPU each.
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 1})
        gpu_nodes = [c.head_node] + [c.add_node(num_cpus=1, num_gpus=1) for _ in range(2)]
        c.wait_for_nodes()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    ray.init(address=c.address, log_to_driver=False, namespace="kvtui")
    yield c, gpu_nodes
    ray.shutdown()
    c.shutdown()


def lane_processes() -> list[str]:
    """Live processes of a lane or of a lane's server (their command lines name the lane's folder)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        # (a Ray worker's title names the task it runs, "ray::kvtui-lane-…": not a lane's process)
        if "kvtui-lane-" in cmd and not cmd.startswith("ray::") and state not in ("Z", "X"):
            out.append(f"{pid} {cmd}")
    return out


def wait_no_lane_processes(timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    left = lane_processes()
    while left and time.monotonic() < deadline:
        time.sleep(0.3)
        left = lane_processes()
    return left


def figures(doc: dict) -> dict:
    return {m["name"]: (m["best_concurrency"], [(s["load"], s["requests"], s["passed"], round(s["output_tok_s"], 6),
                                                  s["ttft_ms"].get("p95"), s["tpot_ms"].get("p95"))
                                                 for s in m["steps"]]) for m in doc["modes"]}


def test_lanes_land_on_different_nodes_and_join_into_the_figures_of_one_box(cluster, tmp_path, capsys):
    c, gpu_nodes = cluster
    sp = tmp_path / "clu.toml"
    sp.write_text(SCENARIO)
    out = tmp_path / "cluster.json"
    code = cli_main(["run", str(sp), "--cluster", c.address, "--headless", "--fast", "--out", str(out)])
    text = capsys.readouterr()
    assert code == 0, text.out[-3000:] + text.err[-3000:]
    doc = load_snapshot(out)
    lanes = doc["run"]["parallel"]["lanes"]
    gpu_ids = {n.node_id for n in gpu_nodes}
    assert [ln["mode"] for ln in lanes] == ["baseline", "fp8-kv"] and all(ln["rc"] == 0 for ln in lanes)
    assert len({ln["node_id"] for ln in lanes}) == 2 and {ln["node_id"] for ln in lanes} <= gpu_ids
    for m in doc["modes"]:  # each mode says the Ray node, host, GPU and vLLM it ran on
        (ln,) = [x for x in lanes if x["mode"] == m["name"]]
        assert m["ran_on"]["ray_node_id"] == ln["node_id"] and ln["node_id"][:12] in m["ran_on"]["host"]
        assert "vllm_version" in m["ran_on"] and m["ran_on"]["gpu_uuids"]
    assert {n["node_id"] for n in doc["run"]["parallel"]["cluster"]["nodes"]} == gpu_ids
    assert any("ran on 2 devices" in w for w in doc["warnings"])
    # Every lane's per-request records came back and were joined.
    recs = [json.loads(x) for x in (tmp_path / "cluster.records.jsonl").read_text().splitlines()]
    assert {r["mode"] for r in recs} == {"baseline", "fp8-kv"}
    # The headless view: a line per lane's start, naming its node and GPU, its lines prefixed.
    for ln in lanes:
        assert f"mode {ln['mode']} started on node {ln['node_id'][:12]}" in text.out
    assert "(L1 baseline @ " in text.out and "(L2 fp8-kv @ " in text.out
    # The same scenario on one box (the same lanes, --parallel on two simulated devices): the same figures.
    one = tmp_path / "one.json"
    r = subprocess.run([sys.executable, "-m", "kvtui", "run", str(sp), "--parallel", "--fast", "--headless",
                        "--set", "server.devices=2", "--out", str(one)], capture_output=True, text=True,
                       timeout=240, env=_env())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert figures(doc) == figures(load_snapshot(one))


def test_a_node_refused_before_any_lane_starts(cluster, tmp_path, capsys):
    c, _ = cluster
    sp = tmp_path / "v.toml"
    sp.write_text(SCENARIO.replace('engine = "sim"', 'engine = "vllm"\nvllm_version = "9.9.9"'))
    out = tmp_path / "v.json"
    assert cli_main(["run", str(sp), "--cluster", c.address, "--headless", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    refused = [x for x in err.splitlines() if x.startswith("kvtui: --cluster: refused: node ")]
    assert len(refused) == 3, err  # one line per GPU node, naming it
    assert all("no vLLM installed" in x or "the scenario asks for 9.9.9" in x for x in refused)
    assert "nothing was started" in err and not out.exists() and not lane_processes()
    # No node has the accelerator type asked for: one line, nothing started.
    sp.write_text(SCENARIO.replace('engine = "sim"', 'engine = "sim"\naccelerator_type = "H200"'))
    assert cli_main(["run", str(sp), "--cluster", c.address, "--headless", "--out", str(out)]) == 1
    assert "no node of the cluster has 1 GPU(s) of type H200" in capsys.readouterr().err and not out.exists()


def test_the_live_view_shows_every_lane_in_a_textual_pilot(cluster, tmp_path):
    import asyncio
    import types

    from kvtui.cli.cluster import lane_specs
    from kvtui.cluster import driver
    from kvtui.cluster.view import COLUMNS, LanesView
    from kvtui.io.scenario import load_scenario
    from kvtui.tui.cluster_view import ClusterApp

    c, gpu_nodes = cluster
    sp = tmp_path / "clu.toml"
    sp.write_text(SCENARIO)
    sc = load_scenario(sp, [])
    args = types.SimpleNamespace(fast=True, calibration=None, resume=None, allow_env=False, verbose=False)
    specs = lane_specs(args, sc, str(sp), [], ["baseline", "fp8-kv"])
    view = LanesView([(s.lane, s.mode) for s in specs])
    crun = driver.ClusterRun(ray, sc, specs, view)
    app = ClusterApp(view, crun, "clu", auto_exit=False)

    async def go():
        async with app.run_test(size=(160, 30)) as pilot:
            table = app.query_one("#lanes")
            assert table.row_count == 2
            deadline = time.monotonic() + 90
            while not app.done and time.monotonic() < deadline:
                await pilot.pause(0.2)
            assert app.done and app.failure is None
            rows = [[str(table.get_cell(k, col)) for col in COLUMNS] for k in ("L1", "L2")]
            return rows

    rows = asyncio.run(go())
    gpu_ids = {n.node_id[:12] for n in gpu_nodes}
    assert [r[1] for r in rows] == ["baseline", "fp8-kv"] and [r[2] for r in rows] == ["done", "done"], rows
    assert {r[3] for r in rows} <= gpu_ids and len({r[3] for r in rows}) == 2, rows  # two nodes
    assert all(r[5].startswith("GPU 0") and int(r[7]) > 0 and r[9] for r in rows), rows  # GPU, steps, knee
    assert all("tok/s" in r[8] for r in rows), rows  # the last step's figures


def _driver(sp: Path, out: Path, address: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kvtui", "run", str(sp), "--cluster", address, "--headless",
                             "--out", str(out), *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=_env())


def _read_until(proc: subprocess.Popen, needles: list[str], timeout: float) -> str:
    """The driver's output up to the moment every needle was seen (a thread reads it on)."""
    seen: list[str] = []
    done = threading.Event()

    def pump():
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if all(any(n in x for x in seen) for n in needles):
                done.set()
        done.set()

    threading.Thread(target=pump, daemon=True).start()
    done.wait(timeout)
    return "".join(seen)


@pytest.mark.parametrize("how", ["ctrl-c", "kill -9"])
def test_a_stopped_or_killed_driver_leaves_no_lane_on_any_node(cluster, tmp_path, how):
    c, _ = cluster
    sp = tmp_path / "clu.toml"
    sp.write_text(SCENARIO)
    out = tmp_path / "stop.json"
    modes = ["baseline", "fp8-kv"] if how == "ctrl-c" else ["baseline"]
    proc = _driver(sp, out, c.address, *LONG, *[f"--mode={m}" for m in modes])
    try:
        ready = [f"[{m}] ready in" for m in modes]
        seen = _read_until(proc, ready, 120)  # every lane's server up, measuring its first (long) step
        assert all(x in seen for x in ready), seen[-3000:]
        assert lane_processes()  # the lanes (and their servers) are there to be stopped
        if how == "ctrl-c":
            proc.send_signal(signal.SIGINT)
            rc = proc.wait(120)
            assert rc == 130
            doc = load_snapshot(out)  # every lane stopped, came back and was joined
            assert [m["name"] for m in doc["modes"]] == modes
            assert all(ln["rc"] is not None and ln["state"] == "stopped" for ln in doc["run"]["parallel"]["lanes"])
        else:
            proc.kill()
            proc.wait(10)
        left = wait_no_lane_processes(45)
        assert not left, left
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_node_lost_mid_lane_is_retried_on_another_and_the_other_lanes_kept(cluster, tmp_path, capsys):
    from kvtui.cli import cluster as cluster_cmd

    c, gpu_nodes = cluster
    sp = tmp_path / "clu.toml"
    sp.write_text(SCENARIO)
    out = tmp_path / "lost.json"
    killed: list[str] = []
    said: list[str] = []
    modes = ["baseline", "fp8-kv"]
    real_run_cluster = cluster_cmd.run_cluster

    def follow(view, crun):
        # The lanes as the TUI follows them; once both measure, the node of one (not the head's) goes:
        # its raylet and every process of that node are killed.
        box: dict = {}
        view.on_line = said.append
        t = threading.Thread(target=lambda: box.setdefault("wall", crun.run()), daemon=True)
        t.start()
        deadline = time.monotonic() + 90
        while crun.hub is None and time.monotonic() < deadline:
            time.sleep(0.05)
        # The hub is on the driver's node, whatever that node's load: a hub on the lost node would stop every lane.
        box["hub_node"] = ray.get(crun.hub.node_id.remote(), timeout=60)
        while time.monotonic() < deadline and not all(f"[{m}] ready in" in "\n".join(said) for m in modes):
            time.sleep(0.1)  # both servers up, measuring
        workers = {n.node_id: n for n in c.worker_nodes}
        row = next(r for r in view.rows.values() if r.node_id in workers)
        killed.extend([row.mode, row.node_id])
        c.remove_node(workers[row.node_id], allow_graceful=False)
        t.join(240)
        assert box["hub_node"] == ray.get_runtime_context().get_node_id() != row.node_id
        return box["wall"]

    sets = ["ramp.confirm=false"]
    code = real_run_cluster(_args(c.address, out, sets), _scenario(sp, sets), str(sp), sets, out, follow=follow)
    text = capsys.readouterr()
    assert code == 0, text.out[-3000:] + text.err[-3000:]
    doc = load_snapshot(out)
    lanes = {ln["mode"]: ln for ln in doc["run"]["parallel"]["lanes"]}
    lost, node = killed
    (other,) = set(lanes) - {lost}
    assert lanes[lost]["attempts"] == 2 and lanes[lost]["nodes"][0] == node
    assert lanes[lost]["node_id"] != node and lanes[lost]["rc"] == 0  # its second try ran elsewhere, whole
    assert lanes[other]["attempts"] == 1 and lanes[other]["rc"] == 0  # the other lane kept
    said_text = "\n".join(said)  # what the view said: the node lost, the lane retried elsewhere
    assert f"mode {lost} retried on node {lanes[lost]['node_id'][:12]}" in said_text
    assert f"try 2: node {node[:12]} was lost mid-lane" in said_text
    assert all(m["steps"] and m["complete"] and not m.get("error") for m in doc["modes"])
    assert not wait_no_lane_processes(30)  # the lost node's lane and server did not outlive it


def _args(address: str, out: Path, overrides: list[str]):
    import types

    return types.SimpleNamespace(cluster=address, out=str(out), fast=False, calibration=None, resume=None,
                                 allow_env=False, verbose=False, json=False, wide=False, modes=None,
                                 overrides=overrides)


def _scenario(sp: Path, overrides: list[str]):
    from kvtui.io.scenario import load_scenario

    return load_scenario(sp, overrides)
