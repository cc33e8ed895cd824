"""Pre-flight: each failure is one line with the fix, exit 1, and nothing written (no snapshot,
no journal, no runs/ folder). Real parts where they exist here (a missing directory, a taken
port, an interpreter without vLLM, this box without a GPU); a fake NVML for GPUs."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys

from kvtui.cli.entry import main

from pkg_helpers import A100, H200, ROOT, FakeGpuBox, model_dir

PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def kvtui(*args, cwd, env=None, timeout=120):
    return subprocess.run([PY, "-m", "kvtui", *args], capture_output=True, text=True, cwd=cwd, env=env or ENV, timeout=timeout)


def fail_lines(text):
    return [line for line in text.splitlines() if "pre-flight FAIL" in line]


def nothing_written(tmp_path):
    return not (tmp_path / "out.json").exists() and not (tmp_path / "runs").exists() and \
        not list(tmp_path.glob("*.journal*")) and not list(tmp_path.glob("*.records.jsonl"))


def scenario(tmp_path, model, extra="", modes=("bf16",)):
    p = tmp_path / "sc.toml"
    body = f'name = "pf"\n[server]\nengine = "vllm"\nmodel = "{model}"\nmax_model_len = 4096\n{extra}\n'
    for m in modes:
        kv = 'kv_cache_dtype = "fp8"\n' if "kv" in m else ""
        q = 'quantization = "fp8"\n' if m.startswith("fp8-w") else ""
        body += f'[[modes]]\nname = "{m}"\ndtype = "bfloat16"\n{kv}{q}'
    body += "[workload]\nprompt_tokens = 512\noutput_tokens = 64\n"
    p.write_text(body)
    return p


def test_a_missing_model_directory_says_so_not_hfvalidationerror(tmp_path):
    """The issue's case: the shipped H200 scenario where its model directory is not there."""
    missing = tmp_path / "model8b"
    r = kvtui("run", "h200-llama8b", "--headless", "--out", str(tmp_path / "out.json"),
              "--set", f'server.model="{missing}"', cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    lines = fail_lines(r.stderr)
    assert any(f"{missing} does not exist" in x and "h200-llama8b.toml:" in x and "server.model" in x and "fix:" in x for x in lines), r.stderr
    assert "HFValidationError" not in r.stdout + r.stderr and "Traceback" not in r.stderr
    assert "no mode was started, nothing was written" in r.stderr
    assert nothing_written(tmp_path)


def test_a_directory_without_config_json_and_an_invalid_id(tmp_path):
    (tmp_path / "empty").mkdir()
    r = kvtui("run", str(scenario(tmp_path, tmp_path / "empty")), "--headless", "--out", str(tmp_path / "out.json"), cwd=tmp_path)
    assert r.returncode == 1 and any("has no config.json" in x for x in fail_lines(r.stderr)), r.stderr
    r = kvtui("run", str(scenario(tmp_path, "not a model id")), "--headless", "--out", str(tmp_path / "out.json"), cwd=tmp_path)
    assert r.returncode == 1 and any("not a valid Hugging Face id" in x for x in fail_lines(r.stderr)), r.stderr
    assert nothing_written(tmp_path)


def test_no_gpu_here_names_the_engines_that_can_run_and_the_what_if_that_does(tmp_path):
    """This box has no GPU (no NVML library) and only the vLLM CPU build: a GPU scenario cannot run;
    the line gives the simulated what-if, and that command runs."""
    r = kvtui("run", "h200-llama8b-kvbound", "--headless", "--out", str(tmp_path / "out.json"), cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    gpu = [x for x in fail_lines(r.stderr) if " gpu: " in x]
    assert len(gpu) == 1 and "only --engine sim or external can run here" in gpu[0], r.stderr
    assert nothing_written(tmp_path)
    cmd = shlex.split(gpu[0].split("what-if of this scenario: ", 1)[1])
    assert cmd[:3] == ["kvtui", "run", "h200-llama8b-kvbound"] and "--engine" in cmd and "--fast" in cmd
    w = kvtui(*cmd[1:], "--mode", "bf16", "--set", "ramp.max=16", "--out", str(tmp_path / "whatif.json"), cwd=tmp_path)
    assert w.returncode == 0, w.stderr
    assert "SIMULATED" in w.stdout and (tmp_path / "whatif.json").exists()


def test_no_gpu_with_the_gpu_build_of_vllm(tmp_path, gpu_vllm, capsys):
    sc = scenario(tmp_path, model_dir(tmp_path / "m"))
    rc = main(["run", str(sc), "--headless", "--out", str(tmp_path / "out.json")])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "pre-flight ok   vllm: vLLM 0.26.0" in out
    assert any("no GPU visible" in x and "--engine sim" in x for x in fail_lines(err)), err
    assert nothing_written(tmp_path)


def test_vllm_not_installed_for_the_launching_python(tmp_path):
    """KVTUI_VLLM_PYTHON names a real interpreter without site-packages: no vLLM there."""
    bare = tmp_path / "bare-python"
    bare.write_text(f"#!/bin/sh\nexec {shlex.quote(PY)} -S \"$@\"\n")
    bare.chmod(0o755)
    sc = scenario(tmp_path, model_dir(tmp_path / "m"))
    r = kvtui("run", str(sc), "--headless", "--out", str(tmp_path / "out.json"), cwd=tmp_path,
              env={**ENV, "KVTUI_VLLM_PYTHON": str(bare)})
    assert r.returncode == 1
    line = [x for x in fail_lines(r.stderr) if " vllm: " in x]
    assert len(line) == 1 and "not installed" in line[0] and "pip install 'kvtui[vllm]'" in line[0], r.stderr
    assert nothing_written(tmp_path)


def test_busy_gpu_memory_names_the_process_that_holds_it(tmp_path, gpu_vllm, monkeypatch, capsys):
    FakeGpuBox(monkeypatch, [H200(free=30.2, procs={4242: 108.0})], names={4242: "python3 -m vllm.entrypoints.openai.api_server"})
    sc = scenario(tmp_path, model_dir(tmp_path / "m"), extra="gpu_memory_utilization = 0.9")
    rc = main(["run", str(sc), "--headless", "--out", str(tmp_path / "out.json")])
    out, err = capsys.readouterr()
    assert rc == 1
    mem = [x for x in fail_lines(err) if " memory: " in x]
    assert len(mem) == 1, err
    assert "30.2 of 139.8 GiB free" in mem[0] and "asks for 125.8" in mem[0]
    assert "pid 4242" in mem[0] and "vllm.entrypoints.openai.api_server" in mem[0] and "108.0 GiB" in mem[0]
    assert "--set server.gpu_memory_utilization=0.20" in mem[0]
    assert "pre-flight ok   gpu: 1 visible (0: NVIDIA H200)" in out
    assert nothing_written(tmp_path)


def test_the_same_gpu_with_room_passes_every_check(tmp_path, gpu_vllm, monkeypatch):
    """The control: memory free, an H200 (9.0), every fp8 mode allowed."""
    from kvtui.io.scenario import load_scenario
    from kvtui.preflight import run_preflight

    FakeGpuBox(monkeypatch, [H200()])
    sc = load_scenario(scenario(tmp_path, model_dir(tmp_path / "m"), modes=("bf16", "fp8-kv", "fp8-w", "fp8-w+kv")))
    pf = run_preflight(sc)
    assert pf.ok, [c.line() for c in pf.checks]
    assert {c.name for c in pf.checks} >= {"model", "vllm", "gpu", "memory", "precision"}


def test_fp8_on_a_pre_ampere_gpu(tmp_path, gpu_vllm, monkeypatch, capsys):
    """A Turing card (7.5): fp8 weights run weight-only there (vLLM's Fp8Config from 7.5), an fp8 KV
    cache does not (8.0): one line for the mode that cannot run."""
    FakeGpuBox(monkeypatch, [{"name": "Tesla T4", "total": 14.6, "free": 14.6, "cc": (7, 5), "procs": {}}])
    sc = scenario(tmp_path, model_dir(tmp_path / "m"), modes=("fp16", "fp8-kv", "fp8-w"))
    sc.write_text(sc.read_text().replace('"bfloat16"', '"float16"'))  # Turing has no bfloat16
    rc = main(["run", str(sc), "--headless", "--out", str(tmp_path / "out.json")])
    _, err = capsys.readouterr()
    assert rc == 1
    prec = [x for x in fail_lines(err) if " precision: " in x]
    assert len(prec) == 1, err
    kv = next(x for x in prec if "mode fp8-kv" in x)
    assert "an fp8 KV cache needs compute capability ≥ 8.0" in kv and "7.5 (Turing)" in kv
    assert not any("--quantization fp8" in x for x in prec), err  # weight-only fp8 runs on 7.5
    assert nothing_written(tmp_path)


def test_fp8_on_an_ampere_gpu_runs_weight_only_and_says_so(tmp_path, gpu_vllm, monkeypatch):
    """An A100 (8.0) or an A10 (8.6): fp8 weights as W8A16 (FP8 Marlin) and an fp8 KV cache pass the
    pre-flight, each named in its form; a format that needs FP8 tensor cores (modelopt) does not."""
    from kvtui.io.scenario import load_scenario
    from kvtui.preflight import run_preflight

    for gpu in (A100(), {"name": "NVIDIA A10", "total": 22.49, "free": 22.49, "cc": (8, 6), "procs": {}}):
        FakeGpuBox(monkeypatch, [gpu])
        sc = load_scenario(scenario(tmp_path, model_dir(tmp_path / "m"),
                                    modes=("bf16", "fp8-kv", "fp8-w8a16", "fp8-w8a16+kv")))
        pf = run_preflight(sc)
        lines = [c.line() for c in pf.checks if c.name == "precision"]
        assert pf.ok and not [c for c in pf.failed if c.name == "precision"], lines
        w = next(x for x in lines if "mode fp8-w8a16 " in x)
        assert "weight-only (W8A16, FP8 Marlin)" in w and "no FP8 compute" in w and "fp8 KV" not in w
        both = next(x for x in lines if "mode fp8-w8a16+kv " in x)
        assert "W8A16" in both and "fp8 KV cache" in both
        assert any("mode fp8-kv " in x and "fp8 KV cache" in x for x in lines)
        assert not any("mode bf16 " in x for x in lines)
    FakeGpuBox(monkeypatch, [A100()])
    p = tmp_path / "modelopt.toml"
    p.write_text(f'[server]\nengine = "vllm"\nmodel = "{model_dir(tmp_path / "m")}"\nmax_model_len = 4096\n'
                 '[[modes]]\nname = "mo"\nquantization = "modelopt"\n')
    f = [c for c in run_preflight(load_scenario(p)).failed if c.name == "precision"]
    assert len(f) == 1 and "needs compute capability ≥ 8.9" in f[0].text and "Ada or Hopper" in f[0].fix


def test_awq_mode_on_a_checkpoint_that_is_not_awq(tmp_path, gpu_vllm, monkeypatch):
    from kvtui.io.scenario import load_scenario
    from kvtui.preflight import run_preflight

    FakeGpuBox(monkeypatch, [H200()])
    p = tmp_path / "awq.toml"
    p.write_text(f'[server]\nengine = "vllm"\nmodel = "{model_dir(tmp_path / "m")}"\nmax_model_len = 4096\n'
                 '[[modes]]\nname = "awq"\nquantization = "awq_marlin"\n')
    pf = run_preflight(load_scenario(p))
    f = [c for c in pf.failed if c.name == "precision"]
    assert len(f) == 1 and "mode awq: --quantization awq_marlin needs an AWQ checkpoint" in f[0].text and "not quantized" in f[0].text
    assert "awqdummy" in f[0].fix


def test_max_model_len_beyond_the_models_positions(tmp_path, gpu_vllm, monkeypatch):
    from kvtui.io.scenario import load_scenario
    from kvtui.preflight import run_preflight

    FakeGpuBox(monkeypatch, [H200()])
    sc = load_scenario(scenario(tmp_path, model_dir(tmp_path / "m", max_position_embeddings=2048)))
    f = [c for c in run_preflight(sc).failed if c.name == "max_model_len"]
    assert len(f) == 1 and "4096 > " in f[0].text and f[0].fix == "--set server.max_model_len=2048"


def test_a_taken_port(tmp_path):
    """A real listener holds the port; the HTTP simulator (a real server: the `--seed` knob keeps it,
    where the plain demo runs in process, kvtui.explore.pacing) would have to bind it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = kvtui("run", "sim-demo", "--headless", "--set", f"server.port={port}", "--set",
                  'server.extra_args=["--seed", "0"]', "--out", str(tmp_path / "out.json"), cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    line = fail_lines(r.stderr)
    assert len(line) == 1 and f"server.port {port} on 127.0.0.1 is taken" in line[0] and "--set server.port=0" in line[0]
    assert nothing_written(tmp_path)


def test_preflight_can_be_skipped(tmp_path, monkeypatch):
    from kvtui.io.scenario import load_scenario
    from kvtui.preflight import gate

    sc = load_scenario(scenario(tmp_path, tmp_path / "nope"))
    assert not gate(sc, sc.modes).ok
    monkeypatch.setenv("KVTUI_PREFLIGHT", "0")
    assert gate(sc, sc.modes).ok and not gate(sc, sc.modes).checks


def test_replicas_on_one_gpu_ask_for_their_shares_together(tmp_path, gpu_vllm, monkeypatch, capsys):
    """Issue 22: two replicas at 0.45 need 0.9 of the card free; 0.6 of it is not enough."""
    FakeGpuBox(monkeypatch, [H200(free=84.0)])
    sc = scenario(tmp_path, model_dir(tmp_path / "m"), extra="gpu_memory_utilization = 0.45\nreplicas = 2")
    rc = main(["run", str(sc), "--headless", "--out", str(tmp_path / "out.json")])
    _, err = capsys.readouterr()
    mem = [x for x in fail_lines(err) if " memory: " in x]
    assert rc == 1 and len(mem) == 1, err
    assert "gpu_memory_utilization 0.45 × 2 replicas asks for 125.8" in mem[0]
    assert nothing_written(tmp_path)


def test_data_parallel_needs_tp_times_dp_gpus(tmp_path, gpu_vllm, monkeypatch, capsys):
    FakeGpuBox(monkeypatch, [H200(), H200()])
    sc = scenario(tmp_path, model_dir(tmp_path / "m"), extra="data_parallel_size = 4")
    rc = main(["run", str(sc), "--headless", "--out", str(tmp_path / "out.json")])
    _, err = capsys.readouterr()
    gpu = [x for x in fail_lines(err) if " gpu: " in x]
    assert rc == 1 and len(gpu) == 1, err
    assert "tensor_parallel_size 1 × data_parallel_size 4 needs 4 GPUs, 2 visible" in gpu[0]
    assert "server.data_parallel_size=2" in gpu[0]
