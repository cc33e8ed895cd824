"""What runs beside a measurement: servers, the load sent to them, and what is read from them.

- engines/: start, watch and stop an engine (vLLM, an external server by URL, replicas); the
  simulator's launcher registers itself here by name (kvtui.simulator.engine.launcher).
- load/: the HTTP transport. The load generator and its worker processes send the requests and
  count what came back; the core (kvtui.core) says what that means.
- telemetry/: NVML's GPU samples and the engine's Prometheus /metrics.
- procs/: process bookkeeping (a floor package): nothing kvtui starts outlives it.

engines, load and telemetry are one layer, above the core: they may import kvtui.core, kvtui.io and
the floor, and each other one way only. This folder only groups them; its __init__ imports nothing.
"""
