"""NVML telemetry.

Three groups:
- real, no GPU (this CI machine): NVML's library is absent, so the "no GPU telemetry" state is
  exercised for real. Skipped on a machine where NVML works.
- real, with a GPU: run only where NVML works (checked by hand on an H200).
- mocked NVML: only for what a machine without a GPU cannot produce on demand (a GPU with
  figures, an NVMLError after a successful init, per-process lists, foreign PID namespaces).
  Each such test says so. The fake replaces functions of the real `pynvml` module, so the
  production code and pynvml's real exception classes are used as they are.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter
from types import SimpleNamespace

import pynvml
import pytest

from kvtui.runtime.telemetry import (
    NvmlSampler,
    gpu_inventory,
    process_tree,
    process_tree_provider,
    throttle_names,
    wait_for_release,
)
from kvtui.runtime.telemetry import nvml as nv

GIB = 2**30


def _nvml_works() -> bool:
    if nv._init() is None:
        nv._shutdown()
        return True
    return False


NVML = _nvml_works()
no_gpu_only = pytest.mark.skipif(NVML, reason="NVML works here: the no-GPU path cannot be produced for real")
gpu_only = pytest.mark.skipif(not NVML, reason="needs a GPU with NVML")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# --- real: no GPU here ------------------------------------------------------------------------


@no_gpu_only
def test_inventory_without_nvml():
    inv = gpu_inventory()
    assert inv.available is False
    assert inv.reason.startswith("no GPU telemetry: NVML library not found")
    assert inv.gpus == [] and inv.driver_version is None and inv.cuda_version is None


@no_gpu_only
def test_sampler_without_nvml_reports_and_stops():
    got_samples: list = []
    reasons: list[str] = []
    sampler = NvmlSampler(
        interval_s=0.05,
        on_sample=got_samples.append,
        pids_provider=lambda: process_tree(os.getpid()),
        on_unavailable=reasons.append,
    )
    assert sampler.available is None and sampler.reason is None
    with sampler:
        assert sampler.wait_ready(30)
        assert sampler.available is False
        assert sampler.reason.startswith("no GPU telemetry: NVML library not found")
        sampler._thread.join(30)  # it ends by itself: no retry loop
        assert not sampler.running
    assert reasons == [sampler.reason]
    assert got_samples == [] and sampler.latest() == [] and sampler.ticks == 0
    sampler.stop()  # again: idempotent, never raises


@no_gpu_only
def test_wait_for_release_without_nvml_is_true_at_once():
    assert wait_for_release({os.getpid()}, timeout_s=30) is True
    assert wait_for_release(set(), timeout_s=0) is True


# --- real: /proc ------------------------------------------------------------------------------


def test_process_tree_finds_children_and_grandchildren():
    code = (
        "import subprocess, sys\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import sys; print(flush=True); sys.stdin.read()'],"
        " stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
        "c.stdout.readline()\n"
        "print(c.pid, flush=True)\n"
        "sys.stdin.read()\n"
        "c.stdin.close(); c.wait()\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(parent.stdout.readline())
        tree = process_tree(os.getpid())
        assert {os.getpid(), parent.pid, grandchild} <= tree
        sub = process_tree(parent.pid)
        assert sub == {parent.pid, grandchild}
        assert os.getpid() not in sub
    finally:
        parent.stdin.close()
        parent.wait(30)
    assert process_tree(parent.pid) == set()  # gone
    assert process_tree(_dead_pid()) == set()


def test_process_tree_provider_caches():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        fresh = process_tree_provider(os.getpid(), max_age_s=0)
        cached = process_tree_provider(os.getpid(), max_age_s=3600)
        assert child.pid in fresh() and child.pid in cached()
    finally:
        child.stdin.close()
        child.wait(30)
    assert child.pid not in fresh()  # rescanned
    assert child.pid in cached()  # not rescanned yet
    assert process_tree_provider(_dead_pid())() == set()


# --- pure helpers -----------------------------------------------------------------------------


def test_throttle_names():
    assert throttle_names(0) == []
    assert throttle_names(0x1 | 0x4) == ["gpu_idle", "sw_power_cap"]
    assert throttle_names(0x40 | 0x800) == ["hw_thermal_slowdown", "0x800"]


@pytest.mark.parametrize(
    "env, expect",
    [
        (None, {0, 1, 2, 3}),
        ("1,3", {1, 3}),
        (" 2 ", {2}),
        ("", set()),
        ("-1", set()),
        ("0,bogus,2", {0}),  # CUDA stops at the first invalid entry
        ("GPU-bbbb", {1}),  # a UUID prefix is enough
        ("GPU-DDDD2222,0", {0, 3}),
        ("MIG-1234", {0, 1, 2, 3}),  # not resolved: hides nothing
    ],
)
def test_cuda_visible_devices(env, expect):
    uuids = ["GPU-aaaa1111", "GPU-bbbb1111", "GPU-cccc1111", "GPU-dddd2222"]
    f = nv._visible_filter(env)
    seen = {i for i, u in enumerate(uuids) if f is None or f(i, u)}
    assert seen == expect


# --- mocked NVML ------------------------------------------------------------------------------


class FakeNvml:
    """Replaces pynvml's functions for a box of fake GPUs. `procs[i]` / `gprocs[i]`: compute and
    graphics process lists {pid: bytes or None}. `fail_memory_at`: the memory-info call number
    (1-based) that raises `error`."""

    def __init__(self, monkeypatch, n=2, *, unsupported=(), fail_memory_at=None, error=None, init_error=None):
        self.n = n
        self.calls: Counter[str] = Counter()
        self.used = [10 * GIB + i * GIB for i in range(n)]
        self.procs: list[dict[int, int | None]] = [{} for _ in range(n)]
        self.gprocs: list[dict[int, int | None]] = [{} for _ in range(n)]
        self.unsupported = set(unsupported)
        self.fail_memory_at = fail_memory_at
        self.error = error or pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        self.init_error = init_error
        self.lock = threading.Lock()
        fns = {
            "nvmlInit": self.init,
            "nvmlShutdown": lambda: self._count("nvmlShutdown"),
            "nvmlSystemGetDriverVersion": lambda: "580.159.04",
            "nvmlSystemGetCudaDriverVersion_v2": lambda: 13000,
            "nvmlDeviceGetCount": lambda: self.n,
            "nvmlDeviceGetHandleByIndex": lambda i: i,
            "nvmlDeviceGetUUID": lambda h: f"GPU-{h:04d}-fake",
            "nvmlDeviceGetName": lambda h: "NVIDIA H200",
            "nvmlDeviceGetMemoryInfo": self.memory,
            "nvmlDeviceGetUtilizationRates": lambda h: self._opt("util", SimpleNamespace(gpu=97, memory=40)),
            "nvmlDeviceGetPowerUsage": lambda h: self._opt("power", 612_345),
            "nvmlDeviceGetClockInfo": lambda h, kind: self._opt("clock", 1980),
            "nvmlDeviceGetTemperature": lambda h, sensor: self._opt("temp", 61),
            "nvmlDeviceGetCurrentClocksEventReasons": lambda h: self._opt("throttle", 0x4 | 0x20),
            "nvmlDeviceGetComputeRunningProcesses": lambda h: self._plist("compute", self.procs[h]),
            "nvmlDeviceGetGraphicsRunningProcesses": lambda h: self._plist("graphics", self.gprocs[h]),
        }
        for name, fn in fns.items():
            monkeypatch.setattr(pynvml, name, fn)

    def _count(self, name):
        with self.lock:
            self.calls[name] += 1

    def init(self):
        self._count("nvmlInit")
        if self.init_error is not None:
            raise self.init_error

    def memory(self, h, version=None):
        self._count("memory")
        if self.fail_memory_at is not None and self.calls["memory"] >= self.fail_memory_at:
            raise self.error
        if version is not None:
            self._count("memory_v2")
            if "memory_v2" in self.unsupported:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            return SimpleNamespace(total=141 * GIB, used=self.used[h], reserved=GIB // 2, free=141 * GIB - self.used[h])
        # v1: `used` includes the driver's reserved memory
        return SimpleNamespace(total=141 * GIB, used=self.used[h] + GIB // 2, free=141 * GIB - self.used[h])

    def _opt(self, what, value):
        self._count(what)
        if what in self.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def _plist(self, what, procs):
        self._count(what)
        if what in self.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in list(procs.items())]


class Collector:
    def __init__(self, want: int):
        self.batches: list[list] = []
        self.want = want
        self.done = threading.Event()

    def __call__(self, samples):
        self.batches.append(samples)
        if len(self.batches) >= self.want:
            self.done.set()


def test_mocked_sampler_fields_visible_and_server_gpus(monkeypatch):
    """Mocked: no GPU here. GPU 1 is visible (CUDA_VISIBLE_DEVICES=1); the server also holds
    memory on GPU 0, which is then sampled too. The server's pid appears in both the compute and
    graphics lists of GPU 1 (counted once), a child of it holds 1 GiB more, a stranger 5 GiB."""
    fake = FakeNvml(monkeypatch, n=3)
    me, child, stranger = os.getpid(), 1, _dead_pid()
    fake.procs[1] = {me: 3 * GIB, child: 1 * GIB}
    fake.gprocs[1] = {me: 3 * GIB}
    fake.procs[0] = {me: 2 * GIB}
    fake.procs[2] = {stranger: 5 * GIB}
    out = Collector(2)
    s = NvmlSampler(0.01, on_sample=out, pids_provider=lambda: {me, child}, env={"CUDA_VISIBLE_DEVICES": "1"})
    with s:
        assert out.done.wait(30)
    assert s.available is True and s.reason is None
    batch = out.batches[0]
    assert [g.index for g in batch] == [0, 1]  # 2 is neither visible nor used by the server
    g0, g1 = batch
    assert g1.name == "NVIDIA H200"
    # memory info v2, as nvidia-smi shows it (v1 would add the driver's reserved 0.5 GiB)
    assert g1.mem_used_gib == pytest.approx(11.0) and g1.mem_total_gib == pytest.approx(141.0)
    assert g1.util_pct == 97 and g1.power_w == pytest.approx(612.345)
    assert g1.sm_clock_mhz == 1980 and g1.temperature_c == 61
    assert g1.throttle == ["sw_power_cap", "sw_thermal_slowdown"]
    assert g1.proc_mem_gib == pytest.approx(4.0)
    assert g0.proc_mem_gib == pytest.approx(2.0)
    assert g0.t == g1.t
    assert s.latest() == out.batches[-1]
    assert fake.calls["nvmlInit"] == fake.calls["nvmlShutdown"] == 1
    assert not s.running


def test_mocked_unsupported_figures_are_none_and_not_asked_again(monkeypatch):
    """Mocked: a GPU that supports no power/clock/temperature/throttle/process queries (seen on
    some boards and vGPUs) cannot be produced here."""
    fake = FakeNvml(
        monkeypatch, n=1, unsupported={"power", "clock", "temp", "throttle", "compute", "graphics", "memory_v2"}
    )
    out = Collector(4)
    with NvmlSampler(0.01, on_sample=out, pids_provider=lambda: {os.getpid()}) as s:
        assert out.done.wait(30)
    g = out.batches[-1][0]
    assert g.power_w is None and g.sm_clock_mhz is None and g.temperature_c is None
    assert g.throttle == [] and g.util_pct == 97
    assert g.mem_used_gib == pytest.approx(10.5)  # memory info v1 (reserved included) as the fallback
    assert g.proc_mem_gib is None  # not 0: NVML could not say
    assert any("per-process memory not available" in n for n in s.notes)
    for what in ("power", "clock", "temp", "throttle", "compute", "memory_v2"):
        assert fake.calls[what] == 1, what
    assert fake.calls["util"] >= 4
    assert s.available is True


def test_mocked_nvml_error_mid_run(monkeypatch):
    """Mocked: an NVMLError (GPU lost) raised after a successful init and two good ticks cannot
    be produced on demand by real hardware."""
    fake = FakeNvml(monkeypatch, n=1, fail_memory_at=3)
    out = Collector(1)
    reasons: list[str] = []
    s = NvmlSampler(0.01, on_sample=out, on_unavailable=reasons.append)
    s.start()
    s._thread.join(30)  # the thread ends by itself
    assert not s.running
    assert len(out.batches) == 2 and s.ticks == 2
    assert s.available is False
    assert s.reason == "no GPU telemetry: GPU is lost (fell off the bus)"
    assert reasons == [s.reason]
    assert s.latest() == []  # no stale figures
    assert fake.calls["memory"] == 3  # no retry loop
    assert fake.calls["nvmlInit"] == fake.calls["nvmlShutdown"] == 1
    s.stop()


def test_mocked_unknown_nvml_error_mid_run(monkeypatch):
    """Mocked, as above, with an error code pynvml has no name for."""
    FakeNvml(monkeypatch, n=1, fail_memory_at=1, error=pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN))
    with NvmlSampler(0.01) as s:
        assert s.wait_ready(30)
        s._thread.join(30)
    assert s.available is False and s.reason == "no GPU telemetry: NVML error: Unknown Error"


def test_mocked_init_errors(monkeypatch):
    """Mocked: a driver that is not loaded, or a permission error, cannot be produced here."""
    FakeNvml(monkeypatch, init_error=pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    inv = gpu_inventory()
    assert not inv.available and inv.reason == "no GPU telemetry: NVIDIA driver not loaded"
    s = NvmlSampler(0.01)
    with s:
        assert s.wait_ready(30)
    assert s.reason == "no GPU telemetry: NVIDIA driver not loaded"
    assert wait_for_release({os.getpid()}, 30) is True


def test_mocked_callback_errors_do_not_stop_sampling(monkeypatch):
    """Mocked: needs a working NVML. A callback that raises is reported, sampling goes on."""
    FakeNvml(monkeypatch, n=1)
    calls = []
    done = threading.Event()

    def bad(samples):
        calls.append(samples)
        if len(calls) >= 3:
            done.set()
        raise RuntimeError("widget gone")

    with NvmlSampler(0.01, on_sample=bad) as s:
        assert done.wait(30)
    assert s.callback_error == "on_sample: RuntimeError: widget gone"
    assert s.available is True and len(calls) >= 3


def test_mocked_foreign_pid_namespace(monkeypatch):
    """Mocked: NVML reporting host pids to a process in a container (another PID namespace)
    cannot be set up here. Then the server's own memory is unknown (None), not 0."""
    fake = FakeNvml(monkeypatch, n=1)
    fake.procs[0] = {_dead_pid(): 7 * GIB}
    out = Collector(1)
    with NvmlSampler(0.01, on_sample=out, pids_provider=lambda: {os.getpid()}) as s:
        assert out.done.wait(30)
    assert out.batches[0][0].proc_mem_gib is None
    assert any("another PID namespace" in n for n in s.notes)


