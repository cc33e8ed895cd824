"""The measurement core: what a step decides, with no I/O, no threads and no reading of the time.

A transport (the live load generator's worker processes over HTTP, kvtui.load.generator; the
simulator's virtual client, kvtui.engines.sim.continuous) sends the requests and counts what came
back; the core says what that means: when the warm-up ends, when the window closes, how long the
tail is held, which window requests count for TPOT and E2E. Time comes in as an argument (`now`,
in the transport's own seconds), so the same rules run on the wall clock and on virtual time, and
are tested in milliseconds on plain numbers (tests/core/test_step_phases.py).

Imports: the standard library only (the floor of the import contract, pyproject.toml).
"""
