"""What a step that ended on a decided verdict records as its reason (steps[].early_stop.why).

Shared by the live load generator's caller (kvtui.explore.live_step) and the simulator's
continuous step (kvtui.simulator.engine.continuous), so a live step and its modelled twin say the same.
The rule itself is kvtui.core.protocol.preemption_decides.
"""

from __future__ import annotations


def preempted_why(n: float, at_s: float) -> str:
    """A FAIL decided by a preemption where the SLO allows none."""
    return (f"{n:g} preemption{'s' if n != 1 else ''} {at_s:.1f} s into the step: the SLO allows none "
            "(slo.max_preemptions_per_request = 0), so the verdict is FAIL whatever the rest of the window shows")
