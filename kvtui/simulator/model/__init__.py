"""The simulator's performance model: what a GPU and a model allow, before anything runs.

catalog.py (GPUs and model shapes, from kvtui/data), roofline.py (a step's time from bytes and
FLOPs, with a calibration), estimator.py (the memory left for the KV cache, and the KV-bound
guess), fit.py (bounded, regularised efficiency fits the run refits on its steps,
kvtui.explore.refit) and calibration_file.py (the file `kvtui calibrate` writes).

Imports: kvtui.io.scenario's typed settings and the floor only (it sits beside the core). The
prediction itself (the simulated steps judged with the run's own SLO evaluation) is
kvtui.explore.prediction.
"""
