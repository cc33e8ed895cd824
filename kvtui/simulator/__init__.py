"""The simulator: vLLM's serving behaviour, modelled, for the demo, `--fast` and the prediction.

- engine/: the simulated engine. The scheduler with its KV block pool, the continuous client that
  runs a step in virtual time (continuous.py, run by kvtui.explore.offline_step), the open-loop step
  and the prediction's pilot (fast.py, fastrun.py), the HTTP server `kvtui sim serve` (server.py)
  and the launcher that starts it as an engine (launcher.py). It sits beside the runtime: it may
  import kvtui.runtime (the engine interface, the workload's prompts), the core, io and the floor.
- model/: the performance model under it. The roofline, the GPU and model catalog, the memory
  estimate, and the calibration and its fit. Beside the core: it imports only kvtui.io.scenario and
  the floor.

This folder only groups the two; its __init__ imports nothing.
"""
