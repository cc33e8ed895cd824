"""kvtui run --parallel: one mode per free device at once, the lanes joined into one snapshot.

What scripts/h200_lanes.sh and --resume did by hand. Each lane is a `kvtui run --headless
--mode NAME` of its own (its own engine, telemetry, load generator and snapshot), started with
CUDA_VISIBLE_DEVICES naming its device(s) (kvtui.explore.devices), so that nothing of one
lane's measurement runs in another's process. A lane that finishes takes the next mode: a
four-mode comparison on a four-GPU box takes the time of its slowest mode. Under tensor
parallelism a lane's NCCL keeps NVLink multicast off (NCCL_NVLS_ENABLE=0: on the shared
NVSwitch of a partitioned box it hung or failed to allocate).

Then the lanes' snapshots are joined (kvtui.explore.run.Run with `join`): every mode as its
lane left it, each with the device it ran on (`ran_on`), the run's environment listing every
lane's device, and a warning that the modes ran on different devices.

Stops: Ctrl-C reaches the lanes from the terminal (one process group); SIGTERM and SIGHUP to
this process are passed on to them; each lane stops its server and keeps what it measured, and
the join still runs. SIGKILL of this process: the lanes are registered with the reaper, whose
watchdog stops them (and each lane's own watchdog its server).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from kvtui import clock
from kvtui.errors import UsageError
from kvtui.io.scenario.schema import Scenario
from kvtui.runtime.procs import reaper


@dataclass
class Lane:
    devices: list[str]  # its CUDA_VISIBLE_DEVICES entries
    label: str
    proc: subprocess.Popen | None = None
    mode: str | None = None
    started: float = 0.0
    reader: threading.Thread | None = None
    ran: list[dict[str, Any]] = field(default_factory=list)  # {mode, rc, wall_s, snapshot, log}


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name)[:80] or "mode"


def lane_argv(path: str, mode: str, out: Path, args: Any, overrides: list[str]) -> list[str]:
    argv = [sys.executable, "-m", "kvtui", "run", path, "--headless", f"--mode={mode}", f"--out={out}"]
    for o in overrides:
        argv += ["--set", o]
    # The lane runs its one mode here, on a free port of its own.
    argv += ["--set", "server.parallel=false", "--set", "server.port=0"]
    for r in getattr(args, "resume", None) or []:
        argv.append(f"--resume={r}")
    if getattr(args, "calibration", None):  # the lane's predictions use the same calibration file
        argv.append(f"--calibration={args.calibration}")
    for flag, on in (("--fast", args.fast), ("--allow-env", getattr(args, "allow_env", False)),
                     ("--verbose", getattr(args, "verbose", False))):
        if on:
            argv.append(flag)
    return argv


def lane_env(scenario: Scenario, devices: list[str]) -> dict[str, str]:
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    env["PYTHONUNBUFFERED"] = "1"
    if scenario.server.tensor_parallel_size > 1:
        env.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off under TP (see the module's docstring)
    return env


class ParallelRun:
    def __init__(self, scenario: Scenario, path: str, out: Path, args: Any, overrides: list[str],
                 modes: list[str], lanes: list[list[str]], labels: dict[str, str], stream: TextIO | None = None):
        self.scenario, self.path, self.out, self.args, self.overrides = scenario, path, out, args, overrides
        self.pending = list(modes)
        self.lanes = [Lane(d, ", ".join(labels.get(x, x) for x in d)) for d in lanes[:max(1, len(modes))]]
        self.dir = out.with_name(out.stem + ".lanes")
        self.stream = stream if stream is not None else sys.stdout  # the stream of now, not of import time
        self.lock = threading.Lock()
        self.stop_reason: str | None = None

    # -- output ----------------------------------------------------------------------------
    def say(self, text: str) -> None:
        from kvtui.terminal import printable

        with self.lock:
            self.stream.write(printable(text) + "\n")
            self.stream.flush()

    def _pump(self, lane: Lane, proc: subprocess.Popen, log: Path) -> None:
        """A lane's output into its log file and, prefixed with its device, onto ours."""
        assert proc.stdout is not None
        from kvtui.errors import UsageError
        from kvtui.safeio import open_append

        sink = None
        try:
            sink = open_append(log, "lane log", binary=True)
        except (UsageError, OSError) as e:  # a node put there since _start checked: said; the lane is still read
            self.say(f"kvtui: lane {lane.label}: {e}; its output is shown here only")
        try:
            for raw in iter(proc.stdout.readline, b""):
                if sink is not None:
                    sink.write(raw)
                    sink.flush()
                self.say(f"({lane.label}) {raw.decode('utf-8', 'replace').rstrip()}")
        finally:
            if sink is not None:
                sink.close()

    # -- lanes -----------------------------------------------------------------------------
    def _start(self, lane: Lane, mode: str) -> None:
        i = sum(len(ln.ran) for ln in self.lanes)
        out = self.dir / f"{i:02d}-{_safe(mode)}.json"
        log = out.with_suffix(".log")
        from kvtui.safeio import check_output

        check_output(log, "lane log")  # a FIFO there would stop the lane's output, then the lane (the lane checks out)
        argv = lane_argv(self.path, mode, out, self.args, self.overrides)
        proc = subprocess.Popen(argv, env=lane_env(self.scenario, lane.devices), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, close_fds=True)
        reaper.register_pid(proc.pid, f"kvtui lane {lane.label} mode {mode}")
        lane.proc, lane.mode, lane.started = proc, mode, clock.monotonic()
        lane.ran.append({"mode": mode, "devices": lane.devices, "device": lane.label, "snapshot": str(out),
                         "log": str(log), "rc": None, "wall_s": None})
        lane.reader = threading.Thread(target=self._pump, args=(lane, proc, log), name=f"kvtui-lane-{i}", daemon=True)
        lane.reader.start()
        self.say(f"kvtui: lane {lane.label}: mode {mode} (CUDA_VISIBLE_DEVICES={','.join(lane.devices)}, log {log})")

    def _reap(self, lane: Lane) -> None:
        proc = lane.proc
        assert proc is not None
        rc = proc.wait()
        if lane.reader is not None:
            lane.reader.join(10)
        reaper.unregister_pid(proc.pid)
        lane.ran[-1].update(rc=rc, wall_s=round(clock.monotonic() - lane.started, 1))
        self.say(f"kvtui: lane {lane.label}: mode {lane.mode} ended (exit code {rc}) "
                 f"after {lane.ran[-1]['wall_s']:g} s")
        lane.proc, lane.mode = None, None

    def stop(self, reason: str) -> None:
        self.stop_reason = self.stop_reason or reason
        for lane in self.lanes:
            if lane.proc is not None and lane.proc.poll() is None:
                try:
                    lane.proc.send_signal(signal.SIGTERM)
                except OSError:
                    pass

    def run_lanes(self) -> float:
        """Every pending mode through the lanes; returns the wall time."""
        import stat

        try:  # the lanes' folder: a real directory of ours, never a link or a device (kvtui.safeio)
            st = os.lstat(self.dir)
            if not stat.S_ISDIR(st.st_mode):
                raise UsageError(f"{self.dir}: cannot keep the lanes' snapshots there: it is not a directory "
                                 "(a link, a file or a device); remove it or choose another --out")
        except FileNotFoundError:
            pass
        self.dir.mkdir(parents=True, exist_ok=True)
        t0 = clock.monotonic()
        self.say(f"kvtui: {len(self.pending)} mode(s) on {len(self.lanes)} lane(s): "
                 + "; ".join(lane.label for lane in self.lanes))
        try:
            while True:
                for lane in self.lanes:
                    if lane.proc is not None and lane.proc.poll() is not None:
                        self._reap(lane)
                    if lane.proc is None and self.pending and self.stop_reason is None:
                        self._start(lane, self.pending.pop(0))
                if all(lane.proc is None for lane in self.lanes) and (not self.pending or self.stop_reason):
                    break
                clock.sleep(0.1)
        finally:
            for lane in self.lanes:  # an exception here: no lane outlives us
                if lane.proc is not None and lane.proc.poll() is None:
                    lane.proc.send_signal(signal.SIGTERM)
                if lane.proc is not None:
                    self._reap(lane)
        return clock.monotonic() - t0

    # -- the join --------------------------------------------------------------------------
    def lane_docs(self) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """The lanes' snapshots (a journal where a lane was cut before finalising), and why a mode has none."""
        return lane_docs([r for lane in self.lanes for r in lane.ran], self.pending, self.stop_reason)


