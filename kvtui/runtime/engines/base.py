"""What every engine (sim, vllm, external) gives the run: an endpoint, startup facts, liveness.

An engine is started once per precision mode and stopped before the next one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from kvtui.io.scenario.schema import Mode, Scenario
from kvtui.runtime.telemetry.types import StartupFacts  # re-exported: what every engine reports at startup

__all__ = ["Endpoint", "Engine", "EngineInfo", "LogSink", "Replica", "StartupFacts"]

LogSink = Callable[[str], None]


@dataclass
class Endpoint:
    """Where the load goes. `api_key` is never written to disk."""

    base_url: str  # e.g. http://127.0.0.1:43121 (no trailing /v1)
    model: str  # the served model name requests must use
    api_key: str | None = None
    metrics_url: str | None = None
    max_model_len: int | None = None
    # Several replicas (kvtui.runtime.engines.replicas): with base URLs the load generator spreads the
    # requests over them (`routing`); without (a gateway) only their /metrics are read apart.
    replicas: list["Replica"] = field(default_factory=list)
    routing: str = "least_inflight"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @property
    def spreads(self) -> bool:
        """kvtui chooses the replica of every request (a list of replica URLs, or replicas it launched)."""
        return len(self.replicas) > 1 and all(r.base_url for r in self.replicas)


@dataclass
class Replica:
    """One server behind a run of several: where its requests go (or "" behind a gateway), its
    /metrics, its own headers (its own per-run key), and what it said at startup."""

    name: str  # "r0", "r1", … as shown and stored
    base_url: str
    metrics_url: str | None
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    facts: dict[str, Any] = field(default_factory=dict)  # StartupFacts.to_dict() of a launched replica


@dataclass
class EngineInfo:
    """Labels that travel with every figure."""

    engine: str  # "sim", "vllm", "external"
    simulated: bool
    version: str | None = None  # vLLM version (or the simulator's "kvtui-sim x.y")
    command: list[str] = field(default_factory=list)  # launched command line, secrets redacted
    gpu_names: list[str] = field(default_factory=list)
    dummy_weights: bool = False
    # Where the weights came from, when known: "dummy", or "real: SmolLM2-135M-Instruct, …" for
    # kvtui's own builds (kvtui.models); None: the server's own model, not inspected.
    weights: str | None = None
    time_scale: float = 1.0  # sim slow motion: wall seconds per modelled second


class Engine(Protocol):
    """Lifecycle of one server per mode. Implementations: sim, vllm, external (kvtui.runtime.engines.registry).

    Everything the run asks of an engine is here, so the controller never probes with getattr.
    """

    name: str
    simulated: bool

    @property
    def time_scale(self) -> float:
        """Wall seconds per modelled second (the simulator's slow motion); 1.0 for a real server.
        Read-only to the run: an attribute or a property (replicas report their first's)."""
        ...

    def start(self, scenario: Scenario, mode: Mode, on_log: LogSink) -> Endpoint:
        """Start (or attach to) the server for `mode`; block until ready. Raises EngineError."""
        ...

    def facts(self) -> StartupFacts:
        """Startup facts known so far for the current mode."""
        ...

    def info(self) -> EngineInfo:
        """Labels for the current mode."""
        ...

    def check_alive(self) -> str | None:
        """None while healthy, else a one-line reason (process gone, /health 503)."""
        ...

    def pids(self) -> set[int]:
        """The server's processes, for NVML's per-process memory (empty: none of ours, or simulated)."""
        ...

    def gpu_memory(self) -> dict[str, Any] | None:
        """A simulated GPU's memory ({"used_gib", "gpu_total_gib"}); None for a real GPU (NVML reads it)."""
        ...

    def stop(self) -> None:
        """Stop the server and release its memory. Idempotent; never raises."""
        ...


def served_models(payload: object, where: str) -> list[dict]:
    """The `data` of a /v1/models answer, checked: a list of objects with a string `id`; a
    `max_model_len` that is not a positive integer is dropped (the scenario's then holds).

    Raises ValueError with one line when the answer is not that shape (a server's word is
    checked before kvtui builds prompts from it)."""
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
        raise ValueError(f"{where}/v1/models: 'data' is not a list of models with an 'id': {str(payload)[:80]!r}")
    out = []
    for m in data:
        m = dict(m)
        mml = m.get("max_model_len")
        if mml is not None and not (isinstance(mml, int) and not isinstance(mml, bool) and 0 < mml < 1 << 31):
            m.pop("max_model_len")
        out.append(m)
    return out
