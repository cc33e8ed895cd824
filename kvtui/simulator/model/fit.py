"""Fit the simulator's efficiency factors to measurements: bounded, pulled toward a prior.

The one fitting rule of kvtui, used by bench/fit_calibration.py (the catalogue's H200 fit, over
vLLM's own benchmark cells) and by the run's recalibration after each measured step
(kvtui.explore.refit, over the steps measured so far):

- each parameter is a `FitParam`: a calibration attribute (and a key of it, for the per-format
  dicts), bounds and a prior. key "*" makes the value a multiplier of every entry of the dict
  (how fast *this* GPU runs every format, relative to the catalogue's factors);
- the residuals are log errors (predicted / measured) plus `PRIOR_WEIGHT · log(value / prior)`
  per parameter, so what the data cannot separate stays at the prior instead of wandering;
- `solve()` minimises their squares inside the bounds.

`solve()` is a small projected Levenberg–Marquardt (finite differences): a handful of parameters
and a few dozen residuals, each residual evaluation a simulation, so evaluations are what cost;
scipy's least_squares (bench/fit_calibration.py uses it when installed) gives the same optimum
and is no runtime dependency of kvtui.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, fields
from typing import Callable, Sequence

from kvtui.simulator.model.roofline import Calibration

PRIOR_WEIGHT = 0.05  # bench/fit_calibration.py's weight of the pull toward the prior


@dataclass(frozen=True)
class FitParam:
    attr: str  # a Calibration field
    key: str | None  # a key of a dict field; "*" = a multiplier of every key; None = a scalar field
    lo: float
    hi: float
    prior: float

    @property
    def label(self) -> str:
        if self.key == "*":
            return f"{self.attr}×"
        return f"{self.attr}[{self.key}]" if self.key else self.attr


def copy_calibration(base: Calibration) -> Calibration:
    """A copy whose dict fields are copies too, so that apply()'s writes never reach `base`."""
    cal = copy.copy(base)
    for f in fields(cal):
        v = getattr(cal, f.name)
        if isinstance(v, dict):
            setattr(cal, f.name, dict(v))
    return cal


def apply(base: Calibration, params: Sequence[FitParam], x: Sequence[float], cap: float = 0.98) -> Calibration:
    """A copy of `base` with the parameters set to `x` (multipliers keep an efficiency ≤ cap)."""
    cal = copy_calibration(base)
    for p, v in zip(params, x):
        cur = getattr(cal, p.attr)
        if p.key == "*":
            setattr(cal, p.attr, {k: min(cap, float(e) * float(v)) for k, e in cur.items()})
        elif p.key is not None:
            cur[p.key] = float(v)
        else:
            setattr(cal, p.attr, float(v))
    return cal


def values(cal: Calibration, params: Sequence[FitParam]) -> list[float]:
    """The parameters' current values in `cal` (a multiplier's is 1: the calibration itself)."""
    out = []
    for p in params:
        if p.key == "*":
            out.append(1.0)
        elif p.key is not None:
            out.append(float(getattr(cal, p.attr)[p.key]))
        else:
            out.append(float(getattr(cal, p.attr)))
    return out


def prior_residuals(x: Sequence[float], params: Sequence[FitParam], weight: float = PRIOR_WEIGHT) -> list[float]:
    return [weight * math.log(max(v, 1e-12) / p.prior) for v, p in zip(x, params)]


def log_error(pred: float | None, meas: float | None) -> float | None:
    """log(pred / meas), or None where either is missing or not positive (nothing to fit)."""
    if pred is None or meas is None or not (pred > 0 and meas > 0) or math.isinf(pred) or math.isinf(meas):
        return None
    return math.log(pred / meas)


def _clip(x: list[float], params: Sequence[FitParam]) -> list[float]:
    return [min(p.hi, max(p.lo, v)) for v, p in zip(x, params)]


def _cost(r: Sequence[float]) -> float:
    return 0.5 * sum(v * v for v in r)


def _solve_linear(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (a is small and, damped, well conditioned)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        piv = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[piv] = m[piv], m[c]
        d = m[c][c] if abs(m[c][c]) > 1e-300 else 1e-300
        for r in range(c + 1, n):
            f = m[r][c] / d
            for k in range(c, n + 1):
                m[r][k] -= f * m[c][k]
    out = [0.0] * n
    for r in range(n - 1, -1, -1):
        s = m[r][n] - sum(m[r][k] * out[k] for k in range(r + 1, n))
        out[r] = s / (m[r][r] if abs(m[r][r]) > 1e-300 else 1e-300)
    return out


@dataclass
class FitResult:
    x: list[float]
    cost: float
    cost_at_start: float
    evaluations: int
    iterations: int


def solve(residuals: Callable[[list[float]], list[float]], params: Sequence[FitParam], x0: Sequence[float],
          max_evaluations: int = 40, diff_step: float = 1e-2) -> FitResult:
    """Minimise ½‖residuals(x)‖² with every x inside its bounds (projected Levenberg–Marquardt).

    Steps are taken in log space (every parameter here is a positive efficiency or time), so one
    relative step size serves factors of 0.5 and overheads of 1e-5 alike."""
    x = _clip([float(v) for v in x0], params)
    r = residuals(x)
    evals = 1
    start = cost = _cost(r)
    lam = 1e-2
    it = 0
    n = len(x)
    while evals + n + 1 <= max_evaluations:
        it += 1
        # Jacobian in log-parameters: forward differences (backward at an upper bound)
        jac: list[list[float]] = []
        for i in range(n):
            h = diff_step if x[i] * math.exp(diff_step) <= params[i].hi else -diff_step
            xi = list(x)
            xi[i] = x[i] * math.exp(h)
            ri = residuals(xi)
            evals += 1
            jac.append([(a - b) / h for a, b in zip(ri, r)])
        jtj = [[sum(jac[i][k] * jac[j][k] for k in range(len(r))) for j in range(n)] for i in range(n)]
        jtr = [sum(jac[i][k] * r[k] for k in range(len(r))) for i in range(n)]
        improved = False
        while evals < max_evaluations:
            a = [[jtj[i][j] + (lam * (jtj[i][i] + 1e-9) if i == j else 0.0) for j in range(n)] for i in range(n)]
            step = _solve_linear(a, [-v for v in jtr])
            cand = _clip([x[i] * math.exp(max(-1.0, min(1.0, step[i]))) for i in range(n)], params)
            rc = residuals(cand)
            evals += 1
            cc = _cost(rc)
            if cc < cost:
                moved = max(abs(math.log(c / v)) for c, v in zip(cand, x)) if n else 0.0
                x, r, cost = cand, rc, cc
                lam = max(1e-6, lam / 3)
                improved = True
                if moved < 1e-4:
                    return FitResult(x, cost, start, evals, it)
                break
            lam *= 4
            if lam > 1e6:
                break
        if not improved:
            break
    return FitResult(x, cost, start, evals, it)
