"""Does a change move any figure? `--fast` runs of the same scenarios at a base commit and in the
working tree, compared snapshot by snapshot and record by record.

    python scripts/same_figures.py BASE [--keep DIR] [-j 2]

BASE is any commit (a worktree of it is made in a temporary folder and removed at the end). Each
case runs `kvtui run … --fast --headless --out …` with the same interpreter against BASE's code and
the tree's; the snapshots must be equal once the keys that change from run to run are left out
(wall times, the run's salt, its clock origin), and so must the records files (request ids carry
the salt: compared without it). Exit 0 when every case is equal, 1 when one differs (the first
differing key is printed), 2 when a case could not run on either side.

A refactor of the measurement core (kvtui/core/, the transports) shows with it that it changed
no number: issue 46's steps each ran it against the commit before.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# Closed loop (continuous steps, step-downs, sequential early stops), open loop (rate), trace replay,
# MoE and MLA models, a TTFT-only SLO (the first-token tail rule), the linear search.
CASES: dict[str, list[str]] = {
    "demo": ["sim-demo"],
    "linear": ["sim-demo", "--set", "ramp.search=linear"],
    "ttft-only": ["sim-demo", "--set", "slo.tpot_p95_ms=100000", "--set", "slo.ttft_p95_ms=8000"],
    "rate": ["sim-demo", "--set", "ramp.load=rate", "--set", "ramp.start=0.1", "--set", "ramp.max=4"],
    "trace": ["sim-trace"],
    "trace-replay": ["sim-trace-replay"],
    "llama8b": ["h100-llama8b-4k384", "--engine", "sim", "--set", "server.model=llama-3.1-8b"],
    "qwen3-moe": ["h100-qwen3moe-4k384", "--engine", "sim", "--set", "server.model=qwen3-30b-a3b"],
    "dsv2-mla-32k": ["h100-dsv2lite-32k", "--engine", "sim", "--set", "server.model=deepseek-v2-lite"],
}
VARYING = {"finalized_at", "salt", "t0_monotonic", "t0_epoch", "started_at", "finished_at", "wall_s", "compute_s",
           "elapsed_s", "created_at", "t_wall"}
SALTED_ID = re.compile(r"^[0-9a-f]{8}-")


def _strip(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _strip(v) for k, v in o.items() if k not in VARYING}
    if isinstance(o, list):
        return [_strip(x) for x in o]
    return o


def _first_difference(a: Any, b: Any, path: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{path or '/'}: {a!r:.60} vs {b!r:.60}"
    if isinstance(a, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return f"{path}/{k}: only in {'base' if k in a else 'tree'}"
            d = _first_difference(a[k], b[k], f"{path}/{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r:.60} vs {b!r:.60}"


def _records(path: Path) -> list[str]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        d["id"] = SALTED_ID.sub("", str(d.get("id", "")))
        out.append(json.dumps(d, sort_keys=True))
    return out


def _run(code: Path, args: list[str], out: Path) -> int:
    env = {**os.environ, "PYTHONPATH": str(code)}
    with open(out.with_suffix(".log"), "w", encoding="utf-8") as log:
        return subprocess.run([sys.executable, "-m", "kvtui", "run", *args, "--fast", "--headless", "--out", str(out)],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=1800,
                              stdin=subprocess.DEVNULL).returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", help="the commit to compare the working tree with")
    ap.add_argument("--keep", type=Path, help="keep the runs' snapshots and logs here")
    ap.add_argument("-j", type=int, default=2, help="runs at once (default 2)")
    a = ap.parse_args(argv)
    work = a.keep or Path(tempfile.mkdtemp(prefix="kvtui-same-"))
    base_tree = Path(tempfile.mkdtemp(prefix="kvtui-base-")) / "tree"
    r = subprocess.run(["git", "worktree", "add", "-q", "--detach", str(base_tree), a.base], cwd=ROOT)
    if r.returncode:
        print(f"same_figures: no worktree of {a.base!r}", file=sys.stderr)
        return 2
    try:
        jobs = [(name, side, code) for name in CASES for side, code in (("base", base_tree), ("tree", ROOT))]
        for side in ("base", "tree"):
            (work / side).mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max(1, a.j)) as pool:
            rcs = dict(zip(((n, s) for n, s, _ in jobs),
                           pool.map(lambda j: _run(j[2], CASES[j[0]], work / j[1] / f"{j[0]}.json"), jobs)))
        status = 0
        for name in CASES:
            if rcs[name, "base"] != rcs[name, "tree"]:
                print(f"{name}: exit {rcs[name, 'base']} at base, {rcs[name, 'tree']} in the tree")
                status = max(status, 1)
                continue
            b, t = work / "base" / f"{name}.json", work / "tree" / f"{name}.json"
            if not b.is_file() or not t.is_file():
                print(f"{name}: no snapshot (exit {rcs[name, 'tree']}; see {t.with_suffix('.log')})")
                status = 2
                continue
            diff = _first_difference(_strip(json.loads(b.read_text())), _strip(json.loads(t.read_text())))
            rb, rt = b.with_suffix(".records.jsonl"), t.with_suffix(".records.jsonl")
            recs_b = _records(rb) if rb.is_file() else []
            recs_t = _records(rt) if rt.is_file() else []
            steps = sum(len(m.get("steps") or []) for m in json.loads(t.read_text()).get("modes") or [])
            if steps == 0 or not recs_t:
                # a case that measured nothing proves nothing (a scenario that no longer starts, say)
                print(f"{name}: MEASURED NOTHING ({steps} steps; see {t.with_suffix('.log')})")
                status = max(status, 1)
            elif diff is None and recs_b == recs_t:
                print(f"{name}: same snapshot ({steps} steps) and records ({len(recs_t)})")
            else:
                print(f"{name}: DIFFERS: {diff or f'records ({len(recs_b)} at base, {len(recs_t)} in the tree)'}")
                status = max(status, 1)
        return status
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=ROOT)
        shutil.rmtree(base_tree.parent, ignore_errors=True)
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
