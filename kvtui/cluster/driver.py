"""The driver of `kvtui run --cluster`: connect, probe the nodes, submit the lanes, follow them.

- Connect: `ray://HOST:PORT` (Ray Client), a `HOST:PORT` of a cluster's head, or `auto`
  (RAY_ADDRESS, else a cluster started on this machine with `ray start`).
- Probe: every live node that could take a lane (enough GPUs, the accelerator type the scenario
  asks for) runs a tiny task pinned to it that says its kvtui (version and a digest of its code),
  its vLLM and its Python. A node with another kvtui, or (a real engine) without vLLM or with
  another vLLM than the scenario asks (`server.vllm_version`; unset: the nodes must agree), is
  refused before any lane starts, one line naming it.
- Lanes: a Ray task each (kvtui.cluster.lane.run_lane), asking `num_gpus` = tensor_parallel_size
  (and `accelerator_type:X` where asked), `max_retries=1`: a lane whose node is lost is run once
  more where one fits; lost twice (or no node left that fits), it is named lost. Lanes Ray cannot
  place yet are queued and start as finished lanes free their GPUs.
- Follow: the lanes' events come through the hub actor (kvtui.cluster.hub) into a LanesView;
  a stop (Ctrl-C) goes to every lane through the hub, the queued ones are cancelled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kvtui import clock
from kvtui.cluster.view import LanesView
from kvtui.errors import UsageError
from kvtui.io.scenario.schema import Scenario

PROBE_TIMEOUT_S = 120.0
STOP_WAIT_S = 90.0  # after a stop, how long lanes get to stop their servers and send back what they have
NODES_EVERY_S = 1.0


class ClusterRefused(Exception):
    """The cluster cannot run this scenario (one line each): nothing was started."""

    def __init__(self, lines: list[str]):
        super().__init__("; ".join(lines))
        self.lines = lines


def ray_module() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("--cluster needs Ray: pip install 'kvtui[ray]'") from None
    return ray


def connect(address: str) -> Any:
    """ray.init for this address (a Ray already initialised in this process is used as it is)."""
    ray = ray_module()
    if ray.is_initialized():
        return ray
    if address == "auto":
        addr = os.environ.get("RAY_ADDRESS") or "auto"
    elif address.startswith("ray://") or ":" in address:
        addr = address
    else:
        raise UsageError(f"--cluster {address}: expected ray://HOST:PORT, HOST:PORT or auto")
    try:
        ray.init(address=addr, log_to_driver=False, logging_level="WARNING", namespace="kvtui")
    except Exception as e:  # no cluster there: one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ClusterRefused([f"cannot connect to the Ray cluster at {addr}: {first}"]) from None
    return ray


def lane_resources(scenario: Scenario) -> tuple[float, dict[str, float]]:
    gpus = float(max(1, scenario.server.tensor_parallel_size))
    acc = scenario.server.accelerator_type
    return gpus, ({f"accelerator_type:{acc}": 0.001} if acc else {})


def fitting_nodes(ray: Any, scenario: Scenario) -> list[dict[str, Any]]:
    gpus, extra = lane_resources(scenario)
    out = []
    for n in ray.nodes():
        res = n.get("Resources") or {}
        if n.get("Alive") and res.get("GPU", 0) >= gpus and all(res.get(k, 0) > 0 for k in extra):
            out.append(n)
    return out


def node_name(n: dict[str, Any]) -> str:
    return f"node {str(n.get('node_id') or n.get('NodeID'))[:12]} ({n.get('host') or n.get('NodeManagerHostname')})"


def probe(ray: Any, scenario: Scenario, warn: Any = None) -> list[dict[str, Any]]:
    """The facts of every node that could take a lane; ClusterRefused where one must not. A node that
    left the cluster between the listing and its probe (dead now, or its task unschedulable there) is
    left out and said (`warn`): Ray places no lane on it; one alive that does not answer refuses."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    import kvtui
    from kvtui.cluster import lane

    nodes = fitting_nodes(ray, scenario)
    gpus, extra = lane_resources(scenario)
    if not nodes:
        seen = "; ".join(f"{str(n['NodeID'])[:12]} ({n.get('NodeManagerHostname')}): "
                         f"{(n.get('Resources') or {}).get('GPU', 0):g} GPU" for n in ray.nodes() if n.get("Alive"))
        want = f"{gpus:g} GPU(s)" + (f" of type {scenario.server.accelerator_type}" if extra else "")
        raise ClusterRefused([f"no node of the cluster has {want} for a lane (nodes: {seen or 'none'})"])
    task = ray.remote(lane.node_facts)
    refs = [task.options(num_cpus=0, num_gpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
        node_id=n["NodeID"], soft=False)).remote() for n in nodes]
    facts: list[dict[str, Any]] = []
    bad: list[str] = []
    gone: list[str] = []
    for n, ref in zip(nodes, refs):
        try:
            facts.append(ray.get(ref, timeout=PROBE_TIMEOUT_S))
        except Exception as e:
            line = (f"node {str(n['NodeID'])[:12]} ({n.get('NodeManagerHostname')}): does not answer "
                    f"({type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''})")
            alive = {x.get("NodeID") for x in ray.nodes() if x.get("Alive")}
            if type(e).__name__ == "TaskUnschedulableError" or n["NodeID"] not in alive:
                gone.append(line + ": it left the cluster, no lane goes there")
            else:
                bad.append(line)
    if not facts and not bad:
        bad = gone  # no node left to take a lane
    elif gone and warn is not None:
        for line in gone:
            warn(line)
    bad += refusals(facts, scenario, kvtui.__version__, lane.kvtui_digest())
    if bad:
        raise ClusterRefused(bad)
    return facts


