"""Does the TUI move the measurement? (issue 7, item 5)

The same ramp (the knee test model over real HTTP, fixed steps, a loose SLO so every step runs)
is run headless and with the TUI open in tmux (120×40, as a person would), interleaved,
`--reps` times each. Per step: TTFT p95 and TPOT p50 of each run; then the median over
repetitions, TUI / headless. The TUI's own CPU per refresh comes from bench/ui_frame_cost.py
(the TUI engineer's bench); this one only asks whether the numbers move.

    python bench/ui_ttft_effect.py [--reps 3] [--loads 2,4,6,8,10] [--out bench/results/ui_ttft.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.knee import knee_scenario  # noqa: E402
KVTUI = str(ROOT / ".venv" / "bin" / "kvtui")

SCENARIO = knee_scenario("ui-effect", """
start = {lo}
max = {hi}
step = "{loads}"
search = "linear"
confirm = false
warmup_s = 0.5
window_s = {window}
""", "tpot_p95_ms = 5000", output_tokens=32)


def headless(scn: Path, out: Path) -> float:
    t = time.monotonic()
    subprocess.run([KVTUI, "run", str(scn), "--headless", "--out", str(out)], check=True, capture_output=True, timeout=900)
    return time.monotonic() - t


def tui(scn: Path, out: Path, session: str) -> float:
    t = time.monotonic()
    env_cmd = f"cd {ROOT} && TERM=xterm-256color {KVTUI} run {scn} --out {out}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", env_cmd], check=True)
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            if out.exists():
                try:
                    doc = json.loads(out.read_text())
                    if doc.get("run", {}).get("finished") is not None and doc.get("run", {}).get("wall_s") is not None:
                        break
                except (ValueError, OSError):
                    pass
            time.sleep(0.5)
        screen = subprocess.run(["tmux", "capture-pane", "-t", session, "-p"], capture_output=True, text=True).stdout
        (out.parent / (out.stem + ".screen.txt")).write_text(screen)
        wall = time.monotonic() - t
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=False)
        for _ in range(40):
            if subprocess.run(["tmux", "has-session", "-t", session], capture_output=True).returncode != 0:
                break
            time.sleep(0.25)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    return wall


def steps(path: Path) -> dict[float, dict]:
    doc = json.loads(path.read_text())
    return {s["load"]: s for s in doc["modes"][0]["steps"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--loads", default="2,4,6,8,10")
    ap.add_argument("--window", type=float, default=3.0)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if not shutil.which("tmux"):
        raise SystemExit("tmux not found")
    loads = [float(x) for x in a.loads.split(",")]
    runs: dict[str, list[dict[float, dict]]] = {"headless": [], "tui": []}
    walls: dict[str, list[float]] = {"headless": [], "tui": []}
    with tempfile.TemporaryDirectory() as td:
        scn = Path(td) / "ui.toml"
        scn.write_text(SCENARIO.format(lo=int(min(loads)), hi=int(max(loads)), loads=a.loads, window=a.window))
        for rep in range(a.reps):
            order = ["headless", "tui"] if rep % 2 == 0 else ["tui", "headless"]
            for kind in order:
                out = Path(td) / f"{kind}-{rep}.json"
                w = headless(scn, out) if kind == "headless" else tui(scn, out, f"kvb-ui-{os.getpid()}")
                runs[kind].append(steps(out))
                walls[kind].append(w)
                print(f"rep {rep} {kind}: {w:.0f} s", file=sys.stderr, flush=True)
        screen = next(Path(td).glob("tui-0.screen.txt"), None)
        screen_text = screen.read_text() if screen else ""
    rows = []
    for load in loads:
        def med(kind, key, sub):
            xs = [r[load][key].get(sub) for r in runs[kind] if load in r and r[load][key].get(sub) is not None]
            return statistics.median(xs) if xs else None

        def spread(kind, key, sub):
            xs = [r[load][key].get(sub) for r in runs[kind] if load in r and r[load][key].get(sub) is not None]
            return (min(xs), max(xs)) if xs else (None, None)

        rows.append({"load": load,
                     "ttft_p95": {k: med(k, "ttft_ms", "p95") for k in runs}, "ttft_p95_range": {k: spread(k, "ttft_ms", "p95") for k in runs},
                     "tpot_p50": {k: med(k, "tpot_ms", "p50") for k in runs},
                     "client_limited": {k: sum(1 for r in runs[k] if load in r and r[load].get("client_limited")) for k in runs}})
    print(f"{platform.node()} · {os.cpu_count()} CPUs · knee model over HTTP · TUI in tmux 120×40 · {a.reps} repetitions interleaved")
    print("| concurrency | TTFT p95 headless ms (range) | TTFT p95 TUI ms (range) | TUI / headless | TPOT p50 headless / TUI ms | steps flagged client-limited (headless / TUI) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        h, t = r["ttft_p95"]["headless"], r["ttft_p95"]["tui"]
        hr, tr = r["ttft_p95_range"]["headless"], r["ttft_p95_range"]["tui"]
        print(f"| {r['load']:g} | {h:.1f} ({hr[0]:.1f}–{hr[1]:.1f}) | {t:.1f} ({tr[0]:.1f}–{tr[1]:.1f}) | {t / h:.2f} | "
              f"{r['tpot_p50']['headless']:.1f} / {r['tpot_p50']['tui']:.1f} | {r['client_limited']['headless']} / {r['client_limited']['tui']} |")
    print(f"wall per run: headless {statistics.median(walls['headless']):.0f} s, TUI {statistics.median(walls['tui']):.0f} s (median)")
    if a.out:
        Path(a.out).write_text(json.dumps({"rows": rows, "walls": walls, "args": vars(a), "screen": screen_text}, indent=1))


if __name__ == "__main__":
    main()