def test_mocked_used_memory_not_available(monkeypatch):
    """Mocked: NVML's usedGpuMemory = NVML_VALUE_NOT_AVAILABLE (pynvml turns it into None)."""
    fake = FakeNvml(monkeypatch, n=1)
    fake.procs[0] = {os.getpid(): None}
    out = Collector(1)
    with NvmlSampler(0.01, on_sample=out, pids_provider=lambda: {os.getpid()}) as s:
        assert out.done.wait(30)
    assert out.batches[0][0].proc_mem_gib is None
    assert s.notes


def test_mocked_server_without_gpu_memory_yet(monkeypatch):
    """Mocked: a server that holds no GPU memory yet (still loading) reads 0.0, not None."""
    fake = FakeNvml(monkeypatch, n=1)
    fake.procs[0] = {1: 3 * GIB}  # pid 1 exists here: same namespace, not ours
    out = Collector(1)
    with NvmlSampler(0.01, on_sample=out, pids_provider=lambda: {os.getpid()}):
        assert out.done.wait(30)
    assert out.batches[0][0].proc_mem_gib == 0.0


def test_mocked_inventory(monkeypatch):
    """Mocked: no GPU here."""
    FakeNvml(monkeypatch, n=4)
    inv = gpu_inventory(env={"CUDA_VISIBLE_DEVICES": "GPU-0002,3"})
    assert inv.available and inv.reason is None
    assert inv.driver_version == "580.159.04" and inv.cuda_version == "13.0"
    assert [g["index"] for g in inv.gpus] == [2, 3] and inv.hidden == 2
    assert inv.gpus[0] == {"index": 2, "name": "NVIDIA H200", "uuid": "GPU-0002-fake", "mem_total_gib": 141.0}
    assert len(gpu_inventory(env={}).gpus) == 4
    none = gpu_inventory(env={"CUDA_VISIBLE_DEVICES": ""})
    assert not none.available and "hides all 4" in none.reason


