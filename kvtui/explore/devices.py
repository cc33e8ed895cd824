"""Which devices the modes of a parallel run may have, one lane each (kvtui run --parallel).

A real engine's devices are the GPUs NVML sees after CUDA_VISIBLE_DEVICES that are free: no
process holds memory on them and little is used (another tenant's server would share the
card, and its load would be measured as the mode's). The simulator's are `server.devices`
simulated GPUs, numbered like CUDA's (CUDA_VISIBLE_DEVICES may name a subset). A lane takes
`tensor_parallel_size` devices; its CUDA_VISIBLE_DEVICES lists them (real GPUs by UUID).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from kvtui.io.scenario.schema import Scenario

# A GPU with more than this in use is not free (a driver context alone is a few hundred MiB).
BUSY_GIB = 1.0
BUSY_SHARE = 0.05


@dataclass
class Lanes:
    """The lanes' device lists (CUDA_VISIBLE_DEVICES values) and why any device was left out."""

    lanes: list[list[str]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)  # device id → what the user reads ("GPU 1 NVIDIA H200")


def sim_device_ids(count: int, env: Mapping[str, str] | None = None) -> list[int]:
    """The simulated GPUs this process sees: 0..count-1, or those of them CUDA_VISIBLE_DEVICES names."""
    cvd = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return list(range(count))
    ids: list[int] = []
    for item in cvd.split(","):  # as CUDA parses it: up to the first entry that is not a device
        try:
            i = int(item.strip())
        except ValueError:
            break
        if i < 0:
            break
        if i < count and i not in ids:
            ids.append(i)
    return ids


def _group(ids: list[str], tp: int, lanes: Lanes) -> Lanes:
    for k in range(0, len(ids) - tp + 1, tp):
        lanes.lanes.append(ids[k:k + tp])
    rest = ids[len(ids) - len(ids) % tp:] if len(ids) % tp else []
    if rest:
        lanes.left_out.append(f"{', '.join(lanes.labels.get(i, i) for i in rest)}: fewer than tensor_parallel_size "
                              f"= {tp} left for a lane")
    return lanes


def plan_lanes(scenario: Scenario, env: dict[str, str] | None = None) -> Lanes:
    """The lanes this box offers the scenario (none: `left_out` says why)."""
    tp = max(1, scenario.server.tensor_parallel_size)
    lanes = Lanes()
    if scenario.server.engine == "sim":
        ids = [str(i) for i in sim_device_ids(scenario.server.devices, env)]
        lanes.labels = {i: f"simulated GPU {i}" for i in ids}
        return _group(ids, tp, lanes)
    from kvtui.runtime.telemetry.nvml import gpu_states

    inv, states = gpu_states(env)
    if not inv.available:
        lanes.left_out.append(inv.reason or "no GPU seen")
        return lanes
    free: list[str] = []
    me = os.getpid()
    for g in states:
        # By UUID: CUDA's own device order may differ from NVML's (CUDA_DEVICE_ORDER), a UUID cannot.
        label = f"GPU {g.index} ({g.name}, {g.uuid[:12]})"
        lanes.labels[g.uuid] = label
        held = [p for p in g.processes if p.pid != me]
        used = g.mem_total_gib - g.mem_free_gib
        if held:
            who = ", ".join(f"pid {p.pid} {p.name.split(' ')[0] if p.name else ''}".strip() for p in held[:3])
            lanes.left_out.append(f"{label}: in use by {who}")
        elif used > max(BUSY_GIB, BUSY_SHARE * g.mem_total_gib):
            lanes.left_out.append(f"{label}: {used:.1f} GiB in use")
        else:
            free.append(g.uuid)
    return _group(free, tp, lanes)
