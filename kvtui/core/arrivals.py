"""An open loop's arrivals: the gap before each send, for every transport.

A rate step (`ramp.load = "rate"`) sends R requests a second, spaced by `ramp.arrival`:
- poisson (the default): exponential gaps, mean 1/R;
- bursty: `ramp.burst_size` requests at once, the bursts themselves Poisson at R / burst_size a second;
- constant: exactly 1/R apart.

The live load generator's workers (kvtui.runtime.load.worker, one generator per worker at R / workers)
and the simulator's open-loop step (kvtui.simulator.engine.fast) both draw their gaps here, from the
step's own seeded generator. Before, the simulator drew Poisson gaps whatever `ramp.arrival` said, so a
`--fast` run of a bursty or constant rate modelled another load than the live run sent. Poisson draws
are the same calls in the same order as before: no Poisson figure moved.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kvtui.io.scenario.schema import ARRIVALS


@dataclass
class ArrivalGaps:
    """next() -> seconds from the previous send to the next one (the first: from the step's start)."""

    kind: str
    rate: float  # requests a second
    burst_size: int
    rng: random.Random
    sent: int = 0

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError("an open loop needs a rate > 0")
        # The scenario's checks refuse another kind (kvtui.io.scenario.checks); a trace replay has its
        # own schedule (kvtui.io.scenario.trace.replay_arrivals), and is spaced as Poisson without one.
        if self.kind not in ARRIVALS:
            self.kind = "poisson"
        if self.kind == "bursty" and not self.burst_size >= 1:  # the scenario's range refuses it first
            raise ValueError(f"a bursty open loop needs burst_size >= 1, got {self.burst_size!r}")

    def next(self) -> float:
        k = self.sent
        self.sent += 1
        if self.kind == "constant":
            return 1.0 / self.rate
        if self.kind == "bursty":
            b = int(self.burst_size)
            return self.rng.expovariate(self.rate / b) if k % b == 0 else 0.0
        return self.rng.expovariate(self.rate)
