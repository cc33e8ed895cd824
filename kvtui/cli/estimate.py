"""`kvtui estimate`: the memory formula as a table, no GPU and no server needed.

    kvtui estimate --model llama-3.1-8b --gpu H200
    kvtui estimate --model ./config.json --gpu H100 --weights fp8 --kv-dtype fp8 --prompt 2048 --output 256
    kvtui estimate --model llama-3.1-70b --gpu H200 --tp 4 --context 8192 --json
"""

from __future__ import annotations

import argparse
import json

from kvtui.errors import UsageError

WEIGHTS = ("bf16", "fp8", "int8", "int4")
KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {s!r}")
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def add_parser(sub):
    p = sub.add_parser(
        "estimate",
        help="KV-cache memory, KV tokens and KV-bound concurrency for a model on a GPU (no GPU needed)",
        description="The memory formula behind kvtui: GPU memory x utilization - weights - activation peak - "
        "non-torch memory = KV cache; KV cache / (KV bytes per token) = KV tokens; KV tokens / tokens per request "
        "= the KV-bound concurrency. Each term is printed.",
    )
    p.add_argument("--model", required=True, metavar="NAME|CONFIG",
                   help="a bundled model (llama-3.1-8b, llama-3.1-70b, qwen2.5-7b, qwen2.5-32b, mixtral-8x7b, "
                        "deepseek-v2-lite, deepseek-v3, …) or a Hugging Face config.json (file or folder)")
    p.add_argument("--gpu", required=True, metavar="NAME", help="H200, H100, A100-80G, L40S, L4, B200, RTX-4090")
    p.add_argument("--kv-dtype", default="auto", choices=KV_DTYPES,
                   help="KV cache dtype: auto (the model dtype) or fp8 (1 byte)")
    p.add_argument("--weights", default=None, choices=WEIGHTS,
                   help="weight format (default: the checkpoint's: int4 for AWQ/GPTQ configs, else bf16)")
    p.add_argument("--context", type=_positive_int, default=None, metavar="N",
                   help="tokens per request (prompt + output)")
    p.add_argument("--prompt", type=_positive_int, default=None, metavar="N", help="prompt tokens per request")
    p.add_argument("--output", type=_positive_int, default=None, metavar="N", help="output tokens per request")
    p.add_argument("--max-model-len", type=_positive_int, default=None, metavar="N",
                   help="vLLM's --max-model-len (default: the model's, capped at 8192 for the printed max concurrency)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, metavar="F",
                   help="vLLM's budget share (default 0.9)")
    p.add_argument("--kv-cache-memory-bytes", type=_positive_int, default=None, metavar="N",
                   help="a fixed KV cache size instead")
    p.add_argument("--max-num-seqs", type=_positive_int, default=None, metavar="N")
    p.add_argument("--max-num-batched-tokens", type=_positive_int, default=None, metavar="N")
    p.add_argument("--tp", type=_positive_int, default=1, metavar="N", help="tensor parallel size (figures per GPU)")
    p.add_argument("--calibration", default=None, metavar="TOML",
                   help="calibration file (default: the bundled H200 fit)")
    p.add_argument("--json", action="store_true", help="print the breakdown as JSON")
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    from kvtui.simulator.model.catalog import load_gpu, load_model
    from kvtui.simulator.model.estimator import estimate_memory, resolve_settings
    from kvtui.simulator.model.roofline import load_calibration

    if args.context and (args.prompt or args.output):
        raise UsageError("give --context N, or --prompt N and --output N, not both")
    if not 0 < args.gpu_memory_utilization <= 1:
        raise UsageError(f"--gpu-memory-utilization must be in (0, 1], got {args.gpu_memory_utilization}")
    model = load_model(args.model)
    gpu = load_gpu(args.gpu)
    if args.calibration:  # a `kvtui calibrate` file: checked field by field, refused in one line
        from kvtui.simulator.model.calibration_file import read_calibration

        cal = read_calibration(args.calibration)
    else:
        cal = load_calibration(None)
    weights = args.weights or ("int4" if model.quant_method in ("awq", "gptq", "awq_marlin", "gptq_marlin") else "bf16")
    mml = args.max_model_len or min(model.max_position or 8192, 8192)
    settings = resolve_settings(
        model, gpu, None,
        max_model_len=mml,
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        tp=args.tp,
    )
    req = args.context or ((args.prompt or 0) + (args.output or 0)) or None
    if req and req > settings.max_model_len:
        raise UsageError(f"{req} tokens per request exceed max_model_len {settings.max_model_len} "
                         "(raise --max-model-len)")
    est = estimate_memory(model, gpu, weights, args.kv_dtype, settings, cal,
                          prompt_tokens=args.prompt, output_tokens=args.output, context_tokens=args.context)
    # bf16 and fp8 side by side (weights × KV cache), the figures people compare first.
    pairs = sorted(set([(weights, args.kv_dtype), ("bf16", "auto"), ("bf16", "fp8"), ("fp8", "auto"),
                        ("fp8", "fp8")]), key=pair_order)
    side = []
    for w_, kv_ in pairs:
        e = estimate_memory(model, gpu, w_, kv_, settings, cal,
                            prompt_tokens=args.prompt, output_tokens=args.output, context_tokens=args.context)
        side.append(e)
    alias = alias_note(args.gpu, gpu.name)
    if args.json:
        d = est.to_dict()
        d["gpu_asked"] = args.gpu
        d["side_by_side"] = [{"weights": e.weights, "kv_cache_dtype": e.kv_cache_dtype, "fits": e.fits,
                              "kv_cache_gib": round(e.kv_cache_gib, 3), "kv_tokens": e.kv_tokens,
                              "kv_bound_concurrency": e.kv_bound_concurrency,
                              "max_concurrency_reported": e.max_concurrency_reported} for e in side]
        print(json.dumps(d, indent=2, default=str))
    else:
        print(verdict_line(est))
        if alias:
            print(alias)
        print()
        print(est.table())
        print()
        print(side_by_side(side, req))
    return 0 if est.fits else 1  # a script asking whether it fits gets the answer in the exit code too


