"""Load held: many steps at one load leak no thread, file descriptor or process, and the
telemetry keeps no whole scrape per second (the soak's finding, docs/SOAK.md).

The 30-minute soak itself is a benchmark (bench/soak.py); this is its CI-sized, deterministic
part: counts that must come back to where they were, not timings or megabytes.
"""

from __future__ import annotations

import os
import threading
import time

from kvtui.explore.run import Run
from kvtui.io.scenario import load_scenario

from reliability_helpers import KNEE, descendants


def _fds() -> dict[int, str]:
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return out


def _children() -> set[int]:
    from reliability_helpers import cmdline

    return {p for p in descendants(os.getpid()) if "multiprocessing.resource_tracker" not in cmdline(p)}


def test_held_steps_leak_nothing(tmp_path):
    p = tmp_path / "k.toml"
    p.write_text(KNEE)
    # A first short run: imports, the multiprocessing resource tracker, httpx's pools exist from here on.
    Run(load_scenario(p, ["ramp.max=1", 'modes=[{name="w"}]']), tmp_path / "warm.json").run()
    threads0, fds0, kids0 = {t.ident for t in threading.enumerate()}, _fds(), _children()

    sc = load_scenario(p, ["ramp.start=4", "ramp.max=4", "ramp.min_samples=5", "slo={tpot_p50_ms=35}"])
    seen: dict = {"steps": {}, "workers": {}, "heavy_samples": 0, "samples": 0}
    holder: list[Run] = []

    def on(ev) -> None:
        run = holder[0]
        if ev.kind == "step_finished":
            n = seen["steps"][ev.mode] = seen["steps"].get(ev.mode, 0) + 1
            seen["workers"].setdefault(ev.mode, set()).update(run.loadgen.pids if run.loadgen else [])
            tel = run.telemetry
            if tel is not None:
                seen["samples"] += len(tel.samples)
                seen["heavy_samples"] += sum(1 for s in tel.samples if s.histograms)
            if n >= 8:
                if ev.mode == "first":
                    run.skip_mode()
                else:
                    run.stop("enough")

    run = Run(sc, tmp_path / "held.json", listener=on)
    holder.append(run)
    run.hold(True)  # after the first step: the same load again and again
    doc = run.run()

    assert seen["steps"] == {"first": 8, "second": 8}
    assert all(len(pids) == 1 for pids in seen["workers"].values())  # one worker per mode, kept for every step
    assert seen["samples"] > 0 and seen["heavy_samples"] == 0  # gauges only, no histograms kept per scrape
    assert [len(m["steps"]) for m in doc["modes"]] == [8, 8]
    # Everything the run started is gone: threads, files and sockets, processes.
    # What the run closes as it ends (a killed worker reaped, its pipes released) may still be going
    # on on a stalled host when run() returns: a bounded wait for it, then nothing may remain.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
            {t.ident for t in threading.enumerate()} - threads0 or set(_fds()) - set(fds0) or _children() - kids0):
        time.sleep(0.5)
    assert {t.ident for t in threading.enumerate()} - threads0 == set()
    assert {fd: link for fd, link in _fds().items() if fd not in fds0} == {}
    assert _children() - kids0 == set()
