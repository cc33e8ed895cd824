"""The knee test model as a scenario, for the benches that need a server whose answer is known.

`kvtui sim serve --knee N` takes each engine step in `tpot_ms` while at most N requests run and
`slowdown`× longer above, so a TPOT target between the two passes exactly up to N.
"""

from __future__ import annotations


def knee_scenario(name: str, ramp: str, slo: str, *, output_tokens: int = 16, slowdown: int = 3,
                  knee: int = 6, tpot_ms: int = 20) -> str:
    """TOML text: the knee server, a 64-token prompt, then the caller's [ramp] and [slo] lines."""
    return f"""
name = "{name}"
[server]
engine = "sim"
max_model_len = 2048
extra_args = ["--knee", "{knee}", "--knee-tpot-ms", "{tpot_ms}", "--knee-slowdown", "{slowdown}"]
[workload]
prompt_tokens = 64
output_tokens = {output_tokens}
[ramp]
{ramp.strip()}
[slo]
{slo.strip()}
"""
