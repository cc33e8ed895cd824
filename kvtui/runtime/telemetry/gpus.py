"""Which GPUs there are, and which processes hold their memory: the inventory a snapshot records,
the wait between modes until a stopped server's memory is free, and the GPU states `kvtui init`
and the pre-flight show. Every call degrades to a reason instead of raising."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, TypedDict

from kvtui import clock
from kvtui.runtime.telemetry.nvml_session import (
    _NVML_ERRORS,
    GIB,
    _describe,
    _init,
    _nvml,
    _shutdown,
    _text,
    _visible_filter,
    log,
)
from kvtui.runtime.telemetry.proctree import _pid_alive


class GpuInfo(TypedDict):
    index: int  # NVML index
    name: str
    uuid: str
    mem_total_gib: float


@dataclass
class Inventory:
    """The GPUs this process may use (after CUDA_VISIBLE_DEVICES), or why there are none."""

    available: bool
    reason: str | None = None  # e.g. "no GPU telemetry: NVML library not found (…)"
    driver_version: str | None = None
    cuda_version: str | None = None  # highest CUDA the driver supports, "12.8"
    gpus: list[GpuInfo] = field(default_factory=list)
    hidden: int = 0  # GPUs present but hidden by CUDA_VISIBLE_DEVICES


def _cuda_version() -> str | None:
    for fn_name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        fn = getattr(_nvml, fn_name, None)
        if fn is None:
            continue
        try:
            v = int(fn())
        except _NVML_ERRORS:
            continue
        return f"{v // 1000}.{(v % 1000) // 10}"
    return None


def _all_devices() -> list[tuple[int, Any, str]]:
    """(index, handle, uuid) of every GPU NVML sees. Raises NVML errors."""
    out = []
    for i in range(int(_nvml.nvmlDeviceGetCount())):
        h = _nvml.nvmlDeviceGetHandleByIndex(i)
        out.append((i, h, _text(_nvml.nvmlDeviceGetUUID(h))))
    return out


def gpu_inventory(env: Mapping[str, str] | None = None) -> Inventory:
    """List the visible GPUs. Never raises; `env` defaults to os.environ."""
    env = os.environ if env is None else env
    reason = _init()
    if reason:
        return Inventory(available=False, reason=reason)
    try:
        driver = None
        try:
            driver = _text(_nvml.nvmlSystemGetDriverVersion())
        except _NVML_ERRORS:
            pass
        cuda = _cuda_version()
        visible = _visible_filter(env.get("CUDA_VISIBLE_DEVICES"))
        gpus: list[GpuInfo] = []
        hidden = 0
        for i, h, uuid in _all_devices():
            if visible is not None and not visible(i, uuid):
                hidden += 1
                continue
            mem = _nvml.nvmlDeviceGetMemoryInfo(h)
            gpus.append(
                GpuInfo(index=i, name=_text(_nvml.nvmlDeviceGetName(h)), uuid=uuid, mem_total_gib=mem.total / GIB)
            )
    except _NVML_ERRORS as exc:
        return Inventory(available=False, reason=_describe(exc))
    except Exception as exc:
        return Inventory(available=False, reason=f"no GPU telemetry: {type(exc).__name__}: {exc}")
    finally:
        _shutdown()
    inv = Inventory(available=bool(gpus), driver_version=driver, cuda_version=cuda, gpus=gpus, hidden=hidden)
    if not gpus:
        if hidden:
            cvd = env.get("CUDA_VISIBLE_DEVICES")
            inv.reason = f"no GPU telemetry: no GPU visible (CUDA_VISIBLE_DEVICES={cvd!r} hides all {hidden})"
        else:
            inv.reason = "no GPU telemetry: NVML sees no GPU"
    return inv


# --- who holds GPU memory ---------------------------------------------------------------------


def _gpu_processes(handle: Any) -> dict[int, int | None]:
    """pid → used GPU memory in bytes (None: not available) for compute + graphics processes.

    A pid listed in both lists is counted once (the larger figure). Raises NVML errors.
    """
    procs: dict[int, int | None] = {}
    unsupported: BaseException | None = None
    answered = False
    for fn_name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            entries = getattr(_nvml, fn_name)(handle)
        except _nvml.NVMLError_NotSupported as exc:
            unsupported = exc
            continue
        answered = True
        for p in entries:
            used = getattr(p, "usedGpuMemory", None)
            prev = procs.get(p.pid)
            if p.pid not in procs or (used is not None and (prev is None or used > prev)):
                procs[int(p.pid)] = used if used is None else int(used)
    if not answered and unsupported is not None:
        raise unsupported  # neither list: "no processes" would be a lie
    return procs


def _foreign(pids: Iterable[int]) -> bool:
    """True if some NVML-reported pid does not exist here: NVML reports host pids, and this
    process runs in another PID namespace (a container), so pid matching cannot work."""
    return any(not os.path.exists(f"/proc/{p}") for p in pids)


# --- between modes ----------------------------------------------------------------------------


def wait_for_release(pids: set[int], timeout_s: float, poll_s: float = 0.5) -> bool:
    """Wait until none of `pids` holds GPU memory; True when released, False on timeout.

    True at once when NVML is unavailable (nothing to wait for that kvtui could see). If NVML
    fails mid-wait, or reports pids of another PID namespace (kvtui in a container, where
    pid matching cannot work), it falls back to waiting for `pids` to exit (the driver frees a
    process's memory as it exits).
    """
    pids = set(pids)
    if not pids:
        return True
    deadline = clock.monotonic() + max(0.0, timeout_s)
    poll_s = max(0.01, poll_s)
    if _init():
        return True
    nvml_ok = True
    try:
        while True:
            held = True
            if nvml_ok:
                try:
                    listed: dict[int, int | None] = {}
                    for _, h, _ in _all_devices():
                        listed.update(_gpu_processes(h))
                    if pids & listed.keys():
                        held = True
                    elif listed and _foreign(listed):
                        held = any(_pid_alive(p) for p in pids)
                    else:
                        held = False
                except _NVML_ERRORS as exc:
                    log.info("wait_for_release: %s; waiting for the processes to exit instead", _describe(exc))
                    nvml_ok = False
            if not nvml_ok:
                held = any(_pid_alive(p) for p in pids)
            if not held:
                return True
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                return False
            clock.sleep(min(poll_s, remaining))
    finally:
        _shutdown()


# --- before a run (kvtui init, the pre-flight) ------------------------------------------------


@dataclass
class GpuProcess:
    pid: int
    used_gib: float | None  # None: NVML does not say (no permission, or a MIG/vGPU)
    name: str  # the process's command, from NVML or /proc (empty when neither says)


@dataclass
class GpuState:
    """One visible GPU as a run is about to start on it: memory free now, who holds the rest,
    and its compute capability (what the precision modes need: FP8 needs 8.9, Ada/Hopper)."""

    index: int
    name: str
    uuid: str
    mem_total_gib: float
    mem_free_gib: float
    compute_capability: tuple[int, int] | None = None
    processes: list[GpuProcess] = field(default_factory=list)


def _process_name(pid: int) -> str:
    try:
        return _text(_nvml.nvmlSystemGetProcessName(pid)).strip()
    except Exception:  # NVML errors, or a pid of another namespace
        pass
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def gpu_states(env: dict[str, str] | None = None) -> tuple[Inventory, list[GpuState]]:
    """The inventory (visible GPUs, or why none) plus each visible GPU's free memory, compute
    capability and the processes holding its memory. Never raises: what NVML cannot answer for
    one GPU is left None/empty."""
    inv = gpu_inventory(env)
    if not inv.available or _init():
        return inv, []
    states: list[GpuState] = []
    try:
        for g in inv.gpus:
            h = _nvml.nvmlDeviceGetHandleByIndex(g["index"])
            mem = _nvml.nvmlDeviceGetMemoryInfo(h)
            st = GpuState(index=g["index"], name=g["name"], uuid=g["uuid"], mem_total_gib=mem.total / GIB,
                          mem_free_gib=mem.free / GIB)
            try:
                major, minor = _nvml.nvmlDeviceGetCudaComputeCapability(h)
                st.compute_capability = (int(major), int(minor))
            except _NVML_ERRORS:
                pass
            try:
                procs = _gpu_processes(h)
            except _NVML_ERRORS:
                procs = {}
            st.processes = [GpuProcess(pid, None if used is None else used / GIB, _process_name(pid))
                            for pid, used in sorted(procs.items(), key=lambda kv: -(kv[1] or 0))]
            states.append(st)
    except _NVML_ERRORS as exc:
        inv = Inventory(available=False, reason=_describe(exc))
        states = []
    finally:
        _shutdown()
    return inv, states
