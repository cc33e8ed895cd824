"""kvtui's simulator as a real HTTP server for a test module: `kvtui sim serve` on a free loopback port
with its API key, ready before the first test, stopped after the last."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

from kvtui.runtime.procs.servers import ServerProcess, free_port


@contextmanager
def serving_sim(key: str, *args: str) -> Iterator[str]:
    """The simulator's base URL while the block runs (`args`: more `kvtui sim serve` options)."""
    port = free_port()
    proc = ServerProcess([sys.executable, "-m", "kvtui", "sim", "serve", "--port", str(port), *args],
                         env={"KVTUI_SIM_API_KEY": key}, secrets=[key])
    proc.start()
    try:
        base = f"http://127.0.0.1:{port}"
        proc.wait_ready(base + "/health", timeout_s=60, what="simulator")
        yield base
    finally:
        proc.stop()
