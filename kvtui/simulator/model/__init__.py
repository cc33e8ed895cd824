"""The simulator's calibration as data the run refits: bounded, regularised efficiency fits
(fit.py) and the calibration file `kvtui calibrate` writes (calibration_file.py).

The prediction itself (offline simulator → knee and curves) is kvtui.explore.prediction: it
judges simulated steps with the run's own SLO evaluation, which lives in explore/.
"""
