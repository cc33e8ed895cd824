"""`kvtui sim serve`: the simulated vLLM on 127.0.0.1 (vLLM's HTTP surface, SIMULATED)."""

from __future__ import annotations

import argparse
import sys

from kvtui.errors import UsageError


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("sim", help="the built-in simulated vLLM",
                       description="The built-in simulated vLLM (always labelled SIMULATED).")
    ssub = p.add_subparsers(dest="sim_command", metavar="SUBCOMMAND")
    s = ssub.add_parser("serve", help="serve vLLM's HTTP API from the simulator",
                        description="Serve vLLM's HTTP API (completions, chat, /metrics, /tokenize …) from a "
                                    "physical model of a GPU.")
    s.add_argument("--gpu", default="H200", help="GPU from the catalogue (default H200)")
    s.add_argument("--model", default="llama-3.1-8b", help="bundled model name or a config.json path")
    s.add_argument("--served-model-name", default=None, help="name clients use (default: the model)")
    s.add_argument("--mode", default="", help="a label for the precision mode (shown in /kvtui/sim)")
    s.add_argument("--dtype", default="auto")
    s.add_argument("--kv-cache-dtype", default="auto")
    s.add_argument("--quantization", default="")
    s.add_argument("--max-model-len", type=int, default=8192)
    s.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    s.add_argument("--kv-cache-memory-bytes", type=int, default=0)
    s.add_argument("--max-num-seqs", type=int, default=0)
    s.add_argument("--max-num-batched-tokens", type=int, default=0)
    s.add_argument("--tensor-parallel-size", type=int, default=1)
    s.add_argument("--no-enable-prefix-caching", action="store_true")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--api-key", default=None, help="require this key (or set KVTUI_SIM_API_KEY; default: none)")
    s.add_argument("--time-scale", type=float, default=1.0, help="wall seconds per modelled second (slow motion > 1)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--calibration", default=None, metavar="TOML",
                   help="the simulator's calibration (default: the bundled H200 fit; `kvtui calibrate` writes one)")
    s.add_argument("--knee", type=int, default=0, help="test model: TPOT slows down above this many running requests")
    s.add_argument("--knee-tpot-ms", type=float, default=20.0)
    s.add_argument("--knee-slowdown", type=float, default=2.0)
    s.add_argument("--knee-max-seqs", type=int, default=256)
    s.set_defaults(func=run)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])
    return p


def build_model(args: argparse.Namespace):
    """The engine model the server drives: the knee test model, or the vLLM scheduler model."""
    if args.knee:
        from kvtui.simulator.engine.knee import KneeModel

        return KneeModel(args.knee, args.knee_tpot_ms / 1000, args.knee_slowdown, args.knee_max_seqs), 128256
    from kvtui.io.scenario.schema import Mode, Server
    from kvtui.simulator.engine.scheduler import SchedulerSim
    from kvtui.simulator.model import catalog

    model = catalog.load_model(args.model)
    gpu = catalog.load_gpu(args.gpu)
    mode = Mode(name=args.mode or "sim", dtype=args.dtype, kv_cache_dtype=args.kv_cache_dtype,
                quantization=args.quantization)
    server = Server(
        engine="sim", model=args.model, max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization, kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
        tensor_parallel_size=args.tensor_parallel_size, enable_prefix_caching=not args.no_enable_prefix_caching,
        gpu=args.gpu,
    )
    vocab = int(getattr(model, "vocab_size", 128256) or 128256)
    from kvtui.simulator.model.calibration_file import read_calibration

    cal = read_calibration(args.calibration) if getattr(args, "calibration", None) else None
    return SchedulerSim(model, gpu, mode, server, calibration=cal, seed=args.seed), vocab


def run(args: argparse.Namespace) -> int:
    if getattr(args, "sim_command", None) != "serve":
        raise UsageError("usage: kvtui sim serve [--gpu NAME] [--model NAME|CONFIG] [--port N] (see kvtui sim serve "
                         "--help)")
    if args.time_scale <= 0:
        raise UsageError(f"--time-scale must be > 0, got {args.time_scale}")
    from kvtui.simulator.engine.server import SimServer, env_api_key, print_startup, serve

    try:
        model, vocab = build_model(args)
    except (KeyError, FileNotFoundError, ValueError) as e:
        raise UsageError(f"sim serve: {e}")
    name = args.served_model_name or (args.model if not args.knee else "knee")
    facts = model.facts()
    print_startup(facts, name, args.gpu, args.max_model_len)
    server = SimServer(model, name, args.max_model_len, args.api_key or env_api_key(), args.time_scale,
                       gpu_name=args.gpu, vocab_size=vocab, mode_name=args.mode, seed=args.seed)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"kvtui: warning: serving on {args.host}, reachable from the network", file=sys.stderr)
    serve(server, args.host, args.port)
    return 0
