#!/bin/bash
# Device side of the replicas experiment (issue 22): two vLLM replicas sharing one H200 (0.45 of
# the card each, kvtui's own launch: scenarios h200-llama8b-replicas) against one server at 0.90
# (h200-llama8b's bf16 mode), the published 8B-dummy workload, the same search resolution.
# After the staging calls and install (docs/RESULTS.md):
#   bash .gpuN/bin/install.sh && source /tmp/gpu-env.sh && bash scripts/h200_replicas.sh two 540
#   source /tmp/gpu-env.sh && bash scripts/h200_replicas.sh one 540
# A run cut by its time limit continues in the next call:  ... two 540 --resume /tmp/runs/h200-replicas-two.json
# (then OUTNAME=h200-replicas-two-b). Writes under $OUT: NAME.json, NAME.run.log, NAME.records.jsonl.gz, NAME.md.
set -uo pipefail
which=${1:?two or one}; secs=${2:?seconds}; shift 2
source /tmp/gpu-env.sh 2>/dev/null || true
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:/tmp/site:${PYTHONPATH:-}
mkdir -p /tmp/runs
case $which in
  two) S=h200-llama8b-replicas; modes=() ;;
  one) S=h200-llama8b; modes=(--mode bf16) ;;
  *) echo "usage: $0 two|one SECONDS [kvtui run args…]" >&2; exit 2 ;;
esac
name=${OUTNAME:-h200-replicas-$which}
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader
t0=$(date +%s)
timeout -s INT -k 30 "$secs" python3 -m kvtui run "$S" "${modes[@]}" --set ramp.max=256 --set ramp.resolution=32 \
    --headless --out "/tmp/runs/$name.json" -v "$@" > "/tmp/runs/$name.run.log" 2>&1
rc=$?
echo "$name rc=$rc in $(( $(date +%s) - t0 )) s"
grep -E "^\[|^kvtui: (error|snapshot)|replica" "/tmp/runs/$name.run.log" | grep -v "INFO\|WARNING" | tail -25
cp "/tmp/runs/$name.json" "/tmp/runs/$name.run.log" "$OUT/" 2>/dev/null
gzip -9 -c "/tmp/runs/$name.records.jsonl" > "$OUT/$name.records.jsonl.gz" 2>/dev/null
python3 -m kvtui export "/tmp/runs/$name.json" --format md --out "$OUT/$name.md" --force >/dev/null 2>&1
nvidia-smi --query-gpu=memory.used --format=csv,noheader
exit $rc
