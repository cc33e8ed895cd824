"""A bounded columnar time series (the telemetry a mode's charts draw) and its downsampling."""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import Any

SERIES_MAX = 4000  # rows per mode before the series is thinned 2:1


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    if math.isnan(x):
        return None
    return float(x)


class Series:
    """A bounded columnar time series: `t` plus named columns (None where a row lacked the key)."""

    def __init__(self, maxlen: int = SERIES_MAX):
        self.maxlen = maxlen
        self.t: list[float] = []
        self.cols: dict[str, list[float | None]] = {}
        self.version = 0

    def __len__(self) -> int:
        return len(self.t)

    def append(self, t: float, values: dict[str, Any]) -> None:
        n = len(self.t)
        self.t.append(t)
        for k, v in values.items():
            col = self.cols.get(k)
            if col is None:
                col = self.cols[k] = [None] * n
            col.append(_num(v))
        for col in self.cols.values():
            if len(col) < n + 1:
                col.append(None)
        if len(self.t) > self.maxlen:
            self.t = self.t[::2]
            for k in self.cols:
                self.cols[k] = self.cols[k][::2]
        self.version += 1

    def last(self, key: str) -> float | None:
        col = self.cols.get(key)
        if not col:
            return None
        for v in reversed(col):
            if v is not None:
                return v
        return None

    def end_index(self, t_max: float | None) -> int:
        return len(self.t) if t_max is None else bisect_right(self.t, t_max)

    def view(self, key: str, buckets: int, t_max: float | None = None,
             how: str = "max") -> tuple[list[float], list[float]]:
        """(xs, ys) of one column up to t_max, downsampled to at most `buckets` points.

        Each bucket keeps its max (gauges: a spike must not vanish) or mean (rates).
        """
        col = self.cols.get(key)
        end = self.end_index(t_max)
        if not col or end == 0:
            return [], []
        ts, vs = self.t[:end], col[:end]
        pairs = [(t, v) for t, v in zip(ts, vs) if v is not None]
        return downsample(pairs, buckets, how)

    def values(self, key: str, t_max: float | None = None) -> list[float]:
        col = self.cols.get(key) or []
        return [v for v in col[: self.end_index(t_max)] if v is not None]


def downsample(pairs: list[tuple[float, float]], buckets: int, how: str = "max") -> tuple[list[float], list[float]]:
    """Reduce (x, y) points to ≤ `buckets` by grouping neighbours (max or mean of y, last x)."""
    n = len(pairs)
    if n == 0:
        return [], []
    buckets = max(1, int(buckets))
    if n <= buckets:
        return [p[0] for p in pairs], [p[1] for p in pairs]
    xs: list[float] = []
    ys: list[float] = []
    for b in range(buckets):
        lo = b * n // buckets
        hi = (b + 1) * n // buckets
        if hi <= lo:
            continue
        chunk = pairs[lo:hi]
        vals = [p[1] for p in chunk]
        xs.append(chunk[-1][0])
        ys.append(max(vals) if how == "max" else sum(vals) / len(vals))
    return xs, ys
