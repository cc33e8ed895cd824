"""Engine `sim`: launches `kvtui sim serve` per mode, like the vLLM engine launches `vllm serve`.

The simulator runs in its own process (own process group, loopback, free port, per-run
API key passed through the environment), so its CPU never competes with the run's
controller or the UI, and the run treats it exactly like a real server. Its startup lines
use vLLM's spelling, so the vLLM log parser reads its facts.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import httpx

from kvtui.engines.base import EngineInfo, Endpoint, LogSink, StartupFacts
from kvtui.engines.procs import ServerProcess, free_port
from kvtui.errors import EngineError
from kvtui.scenario.schema import Mode, Scenario


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
    try:
        from kvtui.engines.sim.scheduler import peak_chunk_rate

        rate = peak_chunk_rate(scenario, mode)
    except (ImportError, AttributeError):
        return 1.0
    return max(1.0, round(rate / budget, 2))


class SimEngine:
    name = "sim"
    simulated = True

    def __init__(self) -> None:
        self.proc: ServerProcess | None = None
        self._facts = StartupFacts()
        self._info = EngineInfo(engine="sim", simulated=True)
        self.time_scale = 1.0
        self._client: httpx.Client | None = None
        self._mem: dict[str, Any] | None = None
        self._mem_t = 0.0

    def start(self, scenario: Scenario, mode: Mode, on_log: LogSink) -> Endpoint:
        from kvtui.engines.sim.server import random_api_key
        from kvtui.engines.vllm.logparse import StartupLogParser

        s = scenario.server
        port = s.port or free_port(s.host)
        self.time_scale = auto_time_scale(scenario, mode)
        key = random_api_key()
        cmd = sim_command(scenario, mode, port, self.time_scale)
        parser = StartupLogParser()

        def log(line: str) -> None:
            parser.feed(line)
            on_log(line)

        env = {"KVTUI_SIM_API_KEY": key, "NO_COLOR": "1", "PYTHONUNBUFFERED": "1", **s.env, **mode.env}
        base = f"http://{s.host}:{port}"
        self.proc = ServerProcess(cmd, env=env, on_log=log, secrets=[key])
        t0 = time.monotonic()
        self.proc.start()
        self.proc.wait_ready(f"{base}/health", timeout_s=min(s.startup_timeout_s, 120.0), what="simulator")
        self._facts = parser.facts
        self._facts.startup_s = round(time.monotonic() - t0, 2)
        self._client = httpx.Client(base_url=base, timeout=5.0, trust_env=False)
        try:
            info = self._client.get("/kvtui/sim").json()
            self._facts.merge(StartupFacts(**{k: v for k, v in info["facts"].items() if k in StartupFacts.__dataclass_fields__}))
            self._mem = info.get("memory")
            version = info.get("version")
        except (httpx.HTTPError, ValueError, KeyError) as e:
            raise EngineError("crashed", f"simulator answered /health but not /kvtui/sim: {e}", self.proc.tail())
        self._info = EngineInfo(engine="sim", simulated=True, version=version, command=self.proc.redacted_command(),
                                gpu_names=[f"{s.gpu} (SIMULATED)"], dummy_weights=False, time_scale=self.time_scale)
        if self.time_scale != 1.0:
            on_log(f"kvtui: the simulator runs in slow motion ×{self.time_scale:g}; every figure is scaled back to modelled time")
        served = s.served_model_name or (mode.model or s.model)
        if "--knee" in cmd:
            served = s.served_model_name or "knee"
        return Endpoint(base_url=base, model=served, api_key=key, metrics_url=f"{base}/metrics", max_model_len=s.max_model_len)

    def facts(self) -> StartupFacts:
        return self._facts

    def info(self) -> EngineInfo:
        return self._info

    def gpu_memory(self) -> dict[str, Any] | None:
        """The simulated GPU's memory (NVML's view of a real one), at most once a second."""
        if self._client is None:
            return self._mem
        now = time.monotonic()
        if now - self._mem_t >= 0.9:
            self._mem_t = now
            try:
                self._mem = self._client.get("/kvtui/sim").json().get("memory")
            except (httpx.HTTPError, ValueError):
                pass
        return self._mem

    def pids(self) -> set[int]:
        return {self.proc.pid} if self.proc and self.proc.pid else set()

    def check_alive(self) -> str | None:
        if self.proc is None:
            return "not started"
        return self.proc.check_alive()

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.proc is not None:
            self.proc.stop()
            self.proc = None
