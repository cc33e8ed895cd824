"""`kvtui init MODEL`: a commented scenario for this model on this GPU (see kvtui/init.py).

kvtui init /models/Llama-3.1-8B-Instruct            # → <user dir>/scenarios/llama-3.1-8b-instruct-h200.toml
kvtui init meta-llama/Llama-3.1-8B --prompt 4096 --output 512
kvtui init llama-3.1-70b --gpu H100 --tp 2 --stdout   # a bundled shape, a what-if GPU
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from kvtui import paths


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "init",
        help="write a commented scenario for a model on this GPU (modes, SLO, KV-bound predictions)",
        description="Reads MODEL's config.json (dense, MoE, MLA; AWQ/GPTQ/FP8 quantization_config), the GPUs NVML sees "
        "and the vLLM version, and writes a scenario with the precision modes that make sense here and the "
        "estimator's KV-bound prediction per mode in its header. "
        "Offline: a Hugging Face id must be in the local cache.",
    )
    p.add_argument(
        "model",
        metavar="MODEL",
        help="a model directory (with config.json), a Hugging Face id in the local cache, "
        "or a bundled shape (llama-3.1-8b, mixtral-8x7b, deepseek-v2-lite, …)",
    )
    p.add_argument(
        "--gpu", metavar="NAME", help="predict for this GPU instead of the one NVML sees (H200, H100, L40S, L4, …)"
    )
    p.add_argument("--engine", choices=["vllm", "sim"], help="default: vllm for a model, sim for a bundled shape")
    p.add_argument("--prompt", type=int, default=2048, metavar="N", help="prompt tokens per request (default 2048)")
    p.add_argument("--output", type=int, default=256, metavar="N", help="output tokens per request (default 256)")
    p.add_argument(
        "--max-model-len",
        type=int,
        metavar="N",
        help="default: the config's max_position_embeddings, lowered if it cannot fit",
    )
    p.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        metavar="F",
        help="vLLM's share of GPU memory (default 0.9)",
    )
    p.add_argument("--tp", type=int, default=1, metavar="N", help="tensor parallel size")
    p.add_argument(
        "--dummy",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="load_format = dummy (random weights; default: when the directory has no weight files)",
    )
    p.add_argument("--name", help="the scenario's name (default: MODEL-GPU)")
    p.add_argument(
        "--out", "-o", metavar="PATH", help="where to write (default: <user dir>/scenarios/NAME.toml); - prints it"
    )
    p.add_argument("--stdout", action="store_true", help="print the scenario instead of writing it")
    p.add_argument("--force", action="store_true", help="replace an existing file")
    p.add_argument(
        "--user-dir",
        metavar="DIR",
        help=f"the per-user directory (default: ${paths.ENV_HOME} or the platform's config dir)",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from kvtui.errors import UsageError
    from kvtui.init import REF, build_init, command_line, write_scenario

    for flag, v in (("--prompt", args.prompt), ("--output", args.output), ("--tp", args.tp)):
        if v < 1:
            raise UsageError(f"{flag} must be ≥ 1, got {v}")
    if args.out and args.out != "-":  # a FIFO, a device, a link: refused, --force or not (kvtui.safeio)
        from kvtui.safeio import check_output

        check_output(args.out, "scenario (--out)")
    res = build_init(
        args.model,
        gpu_name=args.gpu,
        engine=args.engine,
        prompt=args.prompt,
        output=args.output,
        max_model_len=args.max_model_len,
        util=args.gpu_memory_utilization,
        tp=args.tp,
        dummy=args.dummy,
        name=args.name,
        command=command_line(sys.argv[1:] if sys.argv[1:2] == ["init"] else ["init", args.model]),
    )
    if args.stdout or args.out == "-":
        sys.stdout.write(res.text.replace(REF, "FILE.toml"))
        return 0
    out = Path(args.out) if args.out else paths.user_subdir("scenarios", args.user_dir) / f"{res.name}.toml"
    # by name when `kvtui run NAME` finds it (the user dir kvtui will look in), else by path
    what = res.name if out.parent.resolve() == paths.user_subdir("scenarios").resolve() else str(out)
    write_scenario(res.text.replace(REF, shlex.quote(what)), out, force=args.force)
    for n in res.notes:
        print(f"kvtui: note: {n}")
    print(f"kvtui: wrote {out}")
    from kvtui.init import sim_line

    q = shlex.quote(what)
    gpu = res.gpu
    if gpu is not None and gpu.source != "seen" and res.engine != "sim":
        # Not this box's GPU: the what-if is what runs here; a real run would fail its pre-flight.
        said = "assumed (no GPU seen here; --gpu NAME for another)" if gpu.source == "assumed" else "a what-if (--gpu)"
        print(f"kvtui: GPU {gpu.name}: {said}")
        print(f"kvtui: simulate it:  {sim_line(q, res.engine, '', res.sim_model)}")
        print(f"kvtui: on a machine with {'an' if gpu.name[:1] in 'AEFHILMNORSX' else 'a'} {gpu.name}:  "
              f"kvtui run {q} --headless   (or the TUI: kvtui {q})")
    elif res.engine == "sim":
        from kvtui.explore.pacing import PACE_SPEED

        # A bundled shape (or --engine sim): kvtui's simulator runs it, on the scenario's GPU; said as such.
        name = gpu.name if gpu is not None and gpu.name else "the scenario's GPU"
        print(f"kvtui: GPU {name} (SIMULATED: kvtui's simulated vLLM runs this scenario)")
        print(f"kvtui: the answer in seconds:  kvtui run {q} --fast --headless   (or its answer screen: "
              f"kvtui {q} --fast --start)")
        print(f"kvtui: watch it live:  kvtui {q}   (the same simulation paced to the wall, ×{PACE_SPEED:g} its "
              "modelled time: the TUI shows its ETA; j jumps to the answer)")
        if _is_shape(args.model):
            from kvtui.simulator.model.catalog import bundled_hf_id

            hf = bundled_hf_id(args.model)
            print("kvtui: measure it for real, on the GPU box:  kvtui init /path/to/model"
                  + (f"   (or a Hugging Face id: kvtui init {hf})" if hf else "   (or a Hugging Face id)"))
    else:
        print(f"kvtui: run it:  kvtui run {q} --headless   (or the TUI: kvtui {q})")
    print(f"kvtui: edit it:  ${{EDITOR:-vi}} {shlex.quote(str(out))}")
    return 0


def _is_shape(arg: str) -> bool:
    """Whether `arg` names a bundled shape (the simulator's), not a model vLLM can load."""
    from kvtui.simulator.model.catalog import bundled_models

    return str(arg).lower() in {n.lower() for n in bundled_models()}
