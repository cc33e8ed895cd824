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
from functools import partial
from typing import Any, Callable

from kvtui import clock as seam
from kvtui.runtime.telemetry.gpus import (  # noqa: F401 - kvtui.runtime.telemetry.nvml's names, where callers import them
    GpuInfo,
    GpuProcess,
    GpuState,
    Inventory,
    _all_devices,
    _foreign,
    _gpu_processes,
    gpu_inventory,
    gpu_states,
    wait_for_release,
)
from kvtui.runtime.telemetry.nvml_session import (  # noqa: F401
    _NVML_ERRORS,
    GIB,
    _describe,
    _init,
    _nvml,
    _shutdown,
    _text,
    _visible_filter,
    throttle_names,
)
from kvtui.runtime.telemetry.proctree import process_tree, process_tree_provider  # noqa: F401
from kvtui.runtime.telemetry.types import GpuSample

log = logging.getLogger("kvtui.runtime.telemetry.nvml")

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
        clock: Callable[[], float] = seam.monotonic,
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
            t0 = seam.perf_counter()
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
            self.last_tick_s = seam.perf_counter() - t0
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

    def _tick(self, devices: list[tuple[int, Any, str]], visible_idx: set[int],
              names: dict[int, str]) -> list[GpuSample]:
        pids = self._pids()
        procs: dict[int, dict[int, int | None] | None] = {}
        sampled = set(visible_idx)
        if pids is not None:
            for i, h, _ in devices:
                found: dict[int, int | None] | None = self._opt(i, "processes", partial(_gpu_processes, h))
                procs[i] = found
                if found and pids & found.keys():
                    sampled.add(i)  # the server uses a GPU outside CUDA_VISIBLE_DEVICES
        t = self._clock()
        out: list[GpuSample] = []
        for i, h, _ in devices:
            if i not in sampled:
                continue
            mem = self._memory(i, h)  # required: an error here ends telemetry
            s = GpuSample(t=t, index=i, name=names[i], mem_used_gib=mem.used / GIB, mem_total_gib=mem.total / GIB)
            util = self._opt(i, "util", partial(_nvml.nvmlDeviceGetUtilizationRates, h))
            s.util_pct = float(util.gpu) if util is not None else None
            power = self._opt(i, "power", partial(_nvml.nvmlDeviceGetPowerUsage, h))
            s.power_w = power / 1000.0 if power is not None else None
            clock = self._opt(i, "sm_clock", partial(_nvml.nvmlDeviceGetClockInfo, h, _nvml.NVML_CLOCK_SM))
            s.sm_clock_mhz = float(clock) if clock is not None else None
            temp = self._opt(i, "temp", partial(_nvml.nvmlDeviceGetTemperature, h, _nvml.NVML_TEMPERATURE_GPU))
            s.temperature_c = float(temp) if temp is not None else None
            mask = self._opt(i, "throttle", partial(_throttle_mask, h))
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
        known = [m for m in mine if m is not None]
        if len(known) < len(mine):
            self._note(f"GPU {index}: NVML does not report per-process memory (usedGpuMemory n/a)")
            return None
        return sum(known) / GIB


def _throttle_mask(handle: Any) -> int:
    fn = getattr(_nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if fn is not None:
        try:
            return int(fn(handle))
        except _nvml.NVMLError_FunctionNotFound:
            pass
    return int(_nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