def test_mocked_wait_for_release(monkeypatch):
    """Mocked: a process whose GPU memory is freed a few polls after it was asked to stop cannot
    be produced without a GPU."""
    fake = FakeNvml(monkeypatch, n=2)
    server = 1  # stands for the server's pid (exists here, so same namespace)
    fake.procs[1] = {server: 20 * GIB}
    polls = {"n": 0}
    real_compute = pynvml.nvmlDeviceGetComputeRunningProcesses

    def compute(h):
        if h == 1:
            polls["n"] += 1
            if polls["n"] == 3:
                fake.procs[1] = {}
        return real_compute(h)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", compute)
    assert wait_for_release({server}, timeout_s=30, poll_s=0.01) is True
    assert polls["n"] == 3
    fake.procs[1] = {server: 20 * GIB}
    assert wait_for_release({server}, timeout_s=0.05, poll_s=0.01) is False
    assert fake.calls["nvmlInit"] == fake.calls["nvmlShutdown"]


def test_mocked_wait_for_release_falls_back_to_process_exit(monkeypatch):
    """Mocked: NVML failing mid-wait, or listing another namespace's pids, cannot be produced
    here. Then the wait is for the processes to exit."""
    fake = FakeNvml(monkeypatch, n=1, fail_memory_at=None)
    fake.procs[0] = {_dead_pid(): 20 * GIB}  # foreign-looking pid
    assert wait_for_release({_dead_pid()}, timeout_s=30, poll_s=0.01) is True
    assert wait_for_release({os.getpid()}, timeout_s=0.05, poll_s=0.01) is False  # we are alive

    def broken(h):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", broken)
    assert wait_for_release({_dead_pid()}, timeout_s=30, poll_s=0.01) is True
    assert wait_for_release({os.getpid()}, timeout_s=0.05, poll_s=0.01) is False


