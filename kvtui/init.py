"""`kvtui init MODEL`: a commented scenario for this model on this GPU.

From the model's config.json (a local directory, a Hugging Face id in the local cache, or a
bundled shape such as `llama-3.1-8b`), the GPUs NVML sees (or `--gpu NAME` for another) and
the installed vLLM, it writes a scenario with the precision modes that make sense here:

    unquantized checkpoint   bf16 baseline, fp8 KV, fp8 weights, fp8 weights + fp8 KV
                             (FP8 compute from compute capability 8.9; on Ampere the fp8
                             weights run weight-only, W8A16 through FP8 Marlin, and named so)
    AWQ / GPTQ checkpoint    its own int4 weights (Marlin kernels), and with an fp8 KV cache
    FP8 checkpoint           its own fp8 weights, and with an fp8 KV cache

plus `max_model_len` from the config (lowered when one request of that length would not fit,
as vLLM would refuse it), an SLO with the defaults explained, and in the header the
estimator's KV-bound prediction per mode (kvtui/simulator/model/estimator.py: the memory formula,
not a measurement). The text is checked with the scenario loader before it is written, and
written atomically (a temporary file renamed): never half a scenario.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from kvtui import clock
from kvtui.errors import KvtuiError, UsageError

if TYPE_CHECKING:  # imported where used: `kvtui init` loads the estimator only when it runs
    from kvtui.simulator.model.catalog import GpuSpec
    from kvtui.simulator.model.estimator import EngineSettings

DEFAULT_PROMPT = 2048
DEFAULT_OUTPUT = 256
DEFAULT_UTILIZATION = 0.90
WHAT_IF_GPU = "H200"  # the predictions' GPU when none is seen and none is named
REF = "@SCENARIO@"  # where the header names the file: its name, or its path (filled in once known)
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.gguf")


@dataclass
class InitModel:
    arg: str
    value: str  # what the scenario's server.model says
    config: dict[str, Any]
    where: str  # how it was found, in words
    shape: bool = False  # a bundled shape name (the simulator's), not a loadable model
    has_weights: bool = True
    sim_value: str = ""  # what the sim engine should be given for it (a config path or shape name)


@dataclass
class InitGpu:
    name: str  # the catalogue name the estimator uses ("" when NVML's GPU is not in it)
    seen: str  # what was seen, in words
    compute_capability: tuple[int, int] | None = None
    count: int = 0
    fp8: bool | None = None  # FP8 tensor cores (None: not known)
    source: str = "seen"  # "seen" (NVML), "what-if" (--gpu NAME) or "assumed" (no GPU here, none named)


@dataclass
class InitResult:
    name: str
    text: str
    notes: list[str] = field(default_factory=list)
    gpu: InitGpu | None = None
    engine: str = "vllm"
    sim_model: str = ""  # the bundled shape the simulator uses, where it is not the model itself


def _slug(s: str) -> str:
    s = re.sub(r"[^a-z0-9.]+", "-", s.lower()).strip("-.")
    return s or "model"


def resolve_init_model(arg: str) -> InitModel:
    """The model behind `arg`, offline. Raises UsageError (exit 2) saying what is missing."""
    from kvtui.runtime.engines.vllm.modelref import CACHED, DIR, REMOTE, resolve_model
    from kvtui.simulator.model.catalog import MODELS_DIR, bundled_models

    p = Path(arg).expanduser()
    if not p.exists() and arg.lower().removesuffix(".json") in [n.lower() for n in bundled_models()]:
        name = next(n for n in bundled_models() if n.lower() == arg.lower().removesuffix(".json"))
        cfg = json.loads((MODELS_DIR / f"{name}.json").read_text(encoding="utf-8"))
        return InitModel(
            arg,
            name,
            cfg,
            f"kvtui's bundled {name} shape (kvtui/data/models/{name}.json)",
            shape=True,
            has_weights=False,
            sim_value=name,
        )
    r = resolve_model(arg)
    if r.kind == DIR and r.path is not None:  # resolve_model gives DIR and CACHED a path
        d = r.path.resolve()
        weights = any(any(d.glob(g)) for g in WEIGHT_FILES)
        return InitModel(arg, str(d), r.config(), f"{d}/config.json", has_weights=weights, sim_value=str(d))
    if r.kind == CACHED and r.path is not None:
        weights = any(any(r.path.glob(g)) for g in WEIGHT_FILES)
        return InitModel(
            arg, arg, r.config(), f"the local Hugging Face cache ({r.path})", has_weights=weights, sim_value=str(r.path)
        )
    if r.kind == REMOTE:
        raise UsageError(
            f"{r.problem}: kvtui init reads config.json offline — fetch it first "
            f"(huggingface-cli download {arg} config.json) or give a local model directory"
        )
    raise UsageError(
        f"{r.problem}: give a model directory (with config.json), a Hugging Face id in the local cache, "
        f"or a bundled shape ({', '.join(bundled_models())})"
    )


def detect_gpu(name: str | None, states: Callable[[], tuple[Any, list[Any]]] | None = None) -> InitGpu:
    """`--gpu NAME` (a what-if), else the first GPU NVML sees, else the what-if default."""
    from kvtui.simulator.model.catalog import load_gpu

    if name:
        g = load_gpu(name)  # UsageError names the catalogue
        return InitGpu(g.name, f"{g.name} (--gpu: a what-if, not this box)", g.compute_capability, fp8=g.has_fp8,
                       source="what-if")
    from kvtui.runtime.telemetry.nvml import gpu_states

    inv, gpus = (states or gpu_states)()
    if not gpus:
        reason = (inv.reason or "no GPU").removeprefix("no GPU telemetry: ")
        g = load_gpu(WHAT_IF_GPU)
        return InitGpu(
            g.name, f"no GPU seen here ({reason}); predictions for an {g.name} (--gpu NAME for another)",
            g.compute_capability, fp8=g.has_fp8, source="assumed",
        )
    first = gpus[0]
    cc = first.compute_capability
    seen = f"{len(gpus)} x {first.name}" if len(gpus) > 1 else first.name
    seen += f" (NVML, {first.mem_total_gib:.1f} GiB" + (f", compute capability {cc[0]}.{cc[1]})" if cc else ")")
    try:
        cat = load_gpu(first.name).name
    except UsageError:
        cat = ""
        seen += "; not in kvtui's GPU catalogue: no prediction (--gpu NAME picks the nearest)"
    fp8 = (cc >= (8, 9)) if cc else None
    return InitGpu(cat, seen, cc, len(gpus), fp8)


def _modes(model: InitModel, gpu: InitGpu) -> tuple[list[dict[str, Any]], list[str]]:
    """The precision modes for this checkpoint on this GPU, and comments on the ones left out."""
    from kvtui.runtime.engines.vllm.modelref import checkpoint_quantization

    own = checkpoint_quantization(model.config)
    from kvtui.preflight.result import FP8_KV_CC, FP8_WEIGHT_ONLY_CC

    cc = gpu.compute_capability
    bf16 = cc is None or cc >= (8, 0)
    act = "bfloat16" if bf16 else "float16"
    fp8 = gpu.fp8 is not False  # FP8 tensor cores: FP8 GEMMs (W8A8)
    # No FP8 compute (Ampere, Turing): vLLM runs FP8 weights weight-only (W8A16, FP8 Marlin) and
    # stores an fp8 KV cache (FlashInfer or Triton attention); the modes say so in their names.
    w8a16 = not fp8 and (cc is None or cc >= FP8_WEIGHT_ONLY_CC)
    kv_ok = fp8 or cc is None or cc >= FP8_KV_CC
    fp8w = "fp8-w8a16" if w8a16 else "fp8-w"
    left: list[str] = []
    kv8 = {"kv_cache_dtype": "fp8"}
    who = gpu.name or "this GPU"
    if w8a16:
        left.append(f"{who} has no FP8 tensor cores (compute capability 8.9): fp8 weights run weight-only (W8A16, "
                    "FP8 Marlin), so modes fp8-w8a16*: half the weight memory, 16-bit matmuls"
                    + ("; fp8 KV as storage" if kv_ok else "; fp8 KV left out (needs 8.0, Ampere)"))
    elif not fp8:
        left.append(f"fp8 modes left out: {who} has no FP8 (weight-only fp8 needs compute capability 7.5, "
                    "an fp8 KV cache 8.0)")
    w8a16_note = ("fp8 weights, weight-only here (W8A16, FP8 Marlin: no FP8 tensor cores): half the weight memory "
                  "and weight reads; the matmuls stay 16-bit, plus a dequant")
    if own in ("awq", "gptq"):
        q = f"{own}_marlin" if cc is None or cc >= (8, 0) else own
        # vLLM 0.26.0 with float16 activations and an fp8 KV cache does not start (FlashAttention 3
        # wants bf16 with fp8 KV); bfloat16 does — and both modes keep the same dtype.
        modes = [
            {
                "name": f"{own}-int4",
                "dtype": act,
                "quantization": q,
                "#": f"the checkpoint's own {own.upper()} int4 weights (the baseline here)",
            }
        ]
        if kv_ok:
            modes.append({"name": f"{own}-int4+fp8-kv", "dtype": act, "quantization": q, **kv8})
        left.append('bf16 and fp8-weights modes need the unquantized checkpoint: add a mode with model = "/path/to/it"')
        return modes, left
    if own == "fp8":
        if not fp8 and not w8a16:
            raise UsageError(
                f"{model.arg} is an FP8 checkpoint and {who} runs no FP8 weights (compute capability 7.5 "
                "needed for weight-only W8A16): give the unquantized checkpoint"
            )
        modes = [
            {
                "name": fp8w,
                "dtype": act,
                "quantization": "fp8",
                "#": "the checkpoint's own fp8 weights (the baseline here)"
                + (f"; {w8a16_note}" if w8a16 else ""),
            },
        ]
        if kv_ok:
            modes.append({"name": f"{fp8w}+kv", "dtype": act, "quantization": "fp8", **kv8})
        return modes, left
    if own:
        modes = [
            {
                "name": _slug(own),
                "dtype": act,
                "#": f"the checkpoint's own {own} weights (vLLM reads its quantization_config)",
            }
        ]
        if kv_ok:
            modes.append({"name": f"{_slug(own)}+fp8-kv", "dtype": act, **kv8})
        return modes, left
    modes = [
        {
            "name": "bf16" if bf16 else "fp16",
            "dtype": act,
            "kv_cache_dtype": "auto",
            "#": "the baseline: every other mode is compared with it",
        }
    ]
    if kv_ok:
        modes.append({
            "name": "fp8-kv",
            "dtype": act,
            **kv8,
            "#": "KV cache in fp8: half the bytes per token, about 2x the KV tokens",
        })
    if fp8 or w8a16:
        modes.append({
            "name": fp8w,
            "dtype": act,
            "quantization": "fp8",
            "#": f"{w8a16_note} (quantized at load)" if w8a16 else
            "fp8 weights (quantized at load): about half the weight memory, FP8 GEMMs",
        })
        if kv_ok:
            modes.append({"name": f"{fp8w}+kv", "dtype": act, "quantization": "fp8", **kv8})
    return modes, left


def _weights_fmt(mode: dict[str, Any]) -> str:
    from kvtui.io.scenario.schema import Mode

    return Mode(name=mode["name"], dtype=mode.get("dtype", "auto"), quantization=mode.get("quantization", "")).weights


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return f"{v:g}" if isinstance(v, float) else str(v)
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + " }"
    return json.dumps(str(v))  # a TOML basic string: JSON's escapes are TOML's


def build_init(
    arg: str,
    gpu_name: str | None = None,
    engine: str | None = None,
    prompt: int = DEFAULT_PROMPT,
    output: int = DEFAULT_OUTPUT,
    max_model_len: int | None = None,
    util: float = DEFAULT_UTILIZATION,
    tp: int = 1,
    dummy: bool | None = None,
    name: str | None = None,
    command: str = "",
    states: Callable[[], tuple[Any, list[Any]]] | None = None,
) -> InitResult:
    from kvtui.runtime.engines.vllm.detect import vllm_install
    from kvtui.simulator.model.catalog import load_gpu, model_from_config
    from kvtui.simulator.model.estimator import estimate_memory, resolve_settings

    if not 0 < util <= 1:
        raise UsageError(f"--gpu-memory-utilization must be in (0, 1], got {util:g}")
    model = resolve_init_model(arg)
    gpu = detect_gpu(gpu_name, states)
    engine = engine or ("sim" if model.shape else "vllm")
    if model.shape and engine == "vllm":
        raise UsageError(
            f"{arg} is a bundled shape for the simulator: --engine vllm needs a model directory or a Hugging Face id "
            f"(a dummy-weights directory of that shape: python -m kvtui.runtime.engines.vllm.shapedummy {arg} DIR)"
        )
    spec = model_from_config(model.config, name=Path(model.value).name or model.value, source=model.where)
    modes, left = _modes(model, gpu)
    notes: list[str] = []
    vllm = vllm_install()
    # --- max_model_len: the config's, lowered when one request of it does not fit -------------------
    cfg_len = spec.max_position or 0
    mml = max_model_len or cfg_len or 8192
    mml_note = (
        f"from config.json (max_position_embeddings {cfg_len})"
        if cfg_len and not max_model_len
        else ("--max-model-len" if max_model_len else "config.json gives none: 8192")
    )
    cat = load_gpu(gpu.name) if gpu.name else None

    def settings(g: GpuSpec, length: int) -> EngineSettings:
        return resolve_settings(spec, g, None, max_model_len=length, gpu_memory_utilization=util, tp=tp)

    if cat is not None and not max_model_len:
        # vLLM refuses a mode whose KV cache cannot hold one request of max_model_len: lower it to
        # what the tightest mode that has any KV cache holds (a power of two)
        kvs = [
            estimate_memory(spec, cat, _weights_fmt(m), m.get("kv_cache_dtype", "auto"), settings(cat, mml)).kv_tokens
            for m in modes
        ]
        positive = [k for k in kvs if k > 0]
        if positive and min(positive) < mml:
            fit = 1 << (min(positive).bit_length() - 1)
            if fit >= min(mml, 256):
                mml_note = (
                    f"config.json says {cfg_len}, lowered: one request that long needs more KV cache than a mode "
                    f"has on {cat.name} (estimate: {min(positive):,} tokens)"
                )
                mml = fit
    if prompt + output > mml:
        prompt = max(1, mml - output)
        notes.append(f"prompt lowered to {prompt} tokens: prompt + output must fit max_model_len {mml}")
    # --- the estimator's prediction per mode ----------------------------------------------------------
    pred_lines: list[str] = []
    best, cap = 0, 1024
    if cat is not None:
        for m in modes:
            est = estimate_memory(
                spec,
                cat,
                _weights_fmt(m),
                m.get("kv_cache_dtype", "auto"),
                settings(cat, mml),
                prompt_tokens=prompt,
                output_tokens=output,
            )
            if est.problem:
                pred_lines.append(f"{m['name']:<16} does not fit: {est.problem}")
                m["unfit"] = est.problem
                continue
            best = max(best, est.admitted_concurrency or 0)
            cap = est.settings.max_num_seqs
            pred_lines.append(
                f"{m['name']:<16} weights {est.weights_gib:6.2f} GiB, KV {est.kv_cache_gib:6.2f} GiB = "
                f"{est.kv_tokens:>9,} tokens -> KV-bound concurrency {est.kv_bound_concurrency:,}"
                + (
                    f" (admitted {est.admitted_concurrency:,}: max_num_seqs)"
                    if est.admitted_concurrency != est.kv_bound_concurrency
                    else ""
                )
            )
    else:
        pred_lines.append("(no prediction: the GPU is not in kvtui's catalogue; --gpu NAME for the nearest)")
    fitting = [m for m in modes if not m.get("unfit")]
    # a mode vLLM would refuse to start (only an estimate on a known GPU marks one): left out, said why
    if cat is not None and fitting and len(fitting) < len(modes):
        left += [
            f"mode {m['name']} left out: it does not fit on {cat.name} (estimate above); --tp or a larger GPU"
            for m in modes
            if m.get("unfit")
        ]
        modes = fitting
    elif not fitting and cat is not None:
        notes.append(f"no mode fits on {cat.name} by the estimate: --tp N, a larger GPU or a smaller model")
    ramp_max = 64
    while ramp_max < 2 * best and ramp_max < cap:  # vLLM admits at most max_num_seqs at once
        ramp_max *= 2
    # --- the text ------------------------------------------------------------------------------------
    base = _slug(Path(model.value).name if not model.shape else model.value)
    name = name or f"{base}-{_slug(gpu.name or 'gpu')}"
    kind = ("MoE " + f"{spec.num_experts} experts, {spec.experts_per_tok} active" if spec.is_moe else "dense") + (
        ", MLA" if spec.is_mla else ""
    )
    from kvtui.runtime.engines.vllm.modelref import checkpoint_quantization

    own = checkpoint_quantization(model.config)
    dtype = model.config.get("torch_dtype") or model.config.get("dtype") or "?"
    dummy = (not model.has_weights) if dummy is None else dummy
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(clock.time()))
    H = []
    H.append(f"# {name}: written by kvtui init on {when}")
    if command:
        H.append(f"#   {command}")
    H.append(f"# Model: {model.value} — {model.where}")
    H.append(
        f"#   {model.config.get('model_type', '?')}, {kind}, "
        f"{spec.total_params / 1e9:.2f} B params, {spec.layers} layers, "
        + (
            f"KV latent {spec.kv_lora_rank}+{spec.qk_rope_dim}"
            if spec.is_mla
            else f"{spec.kv_heads} KV heads x {spec.head_dim}"
        )
        + f", {dtype}"
        + (f", checkpoint quantization: {own}" if own else "")
    )
    H.append(f"# GPU: {gpu.seen}")
    H.append(f"# vLLM: {vllm.describe()}" + ("" if vllm.found else " — pip install 'kvtui[vllm]' on the GPU box"))
    H.append("#")
    if cat is not None:
        H.append(
            f"# KV-bound prediction per mode on {cat.name}{' x' + str(tp) + ' (per GPU)' if tp > 1 else ''}, "
            f"{prompt} + {output} tokens a request, gpu_memory_utilization {util:g} (kvtui estimate: the"
        )
        H.append("# memory formula, not a measurement; the latency knee often comes first — the run measures it):")
    for line in pred_lines:
        H.append(f"#   {line}")
    for line in left + notes:
        H.append(f"# Note: {line}")
    H.append("#")
    what_if = sim_line(REF, engine, model.value, model.sim_value)
    if engine == "sim":  # a bundled shape (or --engine sim): this scenario IS a simulation, said as one
        from kvtui.simulator.model.catalog import bundled_hf_id

        hf = bundled_hf_id(model.value) if model.shape else None
        H.append(f"# A SIMULATED what-if: kvtui's simulated vLLM runs this scenario on a modelled {gpu.name} "
                 "(no GPU, no weights).")
        H.append(f"# The answer in seconds:  kvtui run {REF} --fast --headless")
        H.append(f"# Watch it live (slow on a small host; the TUI shows its ETA):  kvtui {REF}")
        H.append("# Measure it for real, on the GPU box:  kvtui init /path/to/model"
                 + (f"   (or a Hugging Face id: kvtui init {hf})" if hf else "   (or a Hugging Face id)"))
    elif gpu.source == "seen":
        H.append(f"# Run it:             kvtui run {REF} --headless       (the TUI: kvtui {REF})")
        H.append(f"# Simulated what-if:  {what_if}")
    else:  # not this box's GPU: the what-if first, the real run for a machine that has one
        assumed = " assumed" if gpu.source == "assumed" else ""
        H.append(f"# Simulated what-if:  {what_if}   (on the {gpu.name}{assumed})")
        H.append(f"# Run it (on a machine with that GPU): kvtui run {REF} --headless")
    B: list[str] = [
        f"name = {_toml(name)}",
        f"description = {_toml(f'{model.value}: ' + ' vs '.join(m['name'] for m in modes))}",
        "seed = 0",
        "",
        "[server]",
        f"engine = {_toml(engine)}",
    ]
    # The GPU the predictions are for, always written: every simulated path (`--engine sim`, the
    # what-if, the predictions) reads it, so an H100 what-if is never simulated on the default H200.
    gpu_note = {"seen": "the GPU seen here", "what-if": "--gpu: a what-if", "assumed": "assumed: no GPU seen here"}
    note = gpu_note.get(gpu.source, gpu.source)
    B.append(f"gpu = {_toml(gpu.name or WHAT_IF_GPU)}            # simulated GPU ({note}); a real run uses its own")
    if engine == "sim":
        B.append(f"model = {_toml(model.sim_value)}")
    else:
        B.append(f"model = {_toml(model.value)}")
        B.append(f"served_model_name = {_toml(base)}")
        if dummy:
            B.append(
                'load_format = "dummy"     # random weights: real speed and memory, meaningless answers'
                + ("" if model.has_weights else " (no weight files found)")
            )
    B.append(f"max_model_len = {mml}         # {mml_note}")
    B.append(f"gpu_memory_utilization = {util:g}   # vLLM's share of GPU memory (weights + activations + KV cache)")
    if tp > 1:
        B.append(f"tensor_parallel_size = {tp}")
    B.append("enable_prefix_caching = false   # unique prompts anyway; no prompt-cache flattery in the figures")
    for m in modes:
        B += ["", "[[modes]]"]
        if m.get("#"):
            B.append(f"# {m['#']}")
        for k in ("name", "dtype", "kv_cache_dtype", "quantization"):
            if k in m:
                B.append(f"{k} = {_toml(m[k])}")
    B += [
        "",
        "[workload]",
        "# Tokens per request: every request is exactly this long (jitter 0.1 = +-10 %, "
        "so prefills do not march in step).",
        f"prompt_tokens = {prompt}",
        f"output_tokens = {output}",
        "ignore_eos = true",
        "",
        "[ramp]",
        "# The search starts at the simulator's predicted knee (where it covers this GPU and model; else at",
        "# the KV-bound concurrency the server reports), brackets it, bisects, and confirms the knee by",
        "# repeating the last pass and the first fail. \"fast\" or \"linear\" to choose another.",
        "start = 1",
        f"max = {ramp_max}                 # about 2x the largest prediction above, at most max_num_seqs",
        'search = "auto"',
        "",
        "[slo]",
        "# Defaults for an interactive chat: the first token within 2 s for 95 % of requests, and",
        "# 50 ms per output token after it (20 tokens/s, faster than anyone reads). Failed requests count as",
        "# infinitely slow; more than 1 % errors fails a step.",
        "ttft_p95_ms = 2000",
        "tpot_p95_ms = 50",
        "max_error_rate = 0.01",
        "",
        "[cost]",
        "gpu_hourly_usd = 3.50          # for $/Mtok: your price per GPU-hour",
    ]
    text = "\n".join(H) + "\n\n" + _sized_window("\n".join(B)) + "\n"
    return InitResult(name=name, text=text, notes=left + notes, gpu=gpu, engine=engine,
                      sim_model=model.sim_value if model.sim_value != model.value else "")


def _sized_window(body: str) -> str:
    """The scenario body with [ramp] window_s sized for its first mode's predicted knee where the
    default window is too short to hold the whole requests a TPOT p95 counts
    (kvtui.explore.window_choice): a step then spends most of its time measuring. Unchanged where
    nothing is predicted or the default holds them."""
    import textwrap
    import tomllib

    from kvtui.explore.window_choice import suggest_window
    from kvtui.io.scenario.loader import scenario_from_dict

    anchor = 'search = "auto"'  # where the line goes: looked for before the prediction is paid for
    if anchor not in body:
        return body
    try:
        sc = scenario_from_dict(tomllib.loads(body), source="kvtui init")
    except (KvtuiError, tomllib.TOMLDecodeError):
        return body
    choice = suggest_window(sc)
    if choice is None:
        return body
    lines = []
    if choice.no_knee:
        said = "; ".join(f"{m}: {why}" for m, why in choice.no_knee)
        note = (f"Predicted (SIMULATED, kvtui's simulator): no load meets the SLO in {said}. The run still "
                f"measures it: one step at the lowest load, until the whole requests a p95 needs have finished.")
        lines += [f"# {x}" for x in textwrap.wrap(note, 98)]
    if choice.window_s <= sc.ramp.window_s:
        return body.replace(anchor, anchor + "\n" + "\n".join(lines), 1) if lines else body
    where = f"{'At the first load above' if choice.at_fail else 'At'} {choice.mode or sc.modes[0].name}'s"
    say = (f"The window: {choice.window_s:g} s, not the default {sc.ramp.window_s:g}. {where} "
           f"predicted knee ({choice.load:g} requests at once, each ~{choice.e2e_s:.1f} s) a step's TPOT p95 "
           f"counts whole requests, and a shorter window waits for them after it instead of measuring: "
           f"{choice.window_s:g} s is {choice.why}.")
    lines += [f"# {x}" for x in textwrap.wrap(say, 98)] + [f"window_s = {choice.window_s:g}"]
    return body.replace(anchor, anchor + "\n" + "\n".join(lines), 1)


def sim_line(ref: str, engine: str, value: str, sim_value: str) -> str:
    """The simulated what-if's command line for the scenario at `ref`."""
    return (f"kvtui run {ref} --engine sim --fast --headless"
            + (f" --set server.model='\"{sim_value}\"'" if engine != "sim" and sim_value != value else ""))


