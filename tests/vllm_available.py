"""Whether the vLLM CPU build (and what the real-model test needs beside it) imports here.

Asked once per test process, in one child: importing vLLM imports torch (~12 s of CPU, a minute of wall
time on a busy two-core machine), and the vLLM tests of tests/vllm and tests/e2e, which all run on the same
xdist worker (tests/conftest.py's "vllm" queue), used to ask one child each.

    missing("vllm.entrypoints.openai.api_server", "lm_eval")  -> None, or the first import's error line
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys

# Every module any test asks about: one child imports them all, each on its own (one missing module
# does not hide the others).
MODULES = ("vllm", "vllm.entrypoints.openai.api_server", "vllm.benchmarks.serve", "lm_eval", "tenacity")

_CHILD = """
import importlib, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        out[name] = None
    except BaseException as e:  # an import that raises anything is "not importable", with its reason
        out[name] = f"{type(e).__name__}: {e}".splitlines()[0]
print("KVTUI-IMPORTS " + json.dumps(out))
"""


@functools.lru_cache(maxsize=1)
def _errors() -> dict[str, str | None]:
    r = subprocess.run([sys.executable, "-c", _CHILD, *MODULES], capture_output=True, text=True, timeout=300)
    for line in r.stdout.splitlines():
        if line.startswith("KVTUI-IMPORTS "):
            return json.loads(line[len("KVTUI-IMPORTS "):])
    # The child died (a crash inside an import): every module is missing, with its last line as the reason.
    why = (r.stderr.strip().splitlines() or [f"the import check exited {r.returncode}"])[-1]
    return {name: why for name in MODULES}


def missing(*modules: str) -> str | None:
    """None when every module imports in this interpreter, else the first one's error line."""
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        raise ValueError(f"add {unknown} to tests/vllm_available.py MODULES")
    errs = _errors()
    return next((errs[m] for m in modules if errs[m]), None)