def lane_docs(ran: list[dict[str, Any]], pending: list[str] | None = None,
              stop_reason: str | None = None) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The snapshots of lanes that ran ({mode, device, snapshot, log, rc}: a journal where a lane was cut
    before finalising), and why a mode has none; `pending`: modes no lane started."""
    from kvtui.io.snapshot.file import load_snapshot, paths_for

    docs: list[dict[str, Any]] = []
    missing: dict[str, str] = {}
    for r in ran:
        snap = Path(r["snapshot"])
        journal = paths_for(snap)[1]
        src = snap if snap.exists() else journal if journal.exists() else None
        if src is None:
            missing[r["mode"]] = (f"its lane ({r['device']}) exited with code {r['rc']} before writing a "
                                  f"snapshot; its log: {r['log']}")
            continue
        try:
            d = load_snapshot(src)
        except Exception as e:  # a lane's damaged file must not lose the other lanes' modes
            missing[r["mode"]] = f"its lane's snapshot {src} cannot be read: {e}"
            continue
        if r["rc"] not in (0, None):
            for m in d.get("modes") or []:
                if m.get("name") == r["mode"] and not m.get("complete") and not m.get("error"):
                    # The lane died inside the mode (its journal has no word of why): its log's last line.
                    m["error"] = {"kind": "lane", "message": f"its lane ({r['device']}) exited with code "
                                  f"{r['rc']}: {_last_line(Path(r['log']))} (log: {r['log']})"}
        docs.append(d)
    for m in pending or []:
        missing.setdefault(m, f"not started: {stop_reason or 'no lane was free'}")
    return docs, missing


def _last_line(log: Path) -> str:
    try:
        lines = [x.strip() for x in log.read_text(encoding="utf-8", errors="replace").splitlines() if x.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(empty log)"


def lane_modes(args: Any, scenario: Scenario) -> list[str]:
    """The modes that become lanes: those named by --mode (each checked), else every mode."""
    names = args.modes or [m.name for m in scenario.modes]
    unknown = [n for n in names if n not in {m.name for m in scenario.modes}]
    if unknown:
        raise UsageError(f"--mode {unknown[0]}: no such mode in {scenario.source or 'the scenario'} (modes: "
                         f"{', '.join(m.name for m in scenario.modes)})")
    return names


def run_parallel(args: Any, scenario: Scenario, path: str, overrides: list[str], out: Path) -> int:
    """`kvtui run --parallel --headless`: the lanes, then the join; the exit code."""
    from kvtui.explore.devices import plan_lanes

    if scenario.server.engine == "external":
        raise UsageError("--parallel: the external engine is one server already running; parallel lanes start "
                         "their own (server.engine = \"vllm\" or \"sim\")")
    names = lane_modes(args, scenario)
    plan = plan_lanes(scenario)
    for why in plan.left_out:
        print(f"kvtui: --parallel: left out {why}", file=sys.stderr)
    if not plan.lanes:
        print(f"kvtui: --parallel: no free device for a lane ({'; '.join(plan.left_out) or 'none seen'})",
              file=sys.stderr)
        return 1
    if len(plan.lanes) == 1:
        print("kvtui: --parallel: one free device: the modes run one after another on it", file=sys.stderr)
    json_out = bool(getattr(args, "json", False))  # --json: the answer alone on stdout, the rest on stderr
    text_out = sys.stderr if json_out else sys.stdout
    pr = ParallelRun(scenario, path, out, args, overrides, names, plan.lanes, plan.labels, stream=text_out)

    def on_signal(signum, frame):
        name = signal.Signals(signum).name
        pr.stop(f"stopped by {name}")
        print(f"\nkvtui: {name}: the lanes stop and keep what they measured; then they are joined…", file=sys.stderr)

    handled = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        handled.append(signal.SIGHUP)
    old = {s: signal.signal(s, on_signal) for s in handled}
    try:
        wall = pr.run_lanes()
        docs, missing = pr.lane_docs()
        lanes_info = [dict(r) for lane in pr.lanes for r in lane.ran]
        return join_lanes(args, scenario, out, names, docs, missing, lanes_info, wall, pr.dir, pr.stop_reason,
                          text_out)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def join_lanes(args: Any, scenario: Scenario, out: Path, names: list[str], docs: list[dict[str, Any]],
               missing: dict[str, str], lanes_info: list[dict[str, Any]], wall: float, lanes_dir: Path,
               stop_reason: str | None, text_out: TextIO, extra: dict[str, Any] | None = None) -> int:
    """The lanes' snapshots joined into one (`--parallel`, `--cluster`), the answer printed; the exit code."""
    from kvtui.cli.headless_print import HeadlessPrinter, print_summary
    from kvtui.explore.run import Run

    json_out = bool(getattr(args, "json", False))
    info = {"lanes": lanes_info, "wall_s": round(wall, 1),
            "lanes_wall_s_sum": round(sum(r["wall_s"] or 0 for r in lanes_info), 1), **(extra or {})}
    join = Run(scenario, out, modes=names, listener=_join_listener(HeadlessPrinter(scenario, out=text_out)),
               resume=docs, fast=args.fast, join=missing, join_info=info, publish=False)
    doc = join.run()
    if json_out:  # as a sequential run's --json: the answer, with the run it answers
        import json

        from kvtui.cli.headless_print import answer_json

        json.dump(answer_json(doc, out), sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    else:
        print_summary(doc, wide=bool(getattr(args, "wide", False)))
    for w in doc.get("warnings") or []:
        if "devices" in w or "different GPUs" in w:
            print(f"kvtui: warning: {w}", file=text_out)
    print(f"\nkvtui: {len(lanes_info)} lane run(s) in {wall:.0f} s, joined: snapshot {out} "
          f"(records: {out.with_name(out.stem + '.records.jsonl')}; lanes: {lanes_dir})", file=text_out)
    from kvtui.report.outcome import stopped_line

    stopped = stopped_line(doc)
    if stopped:
        print(f"kvtui: {stopped}", file=sys.stderr)
    if stop_reason:
        return 130
    failed = [m for m in doc["modes"] if m.get("error")] or [r for r in lanes_info if r["rc"] not in (0, None)]
    return 1 if failed else 0


def _join_listener(printer: Any):
    """The join measures nothing: only its warnings and errors are news (the lanes printed the rest)."""
    def listener(ev: Any) -> None:
        if ev.kind in ("warning", "error"):
            printer(ev)
    return listener
