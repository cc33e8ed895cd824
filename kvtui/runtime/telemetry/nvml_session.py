"""The NVML session (the `nvidia-ml-py` distribution, module `pynvml`): init and shutdown, NVML's
errors as one line for the user, which GPUs CUDA_VISIBLE_DEVICES leaves visible. The GPU list
(kvtui.runtime.telemetry.gpus) and the sampler (kvtui.runtime.telemetry.nvml) stand on it.

GPU indices are NVML's (PCI bus order). CUDA's default order is "fastest first"; the two agree
when `CUDA_DEVICE_ORDER=PCI_BUS_ID` (or on boxes of identical GPUs, in practice). UUIDs in
`CUDA_VISIBLE_DEVICES` are unambiguous.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

log = logging.getLogger("kvtui.runtime.telemetry.nvml")  # one logger for GPU telemetry, whichever module logs

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
