"""`kvtui import RESULT.json… --out SNAPSHOT.json`: `vllm bench serve` results as a kvtui snapshot."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub):
    p = sub.add_parser(
        "import", help="turn `vllm bench serve` result JSON files into a snapshot",
        description="Each `vllm bench serve --save-result` file becomes one step; files group into modes by --mode, "
                    "the result's label, or the file name without its _c<N> suffix (a_c32.json → mode a). "
                    "Steps are judged against the SLO of --scenario/--set. "
                    "Figures the bench does not report stay empty.",
    )
    p.add_argument("files", nargs="+", metavar="RESULT.json", help="vllm bench serve result files")
    p.add_argument("--out", "-o", required=True, help="snapshot to write")
    p.add_argument("--mode", help="put every file into this one mode")
    p.add_argument("--log", action="append", default=[], metavar="MODE=PATH",
                   help="that mode's vLLM startup log: weights, KV cache, version and warnings from it (repeatable)")
    p.add_argument("--scenario", help="scenario file whose SLO and cost judge the steps (default: kvtui's defaults)")
    p.add_argument("--set", action="append", dest="overrides", default=[], metavar="KEY=VALUE",
                   help="override a scenario value, e.g. --set slo.ttft_p99_ms=2000 --set cost.gpu_hourly_usd=3.2")
    p.add_argument("--gpu", help="label: the GPU the results came from (not in the bench file)")
    p.add_argument("--vllm-version", help="label: the vLLM version (not in the bench file; a --log gives it too)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from kvtui.safeio import check_output

    check_output(args.out, "snapshot (--out)")  # a FIFO, a device, a link: refused before anything is read
    from kvtui.errors import UsageError
    from kvtui.io.scenario import load_scenario
    from kvtui.io.snapshot.file import dumps
    from kvtui.report.compare import compare_modes
    from kvtui.report.export import write_text_private
    from kvtui.report.importers import import_vllm_bench
    from kvtui.report.text import comparison_table
    from kvtui.secrets import scrub

    logs = {}
    for item in args.log:
        if "=" not in item:
            raise UsageError(f"--log {item}: expected MODE=PATH")
        k, v = item.split("=", 1)
        logs[k] = v
    scenario = (load_scenario(args.scenario, args.overrides, allow_env=True) if (args.scenario or args.overrides)
                else None)
    from kvtui.report.wellformed import SHAPE_ERRORS
    from kvtui.terminal import printable

    try:  # a wrong-typed field in a bench file is the file's fault: one line, exit 2
        doc = import_vllm_bench(args.files, scenario=scenario, mode=args.mode, logs=logs, gpu=args.gpu,
                                version=args.vllm_version)
        doc["comparison"] = compare_modes(doc)
        doc = scrub(doc)
        table = comparison_table(doc)
    except SHAPE_ERRORS as e:
        detail = str(e).splitlines()[0][:160] if str(e) else ""
        raise UsageError(f"{', '.join(args.files)}: not a `vllm bench serve` result kvtui can read "
                         f"({type(e).__name__}{': ' + detail if detail else ''})") from None
    out = Path(args.out)
    from kvtui.io.snapshot.outclaim import refuse_overwriting_inputs

    refuse_overwriting_inputs(out, [Path(f) for f in args.files], "import")
    if not out.parent.exists():
        try:  # --out runs/new/x.json: make the folder, and say so
            out.parent.mkdir(parents=True)
        except OSError as e:
            raise UsageError(f"--out {out}: cannot create the folder {out.parent}: {e.strerror or e}")
        print(f"kvtui: created the folder {out.parent}", file=sys.stderr)
    from kvtui.report.wellformed import require_facts

    # What no reader would open is not written: the same validator as every reader's.
    require_facts(doc, ", ".join(args.files))
    text = dumps(doc) + "\n"
    try:
        from kvtui.safeio import loads

        loads(text)  # and it reads back (a 1e300 once made a file no reader could open)
    except ValueError as e:
        raise UsageError(f"{', '.join(args.files)}: the snapshot made from it would not read back ({e}): "
                         "not written") from None
    write_text_private(out, text)
    sys.stdout.write(printable(table) + "\n")
    print(f"kvtui: wrote {out} ({len(doc['modes'])} mode(s), {sum(len(m['steps']) for m in doc['modes'])} step(s))",
          file=sys.stderr)
    return 0
