#!/bin/bash
# Device side of the real-weights H200 run (docs/RESULTS.md, "SmolLM2 on the H200").
# After the staging calls (scripts/gpu_bundle_split.sh's .gpu* folders, the GGUF in .gpuG*):
#   bash .gpuN/bin/install.sh && source /tmp/gpu-env.sh && bash scripts/h200_smollm2.sh MODES... [-- --resume X]
# Puts the staged GGUF where kvtui's model cache looks, builds the bf16 model directory from it
# with the image's transformers (kvtui model build), and runs the shipped scenario's given modes.
set -uo pipefail
export KVTUI_MODELS_DIR=/tmp/kvm PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:/tmp/site:${PYTHONPATH:-}
mkdir -p $KVTUI_MODELS_DIR/gguf
G=$KVTUI_MODELS_DIR/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$G" ]; then
  cat $(ls /tmp/stage/gguf.part* | sort) > "$G.part" && mv "$G.part" "$G"
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu*/deps/gguf-*.whl .gpu*/deps/platformdirs-*.whl 2>/dev/null | grep -v "Target directory" || true
t0=$(date +%s)
python3 -m kvtui model build smollm2-135m-instruct || exit 3
echo "model build: $(( $(date +%s) - t0 )) s"
modes=(); rest=()
while [ $# -gt 0 ]; do if [ "$1" = "--" ]; then shift; rest=("$@"); break; fi; modes+=(--mode "$1"); shift; done
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader
python3 -m kvtui run scenarios/h200-smollm2.toml --headless "${modes[@]}" --out "$OUT/${OUTNAME:-h200-smollm2}.json" "${rest[@]}" 2>&1 | tee "$OUT/${OUTNAME:-h200-smollm2}.run.log" | grep -v "^  |"
rc=${PIPESTATUS[0]}
gzip -9 -f "$OUT/${OUTNAME:-h200-smollm2}.records.jsonl" 2>/dev/null
python3 -m kvtui export "$OUT/${OUTNAME:-h200-smollm2}.json" --format md --out "$OUT/${OUTNAME:-h200-smollm2}.md" >/dev/null 2>&1
nvidia-smi --query-gpu=memory.used --format=csv,noheader
exit $rc
