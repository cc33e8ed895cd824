"""Bounded work under any accepted value (issue #30, class 4): a --fast scenario whose steps
would simulate unbounded requests is refused up front naming the field; a long --fast run stops
on SIGTERM with exit 130 and its snapshot finalised."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvtui.snapshot.file import load_snapshot

ROOT = Path(__file__).resolve().parents[2]
LONG = """
name = "long"
[server]
engine = "sim"
[[modes]]
name = "a"
[[modes]]
name = "b"
[workload]
prompt_tokens = 64
output_tokens = 64
[ramp]
start = 1
max = 3000
step = "+1"
search = "linear"
warmup_s = 1
window_s = 10
[slo]
tpot_p95_ms = 1000000
"""


def kvtui(*args, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kvtui", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, **kw)


@pytest.mark.parametrize("override, field", [
    ("ramp.min_samples=100000000", "ramp.min_samples"),
    ("ramp.min_samples=100001", "ramp.min_samples"),
    ("ramp.window_requests=50000000", "ramp.window_requests"),
    ("ramp.max=1000000", "ramp.step"),  # +1 to a million: refused by the bound on levels
    ("ramp.max=1000000;ramp.step=\"double\"", "ramp.max"),
])
def test_unbounded_fast_values_are_refused_naming_the_field(tmp_path, override, field) -> None:
    sc = tmp_path / "long.toml"
    sc.write_text(LONG)
    sets = [a for o in override.split(";") for a in ("--set", o)]
    p = kvtui("run", sc, "--headless", "--fast", *sets, "--out", tmp_path / "o.json")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 2, out + err
    assert len(err.strip().splitlines()) == 1 and (f"{field} = " in err or f"{field}: " in err), err
    assert not (tmp_path / "o.json").exists() and not (tmp_path / "o.records.jsonl").exists()


def test_sigterm_during_a_long_fast_run_exits_130_with_the_snapshot_finalised(tmp_path) -> None:
    sc = tmp_path / "long.toml"
    sc.write_text(LONG)
    out = tmp_path / "o.json"
    journal = out.with_name(out.name + ".journal")
    p = kvtui("run", sc, "--headless", "--fast", "--out", out)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            if journal.exists() and journal.read_text().count('"event": "step"') >= 2:
                break
            time.sleep(0.2)
        assert p.poll() is None, "the run ended before it could be stopped"
        p.send_signal(signal.SIGTERM)
        o, e = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, o + e
    doc = load_snapshot(out)  # the final snapshot, not a journal rebuild
    assert not journal.exists()
    assert "SIGTERM" in (doc["run"].get("stop_reason") or "")
    steps = [s for m in doc["modes"] for s in m["steps"]]
    assert len(steps) >= 2 and len(steps) < 3000 * 2  # stopped, not run to its end
