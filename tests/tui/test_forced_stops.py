"""The TUI's forced stops (issue 29 item 4): q twice mid-run, a stop during a hung engine start, and a
SIGHUP whose run does not stop within its grace. All three once reached an import of a function
that no longer existed (`kvtui.runtime.engines.procs.kill_all`): a traceback instead of a stop.

The engine here is a real process that will not stop politely: a "vLLM" (KVTUI_VLLM_LAUNCHER)
that ignores SIGINT and SIGTERM and never answers /health, with a stop_timeout_s of 10 minutes,
so the run's own graceful stop cannot end it and only the forced path can. Each test checks
that the app (or the process) exits without a traceback, that the snapshot is final (the journal
gone, the stop reason kept) and that no process is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvtui import PROJECT_ROOT
from kvtui.io.snapshot.file import load_snapshot, paths_for
from kvtui.tui.app import create_app

from tui_helpers import descendants, screen_text, wait_for_exit, wait_until

pytestmark = pytest.mark.slow

STUBBORN_VLLM = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("INFO 11-29 12:00:00 [api_server.py:1] vLLM API server version 0.26.0", flush=True)
print("INFO 11-29 12:00:01 [gpu_model_runner.py:1] Starting to load model fake/model...", flush=True)
time.sleep(600)  # never healthy, deaf to SIGINT and SIGTERM: only SIGKILL ends it
"""

SCENARIO = ('name = "stubborn-start"\n[server]\nengine = "vllm"\nmodel = "fake/model"\n'
            'startup_timeout_s = 600\nstop_timeout_s = 600\n')


@pytest.fixture
def stubborn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    fake = tmp_path / "stubborn_vllm.py"
    fake.write_text(STUBBORN_VLLM)
    monkeypatch.setenv("KVTUI_VLLM_LAUNCHER", f"{sys.executable} {fake}")
    sc = tmp_path / "stubborn.toml"
    sc.write_text(SCENARIO)
    return fake, sc


def _alive(name: str) -> list[int]:
    """Live (not zombie) processes whose command line names `name`, wherever they were re-parented."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if name.encode() in f.read():
                    out.append(int(d))
        except (OSError, IndexError):
            continue
    return out


def _check_final(out: Path, reason: str) -> None:
    assert not paths_for(out)[1].exists(), "the journal is removed once the snapshot is final"
    doc = load_snapshot(out)
    assert doc["run"]["finished"] is False
    assert doc["run"]["stop_reason"] == reason


async def _drive_to_a_hung_start(app, fake: Path):
    pilot_cm = app.run_test(size=(120, 40))
    pilot = await pilot_cm.__aenter__()
    await wait_until(pilot, lambda: any(fake.name in c for c in descendants().values()), "the stubborn vLLM")
    await wait_until(pilot, lambda: "starting the engine" in screen_text(app), "the start on screen")
    return pilot_cm, pilot


async def test_q_twice_mid_run_kills_the_server_and_finalises(stubborn, tmp_path, monkeypatch):
    from kvtui.tui import shutdown

    fake, sc = stubborn
    monkeypatch.setattr(shutdown, "QUIT_GRACE_S", 600.0)  # only the second q can end it here
    before = descendants()
    out = tmp_path / "q2.json"
    app = create_app(sc, out=out, autostart=True)
    cm, pilot = await _drive_to_a_hung_start(app, fake)
    try:
        await pilot.press("q")
        await pilot.press("y")  # q mid-run asks first (k9s' rule); yes
        await pilot.pause(0.3)
        assert app.run_active and app.quitting, app.rc  # the graceful stop cannot end this server
        assert app.rc == shutdown.STOPPED_RC, app.rc
        await pilot.press("q")
        await wait_for_exit(app)
    finally:
        await cm.__aexit__(None, None, None)  # re-raises what the app raised (the old ImportError)
    assert app.return_value == shutdown.STOPPED_RC  # the exit code kvtui exits with (App.exit(result)): not 0
    assert not app.run_active
    left = {p: c for p, c in descendants().items() if p not in before}
    assert not left, f"processes left behind: {left}"
    assert _alive(fake.name) == []
    _check_final(out, "quit")


async def test_stop_during_a_hung_start_kills_it_after_the_grace(stubborn, tmp_path, monkeypatch):
    from kvtui.tui import shutdown

    fake, sc = stubborn
    monkeypatch.setattr(shutdown, "QUIT_GRACE_S", 0.5)
    before = descendants()
    out = tmp_path / "hung.json"
    app = create_app(sc, out=out, autostart=True)
    cm, pilot = await _drive_to_a_hung_start(app, fake)
    try:
        await pilot.press("q")  # once (and its question answered): the grace timer must end the start by itself
        await pilot.press("y")
        await wait_until(pilot, lambda: any("still starting" in str(n.message) for n in app._notifications),
                         "the forced stop's notice", limit_s=30)
        await wait_for_exit(app, limit_s=60)
    finally:
        await cm.__aexit__(None, None, None)
    assert app.return_value == shutdown.STOPPED_RC  # the exit code kvtui exits with (App.exit(result)): not 0
    left = {p: c for p, c in descendants().items() if p not in before}
    assert not left, f"processes left behind: {left}"
    assert _alive(fake.name) == []
    _check_final(out, "quit")


DRIVER = """
import sys
from kvtui.tui import shutdown
from kvtui.tui.app import create_app

shutdown.HUP_GRACE_S = 1.0  # the run's own stop gets this long before its servers are killed
app = create_app(sys.argv[1], out=sys.argv[2], autostart=True, handle_signals=True)
app.run(headless=True, size=(120, 40))
print("exited normally", flush=True)  # never: a lost terminal ends the process with os._exit(129)
"""


def test_sighup_with_a_run_that_does_not_stop_exits_129(stubborn, tmp_path):
    fake, sc = stubborn
    drv = tmp_path / "drive_tui.py"
    drv.write_text(DRIVER)
    out = tmp_path / "hup.json"
    proc = subprocess.Popen([sys.executable, str(drv), str(sc), str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    try:
        end = time.monotonic() + 120
        while not _alive(fake.name):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < end, "the stubborn vLLM never started"
            time.sleep(0.2)
        time.sleep(1.0)  # the app's signal handlers are installed on mount, before the run starts
        proc.send_signal(signal.SIGHUP)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = stderr.decode(errors="replace")
    assert proc.returncode == 129, err
    assert "Traceback" not in err and "exited normally" not in stdout.decode()
    assert _alive(fake.name) == []
    _check_final(out, "stopped by SIGHUP")
