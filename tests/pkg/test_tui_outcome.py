"""The TUI: a run in which no mode started is FAILED (and exits 1), not "finished"; the setup
screen refuses to start what pre-flight fails, and turns a model typed in place of a scenario
into one (kvtui init)."""

from __future__ import annotations

import asyncio
import shlex
import sys

from kvtui.io.scenario import load_scenario
from kvtui.tui.app import create_app

from pkg_helpers import model_dir

# A vLLM that dies at once: a real process, launched the way kvtui launches vLLM.
DEAD_VLLM = "import sys; print('ERROR 01-01 00:00:00 stand-in engine: no device', flush=True); sys.exit(1)"


def text(app) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def until(pilot, cond, what, limit_s=120.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s  # a guard against a hang, not a timing assertion
    while not cond():
        assert loop.time() < end, f"gave up waiting for: {what}"
        await pilot.pause(0.2)


async def test_no_mode_started_is_a_failed_run_exit_1(tmp_path, monkeypatch):
    monkeypatch.setenv("KVTUI_VLLM_LAUNCHER", shlex.join([sys.executable, "-c", DEAD_VLLM]))
    p = tmp_path / "dead.toml"
    p.write_text(f'name = "dead"\n[server]\nengine = "vllm"\nmodel = "{model_dir(tmp_path / "m")}"\nstartup_timeout_s = 60\n'
                 '[[modes]]\nname = "a"\n[[modes]]\nname = "b"\n[workload]\nprompt_tokens = 16\noutput_tokens = 8\n')
    app = create_app(load_scenario(p), out=tmp_path / "dead.json", autostart=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.state.status == "failed", "the run to end")
        await pilot.pause(0.5)
        shown = text(app)
        assert "FAILED" in shown and "no mode started" in shown and "FINISHED" not in shown
        await pilot.press("q")
    assert app.return_value == 1 and app.run_error  # what `kvtui` exits with (launch_tui returns app.run()) and "no mode started" in app.run_error


async def test_the_setup_screen_does_not_start_what_preflight_fails(tmp_path):
    p = tmp_path / "missing.toml"
    p.write_text(f'name = "missing"\n[server]\nengine = "vllm"\nmodel = "{tmp_path / "model8b"}"\n')
    app = create_app(load_scenario(p), out=tmp_path / "x.json")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.3)
        await pilot.press("ctrl+r")
        await pilot.pause(0.5)
        notes = [str(n.message) for n in app._notifications]
        assert any(f"{tmp_path / 'model8b'} does not exist" in n and "fix:" in n for n in notes), notes
        assert app.screen.__class__.__name__ == "SetupScreen" and app.run_obj is None
    assert not (tmp_path / "x.json").exists()


async def test_a_model_typed_in_the_setup_screen_gets_its_scenario(tmp_path, monkeypatch):
    monkeypatch.setenv("KVTUI_HOME", str(tmp_path / "home"))
    m = model_dir(tmp_path / "MyModel-8B")
    from kvtui.paths import demo_scenario

    app = create_app(load_scenario(demo_scenario()))  # the setup screen (not started)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.3)
        box = app.screen.query_one("#pick-path")
        box.value = str(m)
        box.focus()
        await pilot.press("enter")
        await until(pilot, lambda: app.screen.path and str(app.screen.path).endswith(".toml"), "the written scenario opened")
        written = tmp_path / "home" / "scenarios"
        files = list(written.glob("*.toml"))
        assert len(files) == 1 and str(app.screen.path) == str(files[0])
        assert load_scenario(files[0]).server.model == str(m.resolve())
        assert any("kvtui init wrote" in str(n.message) for n in app._notifications)
