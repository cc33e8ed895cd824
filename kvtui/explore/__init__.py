"""The run controller: how a run measures its modes, one step at a time.

run.py (`Run`) starts each mode's engine, asks the core's search for the next load, hands the step
to an executor (executor.py: live_step.py over HTTP with the load generator, offline_step.py with
the simulator in process, paced by pacing.py unless `--fast`), judges it with the core, journals
it and emits events (events.py) that the TUI, the headless printer and the web view read. Beside it:
the prediction and its refits (prediction.py, predict_loop.py, refit.py), resume (resume.py,
resume_guard.py), the run's document (document.py, compare.py) and the quality checks at the knee.

Imports: kvtui.simulator, kvtui.runtime, kvtui.quality, kvtui.models, kvtui.io, kvtui.core and the
floor; never the TUI, the reports or the command line (the import contract's layers).
"""
