"""Several servers of one engine behind one run: `server.replicas = N` for sim and vllm.

Each replica is the engine's own launch (its own process group, free port and per-run API
key), started one after another: vLLM checks at start that the GPU has its
gpu_memory_utilization share free, and two replicas profiling one card at the same time
would each count the other's memory. The run's endpoint lists them
(`Endpoint.replicas`), so the load generator spreads the requests over them and the telemetry
reads each one's /metrics.

The mode's startup facts are the deployment's: KV tokens, KV and weight GiB summed over the
replicas (two copies of the weights are on the card), the rest the first replica's; each
replica's own facts are kept with it (`Replica.facts`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kvtui.errors import EngineError, RunAborted
from kvtui.io.scenario.schema import Mode, Scenario
from kvtui.runtime.engines import registry
from kvtui.runtime.engines.base import Endpoint, Engine, EngineInfo, LogSink, Replica, StartupFacts

_SUMMED = ("kv_cache_tokens", "kv_cache_gib", "weights_gib", "cuda_graph_gib", "max_concurrency_reported")


def summed_facts(all_facts: list[StartupFacts],
                 said: str = "each replica's own facts are under replicas[]") -> StartupFacts:
    """Several replicas' startup facts as the deployment's: KV tokens, KV, weights and CUDA-graph
    memory summed (each replica holds its own), the rest the first one's, said in a warning
    that ends with `said` (where the replicas' own figures are)."""
    out = dataclasses.replace(all_facts[0], warnings=list(all_facts[0].warnings))
    if len(all_facts) > 1:
        for key in _SUMMED:
            vals = [getattr(f, key) for f in all_facts]
            if all(v is not None for v in vals):
                total = sum(vals)
                setattr(out, key, int(total) if key == "kv_cache_tokens" else round(total, 3))
        out.warnings.append(f"{len(all_facts)} replicas: KV tokens, KV, weights and CUDA-graph memory summed "
                            f"over them; {said}")
    return out


def create_for(scenario: Scenario) -> Engine:
    """The scenario's engine: several replicas of it when `server.replicas` > 1."""
    s = scenario.server
    if s.replicas > 1 and s.engine != "external":
        return ReplicatedEngine(s.engine, s.replicas)
    return registry.create(s.engine)


class ReplicatedEngine:
    def __init__(self, kind: str, n: int):
        self.children: list[Engine] = [registry.create(kind) for _ in range(n)]
        self.name = kind
        self.simulated = self.children[0].simulated
        self._started: list[Engine] = []
        self._endpoint: Endpoint | None = None
        self._cancelled = False

    @property
    def time_scale(self) -> float:
        return self.children[0].time_scale

    def start(self, scenario: Scenario, mode: Mode, on_log: LogSink) -> Endpoint:
        n = len(self.children)
        eps: list[Endpoint] = []
        for i, child in enumerate(self.children):
            sc = scenario
            if scenario.server.port:  # a fixed port: the replicas take the ones after it
                sc = dataclasses.replace(scenario, server=dataclasses.replace(scenario.server,
                                                                              port=scenario.server.port + i))
            if self._cancelled:
                raise RunAborted("engine start cancelled")
            on_log(f"[kvtui] starting replica r{i} of {n}")
            self._started.append(child)
            def sink(line: str, i: int = i) -> None:
                on_log(f"[r{i}] {line}")

            try:
                eps.append(child.start(sc, mode, sink))
            except EngineError as e:
                self.stop()
                msg = str(e)
                msg = msg[len(e.kind) + 2:] if msg.startswith(f"{e.kind}: ") else msg
                raise EngineError(e.kind, f"replica r{i} of {n}: {msg}", e.log_tail) from None
            if self._cancelled:  # stopped (Ctrl-C, q) while this replica started: start no more
                self.stop()
                raise RunAborted("engine start cancelled")
        first = eps[0]
        ep = dataclasses.replace(first, routing=scenario.server.routing)
        ep.replicas = [Replica(f"r{i}", e.base_url, e.metrics_url, e.headers(), child.facts().to_dict())
                       for i, (e, child) in enumerate(zip(eps, self.children))]
        lens = [e.max_model_len for e in eps if e.max_model_len]
        ep.max_model_len = min(lens) if lens else None
        self._endpoint = ep
        return ep

    def facts(self) -> StartupFacts:
        started = self._started or self.children[:1]
        all_facts = [c.facts() for c in started]
        out = summed_facts(all_facts)
        if len(all_facts) > 1:
            starts = [f.startup_s for f in all_facts if f.startup_s is not None]
            out.startup_s = round(sum(starts), 2) if starts else None  # one after another
        return out

    def info(self) -> EngineInfo:
        info = self.children[0].info()
        info.command = list(info.command) + [f"(× {len(self.children)} replicas)"] if info.command else info.command
        return info

    def check_alive(self) -> str | None:
        """None while one replica at least lives (the telemetry names the ones that died)."""
        why = []
        for i, c in enumerate(self._started or self.children):
            r = c.check_alive()
            if r is None:
                return None
            why.append(f"replica r{i}: {r}")
        return "; ".join(why)

    def pids(self) -> set[int]:
        out: set[int] = set()
        for c in self._started:
            out |= c.pids()
        return out

    def gpu_memory(self) -> dict[str, Any] | None:
        """A simulated deployment's memory: each simulated replica models its own GPU, summed."""
        mems = [c.gpu_memory() for c in self._started]
        if not mems or any(m is None or m.get("used_gib") is None for m in mems):
            return None
        return {"used_gib": sum(m["used_gib"] for m in mems if m),
                "gpu_total_gib": sum((m or {}).get("gpu_total_gib") or 0 for m in mems)}

    def stop(self) -> None:
        self._cancelled = True
        for c in reversed(self._started):
            try:
                c.stop()
            except Exception:
                pass
        self._started = []