def write_scenario(text: str, out: Path, force: bool = False) -> Path:
    """Check `text` with the scenario loader, then write it atomically (temp + rename)."""
    from kvtui.errors import KvtuiError, ScenarioError
    from kvtui.io.scenario import load_scenario
    from kvtui.safeio import check_output

    out = check_output(out, "scenario")
    if out.exists() and not force:
        raise UsageError(f"{out} exists: --force to replace it, or --out another path")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        try:
            load_scenario(tmp)
        except ScenarioError as e:  # a bug of ours: never leave a scenario the loader refuses
            raise KvtuiError(
                f"kvtui init wrote a scenario its own loader refuses ({'; '.join(e.problems)}): please report it"
            )
        check_output(out, "scenario")  # again at the rename: the target may have changed meanwhile
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def command_line(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in ["kvtui", *argv])


def init_into_user_dir(arg: str) -> tuple[Path | None, str]:
    """The setup screen's way in: when `arg` names a model (not a scenario), write its scenario into
    the user's directory (or find the one written before) and return (path, what happened).
    (None, "") when `arg` is not a model at all, so the caller reports its own problem."""
    from kvtui import paths
    from kvtui.runtime.engines.vllm.modelref import CACHED, DIR, resolve_model
    from kvtui.simulator.model.catalog import bundled_models

    if arg.endswith(".toml"):
        return None, ""
    is_shape = arg.lower() in [n.lower() for n in bundled_models()]
    if not is_shape and resolve_model(arg).kind not in (CACHED, DIR):
        return None, ""
    res = build_init(arg, command=command_line(["init", arg]))
    out = paths.user_subdir("scenarios") / f"{res.name}.toml"
    if out.exists():
        return out, f"{out} exists (from an earlier kvtui init): opened it; `kvtui init {arg} --force` rewrites it"
    write_scenario(res.text.replace(REF, shlex.quote(res.name)), out)
    said = [f"kvtui init wrote {out} for {arg}", *res.notes]
    gpu = res.gpu
    if gpu is not None and gpu.source == "assumed" and res.engine != "sim":
        # As `kvtui init` says on stdout: the GPU was assumed, and here only its simulation runs.
        said.append(f"GPU {gpu.name} assumed (no GPU seen here); simulate it: "
                    f"{sim_line(shlex.quote(res.name), res.engine, '', res.sim_model)}")
    return out, "; ".join(said)
