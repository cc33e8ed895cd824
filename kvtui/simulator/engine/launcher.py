"""Engine `sim`: launches `kvtui sim serve` per mode, exactly as the vLLM engine launches vLLM.

It is the vLLM engine with another command line: the same process group, readiness
(/health and our key accepted on /v1/models), log parsing (the simulator prints vLLM's
startup lines), failure tail and escalating stop. The simulator runs in its own process so
its CPU never competes with the run's controller or the UI.
"""

from __future__ import annotations

import sys
from typing import Any

import httpx

from kvtui import clock
from kvtui.io.scenario.schema import Mode, Scenario
from kvtui.runtime.engines.base import EngineInfo
from kvtui.runtime.engines.registry import register
from kvtui.runtime.engines.vllm.launcher import VllmEngine


def sim_command(scenario: Scenario, mode: Mode, port: int, time_scale: float) -> list[str]:
    s = scenario.server
    cmd = [
        sys.executable, "-m", "kvtui", "sim", "serve",
        "--host", s.host, "--port", str(port),
        "--gpu", s.gpu, "--model", mode.model or s.model,
        "--mode", mode.name, "--dtype", mode.dtype, "--kv-cache-dtype", mode.kv_cache_dtype,
        "--max-model-len", str(s.max_model_len), "--gpu-memory-utilization", str(s.gpu_memory_utilization),
        "--tensor-parallel-size", str(s.tensor_parallel_size), "--time-scale", f"{time_scale:g}",
        "--seed", str(scenario.seed),
    ]
    if s.served_model_name:
        cmd += ["--served-model-name", s.served_model_name]
    if mode.quantization:
        cmd += ["--quantization", mode.quantization]
    for flag, value in (("--kv-cache-memory-bytes", s.kv_cache_memory_bytes), ("--max-num-seqs", s.max_num_seqs),
                        ("--max-num-batched-tokens", s.max_num_batched_tokens)):
        if value:
            cmd += [flag, str(value)]
    if s.enable_prefix_caching is False:
        cmd.append("--no-enable-prefix-caching")
    # Test knobs (the knee model) ride in extra_args: --knee N --knee-tpot-ms …
    cmd += list(s.extra_args) + list(mode.extra_args)
    return cmd


def auto_time_scale(scenario: Scenario, mode: Mode) -> float:
    """Slow motion needed so this box can stream the modelled token rate.

    The peak chunk rate is the modelled decode rate at the ramp's top concurrency; this
    machine's simulator + client pair sustains about `budget` chunks/s (see bench/).
    """
    if scenario.server.time_scale > 0:
        return scenario.server.time_scale
    if "--knee" in scenario.server.extra_args + mode.extra_args:
        return 1.0  # the knee test model streams at its own, fixed, slow pace
    budget = 2500.0
    from kvtui.simulator.engine.scheduler import peak_chunk_rate

    return max(1.0, round(peak_chunk_rate(scenario, mode) / budget, 2))


@register("sim")
class SimEngine(VllmEngine):
    name = "sim"
    simulated = True

    def __init__(self) -> None:
        super().__init__(nvml_release_timeout_s=0.0)
        self.time_scale = 1.0
        self._gpu = "?"
        self._mem: dict[str, Any] | None = None
        self._mem_t = 0.0

    def _launcher(self) -> tuple[str, list[str]]:
        return "sim", [sys.executable, "-m", "kvtui", "sim", "serve"]

    def _refuse_what_the_cpu_build_cannot_run(self, mode: Mode, on_log: Any) -> None:
        """The simulator starts no vLLM: what the installed vLLM CPU build refuses (an fp8 KV cache
        without AVX-512) is no reason to refuse a simulated mode."""
        return None

    def _build_command(self, scenario: Scenario, mode: Mode, port: int, api_key: str, prefix) -> tuple[list[str],
        dict[str, str]]:
        self.time_scale = auto_time_scale(scenario, mode)
        self._gpu = scenario.server.gpu
        env = {"NO_COLOR": "1", "PYTHONUNBUFFERED": "1", **scenario.server.env, **mode.env}
        env["KVTUI_SIM_API_KEY"] = api_key  # not on the command line, which every user can read (ps)
        return sim_command(scenario, mode, port, self.time_scale), env

    def info(self) -> EngineInfo:
        info = super().info()
        info.engine, info.simulated = "sim", True
        info.gpu_names = [f"{self._gpu} (SIMULATED)"]
        info.time_scale = self.time_scale
        return info

    def pids(self) -> set[int]:
        return set()  # a simulated GPU: no NVML process memory to look up

    def gpu_memory(self) -> dict[str, Any] | None:
        """The simulated GPU's memory (what NVML would show for a real one), at most once a second."""
        ep = self.endpoint
        now = clock.monotonic()
        if ep is not None and now - self._mem_t >= 0.9:
            self._mem_t = now
            try:
                from kvtui.safeio import fetch, http_client

                with http_client(timeout=2.0) as c:
                    self._mem = fetch(c, "GET", ep.base_url + "/kvtui/sim", total_s=2.0).field("memory")
            except (httpx.HTTPError, ValueError):
                pass
        return self._mem