def refusals(facts: list[dict[str, Any]], scenario: Scenario, version: str, digest: str) -> list[str]:
    """One line per node that must not take a lane (its reasons together): another kvtui than the
    driver's (`version`, `digest`); for a real engine, no vLLM, or another vLLM than the scenario
    asks (or, where it asks none, than the other nodes)."""
    why: dict[str, list[str]] = {}
    for f in facts:
        if f["kvtui_version"] != version:
            why.setdefault(node_name(f), []).append(f"kvtui {f['kvtui_version']}, the driver runs {version}: "
                                                    "install the driver's kvtui there")
        elif f["kvtui_digest"] != digest:
            why.setdefault(node_name(f), []).append(f"another kvtui build than the driver's (version {version}, "
                                                    "other code): install the driver's kvtui there")
    if scenario.server.engine != "sim":
        asked = scenario.server.vllm_version
        have = [f for f in facts if f.get("vllm_version")]
        for f in facts:
            if not f.get("vllm_version"):
                why.setdefault(node_name(f), []).append(f"no vLLM installed (server.engine = "
                                                        f"\"{scenario.server.engine}\")")
            elif asked and not _same_version(f["vllm_version"], asked):
                why.setdefault(node_name(f), []).append(f"vLLM {f['vllm_version']}, the scenario asks for {asked} "
                                                        "(server.vllm_version)")
        if not asked and len({f["vllm_version"] for f in have}) > 1:
            first = have[0]
            for f in have[1:]:
                if f["vllm_version"] != first["vllm_version"]:
                    why.setdefault(node_name(f), []).append(
                        f"vLLM {f['vllm_version']}, {node_name(first)} has {first['vllm_version']}: set "
                        "server.vllm_version to the one to measure")
    return [f"{node}: {'; '.join(reasons)}" for node, reasons in why.items()]


def _same_version(have: str, asked: str) -> bool:
    """'0.26' asks for any 0.26.x; '0.26.0' for that one (a local tag, +cpu, is not a version of its own)."""
    h = have.split("+")[0].split(".")
    a = asked.split("+")[0].split(".")
    return h[:len(a)] == a


@dataclass
class LaneSpec:
    lane: str
    mode: str
    spec: dict[str, Any]
    ref: Any = None
    result: dict[str, Any] | None = None
    failure: str = ""  # lost / cancelled: why
    state: str = "queued"
    extra: dict[str, Any] = field(default_factory=dict)


