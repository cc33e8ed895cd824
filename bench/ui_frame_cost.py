"""CPU cost of one dashboard refresh, measured on the UI thread (not a test).

    .venv/bin/python bench/ui_frame_cost.py                      # frozen snapshot, 120×40
    .venv/bin/python bench/ui_frame_cost.py --size 160x48 --frames 40
    .venv/bin/python bench/ui_frame_cost.py --live tests/tui/data/knee-bench.toml

Replay (frozen data, `tests/tui/data/l4-demo.json`):
  full    every view's data changed: 6 charts rebuilt (plotext) + status, memory bar, table;
          then Textual's layout/compositor render of the frame (headless driver: no terminal write)
  series  a telemetry tick: the 4 time charts, status and memory bar change (the usual 1 Hz case)
  idle    nothing changed: the timer's checks only
Live: the knee scenario runs in the app at the given size; the UI thread's CPU time (event
ingestion + refreshes + rendering) per refresh-timer tick, and the whole process's CPU per second.

CPU time is `time.thread_time()` of the UI thread (the run, the telemetry thread and the load
generator process are not counted in the per-refresh figures).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.knee import knee_scenario  # noqa: E402
FROZEN = ROOT / "tests" / "tui" / "data" / "l4-demo.json"
KNEE = knee_scenario("knee-bench", """
start = 1
max = 16
step = "double"
search = "fast"
warmup_s = 0.3
window_s = 2
""", "tpot_p95_ms = 30", slowdown=2)


def _ms(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"median {statistics.median(xs) * 1000:6.1f} ms  p90 {xs[int(0.9 * (len(xs) - 1))] * 1000:6.1f} ms  (n={len(xs)})"


async def replay_bench(size: tuple[int, int], frames: int, theme: str) -> dict[str, list[float]]:
    from kvtui.tui.app import create_app
    from kvtui.tui.charts import Chart

    app = create_app(snapshot=FROZEN, theme=theme, refresh_hz=0.2)  # our own refreshes only
    out: dict[str, list[float]] = {"full": [], "series": [], "idle": []}
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.5)
        # A replay opens on the answer screen, where the dashboard's charts are not shown and
        # rebuild nothing: open the dashboard ("d"), as a person looking at the charts does.
        if app.screen is not app.dashboard:
            await pilot.press("d")
            await pilot.pause(0.5)
        dash = app.dashboard
        st = app.state
        charts = list(dash.query(Chart))
        for kind in ("full", "series", "idle"):
            before = sum(c.builds for c in charts)
            for _ in range(frames):
                for mv in st.modes.values():
                    if kind in ("full", "series"):
                        mv.series.version += 1
                if kind == "full":
                    st.steps_version += 1
                    st.slo_version += 1
                if kind in ("full", "series"):
                    st.header_version += 1
                t0 = time.thread_time()
                dash.sync()
                await pilot.pause()  # Textual renders the frame (widgets' render(), compositor)
                out[kind].append(time.thread_time() - t0)
            out[f"_builds_{kind}"] = [float(sum(c.builds for c in charts) - before)]
        out["_on_dashboard"] = [float(app.screen is app.dashboard)]
    return out


async def live_bench(size: tuple[int, int], scenario_path: Path, theme: str) -> dict[str, float]:
    import os
    import resource

    from kvtui.io.scenario import load_scenario
    from kvtui.tui.app import create_app

    sc = load_scenario(scenario_path)
    out = Path("/tmp") / f"kvtui-bench-{os.getpid()}.json"
    app = create_app(sc, out=out, autostart=True, theme=theme)
    ticks: list[float] = []
    orig_tick = app.tick

    def timed_tick() -> None:
        t0 = time.thread_time()
        orig_tick()
        ticks.append(time.thread_time() - t0)

    app.tick = timed_tick  # type: ignore[method-assign]
    async with app.run_test(size=size) as pilot:
        # Measure once the engine is up (startup is not the steady state).
        while not (app.state.viewed and app.state.viewed.status == "running"):
            await pilot.pause(0.2)
        ui0 = time.thread_time()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        w0 = time.monotonic()
        n0 = app.ticks
        while app.run_active:
            await pilot.pause(0.5)
        wall = time.monotonic() - w0
        ui = time.thread_time() - ui0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        n = app.ticks - n0
        steps = sum(len(m.steps) for m in app.state.modes.values())
        await pilot.press("q")
        while app.return_code is None:
            await asyncio.sleep(0.1)
    proc_cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    for p in (out, out.with_name(out.stem + ".records.jsonl")):
        p.unlink(missing_ok=True)
    return {"wall_s": wall, "ticks": n, "steps": steps, "ui_cpu_s": ui, "ui_ms_per_tick": ui / max(1, n) * 1000,
            "tick_only_ms_median": statistics.median(ticks) * 1000 if ticks else 0.0,
            "ui_cpu_share": ui / wall, "process_cpu_share": proc_cpu / wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="120x40")
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--theme", default="kvtui-dark")
    ap.add_argument("--live", nargs="?", const="", metavar="SCENARIO",
                    help="also measure with a run going (default: the knee scenario above)")
    a = ap.parse_args()
    w, h = (int(x) for x in a.size.lower().split("x"))
    import platform

    print(f"kvtui dashboard refresh cost at {w}×{h} — {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}")
    r = asyncio.run(replay_bench((w, h), a.frames, a.theme))
    builds = {k: r.pop(f"_builds_{k}")[0] for k in ("full", "series", "idle")}
    on_dash = bool(r.pop("_on_dashboard")[0])
    for k, v in r.items():
        print(f"  replay {k:<6} {_ms(v)}  (chart rebuilds: {builds[k]:.0f})")
    # A benchmark that measured nothing must say so: the full case times frames whose charts are
    # rebuilt (6 per frame), the series case the time charts; none rebuilt = the wrong frame timed.
    if not on_dash or builds["full"] < a.frames or builds["series"] < a.frames:
        print(f"ui_frame_cost: FAILED: the frames timed rebuilt no charts (full {builds['full']:.0f}, series "
              f"{builds['series']:.0f} for {a.frames} frames; dashboard shown: {on_dash})", file=sys.stderr)
        return 1
    if a.live is not None:
        path = Path(a.live) if a.live else None
        if path is None:
            path = Path("/tmp") / "kvtui-bench-knee.toml"
            path.write_text(KNEE)
        lv = asyncio.run(live_bench((w, h), path, a.theme))
        print(f"  live   {lv['steps']} steps in {lv['wall_s']:.0f} s, {lv['ticks']} refresh ticks: "
              f"UI thread {lv['ui_ms_per_tick']:.1f} ms CPU per tick (events + refresh + render), "
              f"{lv['ui_cpu_share']:.1%} of a core; refresh tick alone median {lv['tick_only_ms_median']:.1f} ms; "
              f"whole process {lv['process_cpu_share']:.1%} of a core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
