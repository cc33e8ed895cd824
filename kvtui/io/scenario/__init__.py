"""Scenario files: schema, defaults, validation with file/line/field errors.

Imports: the floor only. The core reads the scenario's typed settings (schema.py).
"""

from kvtui.io.scenario.loader import load_scenario, parse_override, scenario_from_dict, scenario_from_snapshot
from kvtui.io.scenario.schema import Cost, Length, Mode, Quality, Ramp, Scenario, Server, Slo, Workload

__all__ = [
    "Cost", "Length", "Mode", "Quality", "Ramp", "Scenario", "Server", "Slo", "Workload",
    "load_scenario", "parse_override", "scenario_from_dict", "scenario_from_snapshot",
]
