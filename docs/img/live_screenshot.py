"""The live dashboard of the built-in demo as an SVG, for the README. Not part of CI.

    .venv/bin/python docs/img/live_screenshot.py docs/img/live.svg [--size 120x40] [--steps 2]

Runs the demo (the simulated vLLM, `kvtui` with no arguments) in the app's own headless driver,
waits until the first mode has finished `--steps` steps and the next is in its measurement window,
saves the screen through Textual's own SVG export (what ctrl+s and `kvtui export --format svg`
use), then quits the app, which stops the run, the simulator and the load generator.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


async def shoot(out: Path, width: int, height: int, steps: int, timeout_s: float) -> None:
    from kvtui.io.scenario import load_scenario
    from kvtui.io.scenario.defaults import demo_scenario_path
    from kvtui.tui.app import create_app

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(load_scenario(demo_scenario_path()), out=Path(tmp) / "demo.json", autostart=True)
        async with app.run_test(size=(width, height), notifications=False) as pilot:
            loop = asyncio.get_running_loop()
            end = loop.time() + timeout_s
            st = app.state

            def ready() -> bool:
                mv = st.modes.get(st.current or "")
                return (mv is not None and len(mv.steps) >= steps and st.step is not None
                        and (st.progress or {}).get("phase") == "window" and (st.progress or {}).get("completed", 0) > 2)

            while not ready():
                if loop.time() > end:
                    raise SystemExit(f"the demo did not reach step {steps + 1}'s window in {timeout_s:.0f} s")
                await pilot.pause(0.5)
            app.dashboard.sync()
            await pilot.pause(1.2)  # the charts' border titles paint on the refresh after they build
            svg = app.export_screenshot(title="kvtui — the built-in demo, live (SIMULATED)")
            await pilot.press("q")
            await pilot.pause(0.5)
    out.write_text(svg, encoding="utf-8")
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", default="120x40")
    ap.add_argument("--steps", type=int, default=2, help="finished steps of the first mode before the picture")
    ap.add_argument("--timeout", type=float, default=300.0)
    a = ap.parse_args()
    w, h = (int(x) for x in a.size.lower().split("x"))
    asyncio.run(shoot(a.out, w, h, a.steps, a.timeout))


if __name__ == "__main__":
    main()
