"""GPU telemetry through NVML (the `nvidia-ml-py` distribution, module `pynvml`).

NVML calls block (tens of µs to, on a busy or sick driver, seconds), so sampling runs on a
background thread. Everything here degrades to a clear "no GPU telemetry: <reason>" state
instead of raising: no NVML library (a laptop, CI), no driver, no permission, a GPU that falls
off the bus mid-run.

GPU indices are NVML's (PCI bus order). CUDA's default order is "fastest first"; the two agree
when `CUDA_DEVICE_ORDER=PCI_BUS_ID` (or on boxes of identical GPUs, in practice). UUIDs in
`CUDA_VISIBLE_DEVICES` are unambiguous.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, TypedDict

from kvtui.telemetry.types import GpuSample

log = logging.getLogger(__name__)

try:  # nvidia-ml-py installs the module `pynvml`
    import pynvml as _nvml
except Exception as _exc:  # pragma: no cover - the package is a hard dependency
    _nvml = None
    _IMPORT_ERROR: str | None = f"{type(_exc).__name__}: {_exc}"
else:
    _IMPORT_ERROR = None

GIB = float(2**30)

# Errors that mean "NVML cannot answer" (never a bug of ours): NVMLError and its generated
# subclasses, and pynvml's NVMLLibraryMismatchError (an old libnvidia-ml without a function).
if _nvml is not None:
    _NVML_ERRORS: tuple[type[BaseException], ...] = (_nvml.NVMLError,) + tuple(
        c for c in (getattr(_nvml, "NVMLLibraryMismatchError", None),) if c is not None
    )
else:  # pragma: no cover
    _NVML_ERRORS = (OSError,)

# Clock event ("throttle") reason bits → short names. Bit values are NVML's ABI.
THROTTLE_REASONS: dict[int, str] = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}


def throttle_names(mask: int) -> list[str]:
    """Names of the reason bits set in an NVML clock-event mask (unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    rest = mask & ~sum(THROTTLE_REASONS)
    if rest:
        names.append(f"0x{rest:x}")
    return names


def _describe(exc: BaseException) -> str:
    """A one-line reason for an NVML failure, starting with "no GPU telemetry: "."""
    if _nvml is not None:
        known = {
            "NVMLError_LibraryNotFound": "NVML library not found (libnvidia-ml.so.1: no NVIDIA driver here)",
            "NVMLError_DriverNotLoaded": "NVIDIA driver not loaded",
            "NVMLError_NoPermission": "no permission to query NVML",
            "NVMLError_LibRmVersionMismatch": "NVML/driver version mismatch (reboot after a driver update?)",
            "NVMLError_GpuIsLost": "GPU is lost (fell off the bus)",
            "NVMLError_Uninitialized": "NVML not initialised",
        }
        what = known.get(type(exc).__name__)
        if what:
            return f"no GPU telemetry: {what}"
        if isinstance(exc, _nvml.NVMLError):
            try:
                text = str(exc)
            except Exception:
                text = type(exc).__name__
            return f"no GPU telemetry: NVML error: {text}"
    return f"no GPU telemetry: {type(exc).__name__}: {exc}"


# --- init / shutdown --------------------------------------------------------------------------


def _init() -> str | None:
    """nvmlInit(); None on success, else the reason. pynvml reference-counts init/shutdown."""
    if _nvml is None:
        return f"no GPU telemetry: cannot import pynvml ({_IMPORT_ERROR})"
    try:
        _nvml.nvmlInit()
    except _NVML_ERRORS as exc:
        return _describe(exc)
    except Exception as exc:  # ctypes oddities; never into the caller
        return f"no GPU telemetry: {type(exc).__name__}: {exc}"
    return None


def _shutdown() -> None:
    try:
        _nvml.nvmlShutdown()
    except Exception:
        pass


def _text(x: Any) -> str:
    return x.decode(errors="replace") if isinstance(x, bytes) else str(x)


# --- which GPUs -------------------------------------------------------------------------------


def _visible_filter(env: str | None) -> Callable[[int, str], bool] | None:
    """From CUDA_VISIBLE_DEVICES: a predicate (nvml index, uuid) → visible, or None (all).

    Entries are indices or UUIDs (`GPU-…`, a unique prefix is enough, as CUDA accepts). Like
    CUDA, parsing stops at the first invalid entry; an empty value or `-1` hides every GPU.
    MIG entries (`MIG-…`) are not resolved to their parent GPU: they hide nothing here.
    """
    if env is None:
        return None
    indices: set[int] = set()
    uuids: list[str] = []
    for raw in env.split(","):
        item = raw.strip()
        if not item:
            break
        if item.startswith("MIG-"):
            return None
        if item.startswith("GPU-"):
            uuids.append(item.lower())
            continue
        try:
            i = int(item)
        except ValueError:
            break
        if i < 0:
            break
        indices.add(i)

    def visible(index: int, uuid: str) -> bool:
        u = uuid.lower()
        return index in indices or any(u.startswith(p) for p in uuids)

    return visible


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


def gpu_inventory(env: dict[str, str] | None = None) -> Inventory:
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


# --- processes --------------------------------------------------------------------------------


def process_tree(pid: int) -> set[int]:
    """`pid` and all its descendants, from /proc (one scan of /proc/*/stat).

    Empty when `pid` does not exist. Processes re-parented away (daemonised, or Ray workers
    started by a raylet) are not found.
    """
    children: dict[int, list[int]] = {}
    exists = False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        child = int(name)
        if child == pid:
            exists = True
        # "pid (comm) state ppid …" — comm may hold spaces and parentheses
        try:
            ppid = int(stat[stat.rindex(b")") + 2 :].split(None, 2)[1])
        except (ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(child)
    if not exists:
        return set()
    tree = {pid}
    stack = [pid]
    while stack:
        for c in children.get(stack.pop(), ()):
            if c not in tree:
                tree.add(c)
                stack.append(c)
    return tree


def process_tree_provider(pid: int, max_age_s: float = 5.0) -> Callable[[], set[int]]:
    """A pids_provider for NvmlSampler: :func:`process_tree` of `pid`, rescanned at most every
    `max_age_s` seconds. A /proc scan costs ~1-2 ms (about 10× the NVML calls of a tick on one
    GPU); vLLM's process tree changes only while it starts and stops. Thread-safe."""
    lock = threading.Lock()
    state: dict[str, Any] = {"at": None, "tree": set()}

    def provider() -> set[int]:
        now = time.monotonic()
        with lock:
            if state["at"] is None or now - state["at"] >= max_age_s:
                state["tree"] = process_tree(pid)
                state["at"] = now
            return set(state["tree"])

    return provider


def _pid_alive(pid: int) -> bool:
    """True while `pid` exists in this PID namespace and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    try:
        return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z"
    except ValueError:
        return True


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


# --- the sampler ------------------------------------------------------------------------------


class _Unavailable(Exception):
    pass


class NvmlSampler:
    """Samples every visible GPU (and every GPU the server's processes use) every `interval_s`.

    ``on_sample(list[GpuSample])`` and ``on_unavailable(reason)`` are called **from the sampler
    thread**: a UI must marshal them to its own thread (Textual: ``app.call_from_thread`` or
    ``post_message``). An exception raised by a callback is logged and kept in
    ``callback_error``; sampling goes on.

    ``latest()`` returns the last tick's samples (thread-safe). When NVML is missing or fails —
    at init or mid-run, on any NVML call that is not an optional figure — the sampler releases
    NVML, sets ``available = False`` and ``reason = "no GPU telemetry: …"``, calls
    ``on_unavailable`` once, and its thread ends (it never retries in a loop). Optional figures
    a GPU does not support (power, clocks, temperature, throttle reasons, utilisation,
    per-process memory) are None and not asked again.

    ``proc_mem_gib`` sums the usedGpuMemory of the compute and graphics processes whose pid is
    in ``pids_provider()``. It is None when no provider is given, when NVML does not report
    per-process memory, or when NVML's pids belong to another PID namespace (kvtui in a
    container: ``notes`` then says so).

    ``used`` memory is NVML's memory info v2 (as nvidia-smi shows it), v1 where the driver lacks it.

    Cost (measured on an H200, driver 580): memory info ~5 µs, utilisation / power / clock /
    temperature / throttle ~1-1.5 µs each, both process lists ~15 µs per GPU; with
    :func:`process_tree` as the pids provider (one /proc scan, 1.3-2.3 ms for ~180 processes) a
    tick took 2.5-3.8 ms at 1 GPU, without it 0.2 ms; :func:`process_tree_provider` rescans
    /proc only every few seconds. At 1 Hz either is well under 1 % of a core.
    """

    def __init__(
        self,
        interval_s: float = 1.0,
        on_sample: Callable[[list[GpuSample]], None] | None = None,
        pids_provider: Callable[[], set[int]] | None = None,
        *,
        on_unavailable: Callable[[str], None] | None = None,
        env: dict[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = max(0.05, float(interval_s))
        self._on_sample = on_sample
        self._pids_provider = pids_provider
        self._on_unavailable = on_unavailable
        self._env = os.environ if env is None else env
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: list[GpuSample] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._unsupported: set[tuple[int, str]] = set()  # (gpu index, figure) not to ask again
        self.available: bool | None = None  # None until the first tick or failure
        self.reason: str | None = None
        self.notes: list[str] = []  # partial limits, e.g. per-process memory unavailable
        self.callback_error: str | None = None
        self.ticks = 0
        self.last_tick_s: float | None = None  # wall time of the last tick (NVML + callback)

    # lifecycle ---------------------------------------------------------------------------------

    def start(self) -> "NvmlSampler":
        """Start the thread (NVML is initialised on it, not here). Idempotent."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kvtui-nvml", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop and join the thread. Idempotent; never raises. An NVML call hung in the driver
        can outlive `timeout_s`; the thread is a daemon and will not hold up exit."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout_s)

    def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Block until the first tick is done or the sampler gave up; True if so in time."""
        return self._ready.wait(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> "NvmlSampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def latest(self) -> list[GpuSample]:
        with self._lock:
            return list(self._latest)

    # thread ------------------------------------------------------------------------------------

    def _run(self) -> None:
        reason = _init()
        if reason:
            self._give_up(reason, shutdown=False)
            return
        try:
            self._loop()
        except _Unavailable as exc:
            self._give_up(str(exc))
        except _NVML_ERRORS as exc:
            self._give_up(_describe(exc))
        except Exception as exc:  # a bug or a ctypes surprise: still never into the caller
            log.exception("NVML sampler failed")
            self._give_up(f"no GPU telemetry: sampler failed: {type(exc).__name__}: {exc}")
        else:
            _shutdown()
        finally:
            self._ready.set()

    def _give_up(self, reason: str, shutdown: bool = True) -> None:
        if shutdown:
            _shutdown()
        self.available = False
        self.reason = reason
        with self._lock:
            self._latest = []  # no stale figures once telemetry is gone
        self._ready.set()
        log.info("%s", reason)
        if self._on_unavailable is not None:
            try:
                self._on_unavailable(reason)
            except Exception as exc:
                self.callback_error = f"on_unavailable: {type(exc).__name__}: {exc}"
                log.exception("on_unavailable callback failed")

    def _loop(self) -> None:
        devices = _all_devices()
        visible = _visible_filter(self._env.get("CUDA_VISIBLE_DEVICES"))
        visible_idx = {i for i, _, uuid in devices if visible is None or visible(i, uuid)}
        names = {i: _text(_nvml.nvmlDeviceGetName(h)) for i, h, _ in devices}
        if not devices:
            raise _Unavailable("no GPU telemetry: NVML sees no GPU")
        while not self._stop.is_set():
            t0 = time.perf_counter()
            samples = self._tick(devices, visible_idx, names)
            with self._lock:
                self._latest = samples
            self.available = True
            self.ticks += 1
            if self._on_sample is not None:
                try:
                    self._on_sample(samples)
                except Exception as exc:
                    if self.callback_error is None:
                        log.exception("on_sample callback failed")
                    self.callback_error = f"on_sample: {type(exc).__name__}: {exc}"
            self._ready.set()
            self.last_tick_s = time.perf_counter() - t0
            self._stop.wait(max(0.0, self.interval_s - self.last_tick_s))

    def _pids(self) -> set[int] | None:
        if self._pids_provider is None:
            return None
        try:
            return set(self._pids_provider())
        except Exception as exc:
            self._note(f"pids provider failed: {type(exc).__name__}: {exc}")
            return None

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
            log.info("%s", text)

    def _opt(self, index: int, what: str, fn: Callable[[], Any]) -> Any:
        """An optional figure: None (and never asked again) when the GPU cannot give it."""
        if (index, what) in self._unsupported:
            return None
        try:
            return fn()
        except (_nvml.NVMLError_NotSupported, _nvml.NVMLError_NoPermission, _nvml.NVMLError_FunctionNotFound):
            self._unsupported.add((index, what))
        except getattr(_nvml, "NVMLLibraryMismatchError", _nvml.NVMLError_FunctionNotFound):
            self._unsupported.add((index, what))
        except _nvml.NVMLError_NotFound:
            pass  # transient (e.g. no process list yet)
        return None

    def _tick(self, devices: list[tuple[int, Any, str]], visible_idx: set[int], names: dict[int, str]) -> list[GpuSample]:
        pids = self._pids()
        procs: dict[int, dict[int, int | None] | None] = {}
        sampled = set(visible_idx)
        if pids is not None:
            for i, h, _ in devices:
                procs[i] = self._opt(i, "processes", lambda h=h: _gpu_processes(h))
                if procs[i] and pids & procs[i].keys():
                    sampled.add(i)  # the server uses a GPU outside CUDA_VISIBLE_DEVICES
        t = self._clock()
        out: list[GpuSample] = []
        for i, h, _ in devices:
            if i not in sampled:
                continue
            mem = self._memory(i, h)  # required: an error here ends telemetry
            s = GpuSample(t=t, index=i, name=names[i], mem_used_gib=mem.used / GIB, mem_total_gib=mem.total / GIB)
            util = self._opt(i, "util", lambda h=h: _nvml.nvmlDeviceGetUtilizationRates(h))
            s.util_pct = float(util.gpu) if util is not None else None
            power = self._opt(i, "power", lambda h=h: _nvml.nvmlDeviceGetPowerUsage(h))
            s.power_w = power / 1000.0 if power is not None else None
            clock = self._opt(i, "sm_clock", lambda h=h: _nvml.nvmlDeviceGetClockInfo(h, _nvml.NVML_CLOCK_SM))
            s.sm_clock_mhz = float(clock) if clock is not None else None
            temp = self._opt(i, "temp", lambda h=h: _nvml.nvmlDeviceGetTemperature(h, _nvml.NVML_TEMPERATURE_GPU))
            s.temperature_c = float(temp) if temp is not None else None
            mask = self._opt(i, "throttle", lambda h=h: _throttle_mask(h))
            s.throttle = throttle_names(int(mask)) if mask is not None else []
            if pids is not None:
                s.proc_mem_gib = self._proc_mem(i, procs.get(i), pids)
            out.append(s)
        return out

    def _memory(self, index: int, handle: Any) -> Any:
        """Memory info v2 (what nvidia-smi shows: `used` without the driver's reserved memory;
        v1's `used` adds ~0.6 GiB on an idle H200), else v1 on drivers without it."""
        if (index, "memory_v2") not in self._unsupported:
            v2 = getattr(_nvml, "nvmlMemory_v2", None)
            if v2 is not None:
                try:
                    return _nvml.nvmlDeviceGetMemoryInfo(handle, version=v2)
                except (_nvml.NVMLError_NotSupported, _nvml.NVMLError_FunctionNotFound, TypeError):
                    pass
                except getattr(_nvml, "NVMLLibraryMismatchError", _nvml.NVMLError_FunctionNotFound):
                    pass
            self._unsupported.add((index, "memory_v2"))
        return _nvml.nvmlDeviceGetMemoryInfo(handle)

    def _proc_mem(self, index: int, procs: dict[int, int | None] | None, pids: set[int]) -> float | None:
        if procs is None:
            self._note(f"GPU {index}: per-process memory not available from NVML")
            return None
        mine = [procs[p] for p in pids & procs.keys()]
        if not mine:
            if procs and _foreign(procs):
                self._note(
                    "per-process GPU memory not available: NVML reports pids of another PID "
                    "namespace (kvtui runs in a container?)"
                )
                return None
            return 0.0
        if any(m is None for m in mine):
            self._note(f"GPU {index}: NVML does not report per-process memory (usedGpuMemory n/a)")
            return None
        return sum(mine) / GIB  # type: ignore[arg-type]


def _throttle_mask(handle: Any) -> int:
    fn = getattr(_nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if fn is not None:
        try:
            return int(fn(handle))
        except _nvml.NVMLError_FunctionNotFound:
            pass
    return int(_nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))


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
    deadline = time.monotonic() + max(0.0, timeout_s)
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
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(poll_s, remaining))
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
