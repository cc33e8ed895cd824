"""The simulated engine: vLLM's scheduler, KV blocks and timings, modelled.

scheduler.py (the running and waiting requests, chunked prefill, preemption) and blocks.py (the KV
block pool) are the model; continuous.py runs a closed-loop step on it in virtual time, through the
core's phases; fast.py and fastrun.py run the open-loop step and the prediction's pilot; server.py
serves the model over HTTP as `kvtui sim serve`, and launcher.py starts that server as an engine
(registered by name in kvtui.runtime.engines.registry). knee.py is the test model with a known knee.

Imports: kvtui.runtime.engines (the engine interface, vLLM's launcher it extends), kvtui.runtime.load
(the workload's prompts), kvtui.simulator.model, kvtui.core, kvtui.io and the floor.
"""