class ClusterRun:
    """The lanes on the cluster, followed until every one ended; the view shows them as they go."""

    def __init__(self, ray: Any, scenario: Scenario, lanes: list[LaneSpec], view: LanesView):
        self.ray, self.scenario, self.lanes, self.view = ray, scenario, lanes, view
        self.stop_reason: str | None = None
        self._stop_sent_at: float | None = None
        self.hub: Any = None
        self.wall_s = 0.0

    def stop(self, reason: str) -> None:
        """Ask every lane to stop (safe from a signal handler: the loop sends it)."""
        self.stop_reason = self.stop_reason or reason

    def _submit(self) -> None:
        from kvtui.cluster import lane as lane_mod
        from kvtui.cluster.hub import Hub

        ray = self.ray
        try:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            # The hub lives and dies with the driver's node, never elsewhere: a lane that cannot reach it
            # stops (the driver is gone). A soft affinity let Ray place it on another node when the
            # driver's was busy, and losing that node then stopped every lane.
            here = ray.get_runtime_context().get_node_id()
            strategy: Any = NodeAffinitySchedulingStrategy(node_id=here, soft=False) if here else "DEFAULT"
        except Exception:
            strategy = "DEFAULT"
        self.hub = ray.remote(Hub).options(num_cpus=0, scheduling_strategy=strategy).remote()
        ray.get(self.hub.ping.remote(), timeout=PROBE_TIMEOUT_S)
        gpus, extra = lane_resources(self.scenario)
        task = ray.remote(lane_mod.run_lane)
        for ln in self.lanes:
            opts = task.options(num_gpus=gpus, num_cpus=0, resources=extra or None, max_retries=1,
                                retry_exceptions=False, name=f"kvtui-lane-{ln.lane}-{ln.mode}")
            ln.ref = opts.remote(ln.spec, self.hub)

    def _drain(self) -> None:
        try:
            events = self.ray.get(self.hub.drain.remote(), timeout=30)
        except Exception:
            return
        for ev in events:
            ln = next((x for x in self.lanes if x.lane == ev.get("lane")), None)
            if ln is not None and ev.get("kind") == "started":
                ln.state = "running"
            self.view.apply(ev)

    def _watch_nodes(self) -> None:
        """A running lane whose node has gone: said at once (Ray runs it again where it fits)."""
        try:
            alive = {n["NodeID"] for n in self.ray.nodes() if n.get("Alive")}
        except Exception:
            return
        for ln in self.lanes:
            row = self.view.rows[ln.lane]
            if ln.state == "running" and row.node_id and row.node_id not in alive:
                ln.state = "retrying"
                more = "run again where a GPU fits" if row.attempt < 2 else "no try left"
                self.view.set_state(ln.lane, "retrying" if row.attempt < 2 else "lost",
                                    say=f"kvtui: lane {ln.lane}: node {row.node_id[:12]} ({row.host}) lost mid-lane: "
                                        f"{more}")

    def _finish(self, ln: LaneSpec) -> None:
        ray = self.ray
        row = self.view.rows[ln.lane]
        try:
            ln.result = ray.get(ln.ref)
        except Exception as e:
            from ray.exceptions import TaskCancelledError

            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            if isinstance(e, TaskCancelledError):
                ln.failure = f"not started: {self.stop_reason or 'cancelled'}"
                self.view.set_state(ln.lane, "stopped", why=ln.failure)
            else:
                nodes = ", ".join(n[:12] for n in row.nodes) or "no node"
                ln.failure = (f"lost: its node was lost and it could not be run again ({type(e).__name__}: {first}; "
                              f"ran on {nodes})")
                self.view.set_state(ln.lane, "lost", why=ln.failure, say=f"kvtui: lane {ln.lane}: mode {ln.mode} "
                                                                         f"{ln.failure}")
            ln.state = "ended"
            return
        ln.state = "ended"
        r = ln.result
        if r.get("stopped") and r.get("rc") is None:
            ln.failure = f"not started: {self.stop_reason or 'stopped'}"
            self.view.set_state(ln.lane, "stopped", why=ln.failure)
            return
        state = "stopped" if r.get("stopped") else "done" if r.get("rc") == 0 else "failed"
        self.view.set_state(ln.lane, state, say=f"kvtui: lane {ln.lane}: mode {ln.mode} ended (exit code "
                                                f"{r.get('rc')}) after {r.get('wall_s')} s on node "
                                                f"{str(r.get('node_id'))[:12]} ({r.get('host')})")

    def run(self, tick: Callable[[], None] | None = None) -> float:
        """Submit, follow, return the wall time. `tick`: called each turn (the TUI redraws)."""
        ray = self.ray
        t0 = clock.monotonic()
        self._submit()
        last_nodes = 0.0
        try:
            while any(ln.state != "ended" for ln in self.lanes):
                refs = [ln.ref for ln in self.lanes if ln.state != "ended"]
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0.25)
                self._drain()
                if clock.monotonic() - last_nodes > NODES_EVERY_S:
                    self._watch_nodes()
                    last_nodes = clock.monotonic()
                for ln in self.lanes:
                    if ln.state != "ended" and ln.ref in ready:
                        self._finish(ln)
                if self.stop_reason and self._stop_sent_at is None:
                    self._stop_sent_at = clock.monotonic()
                    self.hub.stop.remote(self.stop_reason)
                    for ln in self.lanes:  # not begun: never begin
                        if ln.state == "queued":
                            ray.cancel(ln.ref, force=False)
                if self._stop_sent_at is not None and clock.monotonic() - self._stop_sent_at > STOP_WAIT_S:
                    for ln in self.lanes:  # a lane that did not stop in time: its worker goes, its watchdog acts
                        if ln.state != "ended":
                            ray.cancel(ln.ref, force=True)
                    self._stop_sent_at = clock.monotonic() + 3600  # once
                if tick is not None:
                    tick()
            self._drain()
        finally:
            if any(ln.state != "ended" for ln in self.lanes):  # an exception here: no lane outlives us
                try:
                    self.hub.stop.remote(self.stop_reason or "the driver failed")
                except Exception:
                    pass
            else:  # every lane has ended: the hub is no longer needed
                try:
                    ray.kill(self.hub)
                except Exception:
                    pass
            self.wall_s = clock.monotonic() - t0
        return self.wall_s

    # -- the lanes' files on the driver ----------------------------------------------------
    def bring_back(self, lanes_dir: Path) -> list[dict[str, Any]]:
        """Each lane's snapshot, records and log under lanes_dir/NN-mode/; the lane entries of the join."""
        from kvtui.io.snapshot.file import atomic_write

        ran: list[dict[str, Any]] = []
        for i, ln in enumerate(self.lanes):
            row = self.view.rows[ln.lane]
            d = lanes_dir / f"{i:02d}-{_safe(ln.mode)}"
            entry: dict[str, Any] = {"mode": ln.mode, "lane": ln.lane, "rc": None, "wall_s": None,
                                     "snapshot": str(d / "lane.json"), "log": str(d / "lane.log"),
                                     "device": row.host or "no node", "devices": [], "attempts": row.attempt,
                                     "nodes": row.nodes, "state": row.state}
            r = ln.result
            if r is None or r.get("rc") is None:
                entry["failure"] = ln.failure or row.error
                ran.append(entry)
                continue
            d.mkdir(parents=True, exist_ok=True)
            for name, key in (("lane.json", "snapshot_text"), ("lane.json.journal", "journal_text"),
                              ("lane.records.jsonl", "records_text"), ("lane.log", "log_text")):
                if r.get(key) is not None:
                    atomic_write(d / name, r[key])
            entry.update(rc=r["rc"], wall_s=r["wall_s"], node_id=r["node_id"], host=r["host"],
                         devices=r.get("gpu_ids") or [], gpu_names=r.get("gpu_names") or [],
                         gpu_uuids=r.get("gpu_uuids") or [], vllm_version=r.get("vllm_version"),
                         device=f"{r['host']} node {str(r['node_id'])[:12]} "
                                f"GPU {','.join(r.get('gpu_ids') or []) or '-'}")
            if r.get("records_on_node"):
                entry["records_on_node"] = f"{r['host']}:{r['records_on_node']}"
            if r.get("node_dir"):
                entry["node_dir"] = f"{r['host']}:{r['node_dir']}"
            ran.append(entry)
        return ran


