"""Real (trained) models that kvtui can build locally, with no download at run time.

A scenario names one with `server.model = "kvtui:<name>"` (see `catalog.REAL_MODELS`); the
vllm launcher resolves it to a model directory through `build.ensure_model`, building it on
first use into the user's cache. `kvtui model build NAME` does the same by hand.

Imports: the floor only.
"""
