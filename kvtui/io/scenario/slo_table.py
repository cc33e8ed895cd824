"""An SLO as a table and back: the SLO form's values validated by the scenario loader's rules,
an `Slo` written as the [slo] table a snapshot keeps, and a snapshot's [slo] read back."""

from __future__ import annotations

from typing import Any, Mapping

from kvtui.io.scenario.schema import SLO_KEY, Slo


def slo_from_table(table: dict[str, Any]) -> Slo:
    """Validate an SLO table with the scenario loader's rules (raises ScenarioError)."""
    from kvtui.io.scenario.loader import scenario_from_dict

    return scenario_from_dict({"slo": table}, source="SLO").slo


def slo_table(slo: Slo) -> dict[str, Any]:
    d: dict[str, Any] = dict(slo.latency)
    d["max_error_rate"] = slo.max_error_rate
    if slo.min_goodput:
        d["min_goodput"] = slo.min_goodput
    if slo.max_preemptions_per_request is not None:
        d["max_preemptions_per_request"] = slo.max_preemptions_per_request
    return d


def slo_of(scenario: Mapping[str, Any] | None) -> Slo:
    sd = (scenario or {}).get("slo") or {}
    slo = Slo()
    lat = sd.get("latency")
    if isinstance(lat, dict) and all(SLO_KEY.match(k) for k in lat):
        slo.latency = {k: float(v) for k, v in lat.items()}
    if isinstance(sd.get("max_error_rate"), (int, float)):
        slo.max_error_rate = float(sd["max_error_rate"])
    if isinstance(sd.get("min_goodput"), (int, float)):
        slo.min_goodput = float(sd["min_goodput"])
    if isinstance(sd.get("max_preemptions_per_request"), (int, float)):
        slo.max_preemptions_per_request = float(sd["max_preemptions_per_request"])
    return slo
