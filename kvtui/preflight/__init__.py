"""Pre-flight: what would make every mode fail, checked before the first one starts.

A vLLM start takes minutes on a GPU box and its failures come back late and in vLLM's words
(a missing model directory reads `HFValidationError: Repo id must be in the form…`). These
checks take well under a second, need nothing but NVML and the file system, and each says in
one line what is wrong and the fix:

    model          the model directory exists with a config.json, or the Hub id is in the local
                   cache (or can be downloaded: a warning; offline it is a failure)
    vllm           vLLM can be imported by the launching interpreter; its version
    gpu            a GPU is visible (else: only --engine sim or external can run here, and the
                   command for a simulated what-if of the same scenario)
    memory         each GPU vLLM will use has gpu_memory_utilization × its memory free, else
                   who holds it (pid, command, GiB, from NVML)
    precision      each mode's weight format and KV dtype run on this GPU's compute capability
                   (FP8 needs 8.9: Ada or Hopper; bf16 8.0; Marlin kernels 8.0), and a mode asking
                   for AWQ/GPTQ has such a checkpoint
    max_model_len  not beyond the model's max_position_embeddings (vLLM refuses it)
    port           a fixed server.port is free

`KVTUI_PREFLIGHT=0` skips them (for a check that is wrong on some box: say so in an issue).
"""

from __future__ import annotations

from typing import Any, Callable

from kvtui.io.scenario.schema import Mode, Scenario
from kvtui.preflight.checks import (  # noqa: F401 - kvtui.preflight's names, where callers import them
    _check_gpus,
    _check_max_model_len,
    _check_models,
    _check_port,
    _check_precision,
    _check_vllm,
)
from kvtui.preflight.result import Check, Preflight, skipped  # noqa: F401


def run_preflight(
    sc: Scenario,
    modes: list[Mode] | None = None,
    fast: bool = False,
    states: Callable[[], tuple[Any, list[Any]]] | None = None,
) -> Preflight:
    """Every check for this scenario's engine; `states` replaces the NVML read (tests)."""
    from kvtui.runtime.telemetry.nvml import gpu_states

    modes = list(modes or sc.modes)
    pf = Preflight()
    engine = sc.server.engine
    if engine == "vllm":
        configs = _check_models(pf, sc, modes)
        v = _check_vllm(pf)
        _check_max_model_len(pf, sc, configs)
        _check_gpus(pf, sc, modes, configs, v, states or gpu_states)
        if not any(c.name == "precision" for c in pf.checks):
            _check_precision(pf, sc, modes, configs, None, "")  # the checkpoint checks, without a GPU
        _check_port(pf, sc)
    elif engine == "sim" and not fast:
        _check_port(pf, sc)
    return pf


def modes_to_start(modes: list[Mode], resume: Any) -> list[Mode]:
    """The modes a run will start: those not kept whole from a resumed snapshot."""
    docs = [resume] if isinstance(resume, dict) else list(resume or [])
    kept = {m.get("name") for d in docs for m in (d.get("modes") or []) if m.get("complete") and not m.get("error")}
    return [m for m in modes if m.name not in kept]


def gate(sc: Scenario, modes: list[Mode], fast: bool = False, emit: Callable[[Check], None] | None = None) -> Preflight:
    """Run the checks (unless KVTUI_PREFLIGHT=0) and hand each line to `emit`."""
    if skipped() or not modes:
        return Preflight()
    pf = run_preflight(sc, modes, fast=fast)
    for c in pf.checks:
        if emit is not None:
            emit(c)
    return pf