def _safe(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._+-]", "_", name)[:80] or "mode"


def mark_lane_docs(docs: list[dict[str, Any]], ran: list[dict[str, Any]]) -> None:
    """Each lane's snapshot says the Ray node, host, GPUs and vLLM it ran on (its modes' `ran_on` too)."""
    by_path = {str(Path(r["snapshot"])): r for r in ran}
    for d in docs:
        p = str(d.get("_path") or "")
        r = by_path.get(p) or by_path.get(p[:-len(".journal")] if p.endswith(".journal") else p)
        if r is None or not r.get("node_id"):
            continue
        node = {"ray_node_id": r["node_id"], "host": f"{r['host']} (ray node {str(r['node_id'])[:12]})",
                "vllm_version": r.get("vllm_version")}
        env = d.setdefault("environment", {})
        env.update(node)
        if r.get("gpu_uuids") and not env.get("gpu_uuids"):
            env["gpu_uuids"], env["gpu_names"] = r["gpu_uuids"], r.get("gpu_names") or env.get("gpu_names")
        for m in d.get("modes") or []:
            ro = m.setdefault("ran_on", {}) if isinstance(m.get("ran_on"), dict) or m.get("ran_on") is None else {}
            ro.update(node)
            if r.get("gpu_uuids") and not ro.get("gpu_uuids"):
                ro["gpu_uuids"], ro["gpu_names"] = r["gpu_uuids"], r.get("gpu_names")
            if not ro.get("gpu_uuids") and r.get("devices"):  # the sim's: its device numbers on that node
                ro["gpu_indices"] = [int(x) for x in r["devices"] if str(x).isdigit()]
                ro["gpu_uuids"] = [f"{str(r['node_id'])[:12]}/GPU-{x}" for x in r["devices"]]


def gpu_type_warning(ran: list[dict[str, Any]]) -> str | None:
    types: dict[str, list[str]] = {}
    for r in ran:
        if r.get("gpu_names"):
            types.setdefault(", ".join(r["gpu_names"]), []).append(r["mode"])
    if len(types) > 1:
        return ("the modes ran on different GPU types: " + "; ".join(f"{t} ({', '.join(ms)})" for t, ms in
                                                                      types.items())
                + ": their figures compare the GPUs as much as the modes")
    return None
