"""Engines: start, watch and stop the server a mode measures.

base.py is the interface (`Engine`, `EngineInfo`, `StartupFacts`); registry.py maps a scenario's
`server.engine` to its module by name (so that the simulator's launcher, kvtui.simulator.engine.launcher,
registers itself without this package importing it); vllm/ launches vLLM and reads its log;
external.py measures a server already running at a URL; replicas.py runs several behind one port.

Imports: kvtui.runtime.telemetry, kvtui.models (a real model is built on first use),
kvtui.simulator.model (vllm/shapedummy.py reads the model catalogue), kvtui.io and the floor.
"""
