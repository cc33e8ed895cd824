"""The trace reader's speed and memory (kvtui/io/scenario/trace.py) on a generated one-million-row trace.

    PYTHONPATH=. python bench/trace_reader.py [--rows 1000000] [--layout azure|burstgpt|mooncake] [--zst]

Writes the trace into a temporary folder (Azure's layout by default: ISO timestamps, the slowest to
parse), then, each in a fresh child process so that one's memory does not hide in another's:
- summary: `summarize` (every row checked, the summary's streaming figures and reservoir);
- replay: `TraceRows.load` (what the prompt factory holds: the first MAX_REPLAY rows, compact).
Prints rows/s and the child's peak resident memory (ru_maxrss) against the file's size, so "the
file is not held whole" can be read off: the peak stays far below the decompressed text.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write(path: Path, rows: int, layout: str) -> int:
    rng = random.Random(0)
    t = 1_700_000_000.0
    with open(path, "w") as f:
        if layout == "azure":
            f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        elif layout == "burstgpt":
            f.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
        nid = 0
        for i in range(rows):
            t += rng.expovariate(20.0)
            isl = max(1, int(rng.lognormvariate(7, 1)))
            osl = max(1, int(rng.lognormvariate(5, 0.8)))
            if layout == "azure":
                secs = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
                f.write(f"{secs}.{int((t % 1) * 1e7):07d},{isl},{osl}\n")
            elif layout == "burstgpt":
                f.write(f"{t - 1_700_000_000:.3f},ChatGPT,{isl},{osl},{isl + osl},Conversation log\n")
            else:
                nb = (isl + 511) // 512
                ids = list(range(min(nb, 2))) + list(range(nid, nid + max(0, nb - 2)))
                nid += max(0, nb - 2)
                f.write(json.dumps({"timestamp": int(t * 1000), "input_length": isl, "output_length": osl,
                                    "hash_ids": ids}) + "\n")
    return path.stat().st_size


def child(path: str, what: str) -> None:
    from kvtui.io.scenario.trace import TraceRows, TraceSpec, summarize

    t0 = time.perf_counter()
    if what == "summary":
        s = summarize(TraceSpec(path))
        n = s["rows"]
    else:
        n = len(TraceRows.load(TraceSpec(path)))
    dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"rows": n, "s": dt, "peak_mib": peak}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--layout", default="azure", choices=("azure", "burstgpt", "mooncake"))
    ap.add_argument("--zst", action="store_true", help="compress the file with zstandard first")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / ("trace.jsonl" if a.layout == "mooncake" else "trace.csv")
        size = write(p, a.rows, a.layout)
        if a.zst:
            import zstandard

            z = p.with_name(p.name + ".zst")
            with open(p, "rb") as src, open(z, "wb") as dst:
                zstandard.ZstdCompressor(level=3).copy_stream(src, dst)
            os.unlink(p)
            p = z
        on_disk = p.stat().st_size
        base = subprocess.run([sys.executable, "-c", "import resource, kvtui.io.scenario.trace;"
                               "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"],
                              capture_output=True, text=True, check=True)
        print(f"{a.rows:,} rows, {a.layout} layout{' (zst)' if a.zst else ''}: {size / 2**20:,.1f} MiB of text, "
              f"{on_disk / 2**20:,.1f} MiB on disk; the interpreter with the reader imported: "
              f"{float(base.stdout):,.1f} MiB")
        for what in ("summary", "replay"):
            out = subprocess.run([sys.executable, __file__, "--child", str(p), what], capture_output=True, text=True,
                                 check=True, env={**os.environ})
            r = json.loads(out.stdout)
            print(f"  {what:8s} {r['rows']:,} rows in {r['s']:.2f} s = {r['rows'] / r['s']:,.0f} rows/s, "
                  f"peak memory {r['peak_mib']:,.1f} MiB")


if __name__ == "__main__":
    main()