# The side-by-side rows, in one order whatever was asked: weights widest first, then the KV cache
# dtype with "auto" (the weights' own) first; names not listed after, alphabetically.
WEIGHTS_ORDER = ("fp32", "bf16", "fp16", "auto", "fp8", "int8", "awq", "gptq", "int4")


def pair_order(pair: tuple[str, str]) -> tuple[int, str, int, str]:
    w, kv = str(pair[0]), str(pair[1])
    return (WEIGHTS_ORDER.index(w) if w in WEIGHTS_ORDER else len(WEIGHTS_ORDER), w, 0 if kv == "auto" else 1, kv)


def alias_note(asked: str, name: str) -> str | None:
    """Say when a GPU name was read as another (A100 → A100-80G), never silently."""
    if asked.strip().lower().replace(" ", "-") == name.lower():
        return None
    return f"note: --gpu {asked} read as {name} (the catalogue's entry for it); name it exactly to be sure"


def verdict_line(est) -> str:
    where = (f"{est.model} on {est.gpu}" + (f" x{est.tp}" if est.tp > 1 else "")
             + f" (weights {est.weights}, KV {est.kv_cache_dtype})")
    if not est.fits:
        return f"DOES NOT FIT: {where}: {est.problem}"
    conc = (f", {est.kv_bound_concurrency:,} requests of {est.request_tokens} tokens at once" if est.request_tokens
            else f", {est.max_concurrency_reported:.2f}x max_model_len requests")
    return f"FITS: {where}: {est.kv_cache_gib:.2f} GiB KV cache = {est.kv_tokens:,} KV tokens{conc}"


def side_by_side(side, req) -> str:
    from kvtui.report.text import table

    head = ["weights", "KV cache dtype", "KV cache GiB", "KV tokens",
            f"KV-bound c @{req} tok" if req else "max conc @max_model_len", "fits"]
    rows = []
    for e in side:
        kv = f"{e.kv_cache_gib:.2f}" if e.kv_cache_gib >= 0 else f"none (short {-e.kv_cache_gib:.1f})"
        conc = ((f"{e.kv_bound_concurrency:,}" if e.kv_bound_concurrency is not None else "—") if req
                else f"{e.max_concurrency_reported:.2f}x")
        rows.append([e.weights, e.kv_cache_dtype, kv, f"{e.kv_tokens:,}", conc, "yes" if e.fits else "NO"])
    return "bf16 / fp8 side by side: weights widest first, then the KV cache dtype (auto first)\n" + table(head, rows)