# --- real: with a GPU (skipped here) ----------------------------------------------------------


@gpu_only
def test_real_gpu_inventory_and_sampler():
    inv = gpu_inventory()
    assert inv.available and inv.gpus and inv.driver_version
    out = Collector(2)
    with NvmlSampler(0.2, on_sample=out, pids_provider=lambda: process_tree(os.getpid())) as s:
        assert out.done.wait(60)
    assert s.available is True, s.reason
    batch = out.batches[-1]
    assert [g.index for g in batch] == [g["index"] for g in inv.gpus]
    for g in batch:
        assert 0 <= g.mem_used_gib <= g.mem_total_gib  # v2 "used" is 0 on an idle GPU
        assert g.mem_total_gib == pytest.approx(next(x for x in inv.gpus if x["index"] == g.index)["mem_total_gib"])


@gpu_only
def test_real_gpu_process_memory_and_release():
    """A child allocates 2 GiB with torch; the sampler sees it in the child's tree, and
    wait_for_release returns once the child has exited."""
    torch_ok = subprocess.run([sys.executable, "-c", "import torch; assert torch.cuda.is_available()"]).returncode == 0
    if not torch_ok:
        pytest.skip("needs torch with CUDA")
    code = (
        "import sys, torch\n"
        "x = torch.empty(2 * 2**30, dtype=torch.uint8, device='cuda'); torch.cuda.synchronize()\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        out = Collector(2)
        with NvmlSampler(0.2, on_sample=out, pids_provider=lambda: process_tree(child.pid)) as s:
            assert out.done.wait(60)
        mems = [g.proc_mem_gib for g in out.batches[-1]]
        if all(m is None for m in mems):
            pytest.skip(f"per-process memory not available here: {s.notes}")
        assert sum(m for m in mems if m) >= 2.0
        assert wait_for_release({child.pid}, timeout_s=0.2, poll_s=0.05) is False
    finally:
        child.stdin.close()
        child.wait(60)
    assert wait_for_release({child.pid}, timeout_s=60, poll_s=0.1) is True
