"""Real servers for the core tests: the simulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvtui.runtime.procs.servers import ServerProcess, free_port


@dataclass
class Served:
    base_url: str
    api_key: str
    model: str
    proc: ServerProcess


def start_sim(*args: str, api_key: str = "test-key-123456") -> Served:
    port = free_port()
    cmd = [sys.executable, "-m", "kvtui", "sim", "serve", "--port", str(port), *args]
    proc = ServerProcess(cmd, env={"KVTUI_SIM_API_KEY": api_key}, secrets=[api_key])
    proc.start()
    base = f"http://127.0.0.1:{port}"
    proc.wait_ready(base + "/health", timeout_s=60, what="simulator")
    model = "knee" if "--knee" in args else args[args.index("--model") + 1] if "--model" in args else "llama-3.1-8b"
    return Served(base, api_key, model, proc)


@pytest.fixture(scope="module")
def knee_server():
    s = start_sim("--knee", "6", "--knee-tpot-ms", "20", "--knee-slowdown", "3")
    yield s
    s.proc.stop()


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p
