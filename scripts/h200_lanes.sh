#!/bin/bash
# Device session of 2026-11-30 (second machine): two lanes in parallel on an nvidia-h200-x2, one
# kvtui per GPU (CUDA_VISIBLE_DEVICES), each lane's runs back to back until a common deadline.
# Usage (repo root on the device, after .gpu4/bin/install.sh):  bash scripts/h200_lanes.sh SECONDS
# Writes /tmp/runs/NAME.{json,run.log,records.jsonl} and, under $OUT, the snapshots and logs
# (runs.tar.gz) and each run's new per-request records (NAME.new.jsonl.gz; the records a run
# carried over from the snapshot it resumed are already here).
set -u
t0=$(date +%s); deadline=$(( t0 + ${1:?seconds} ))
source /tmp/gpu-env.sh; export PYTHONPATH=$PWD:/tmp/site; mkdir -p /tmp/runs
[ -d /tmp/model70b ] || python3 -m kvtui.runtime.engines.vllm.tinymodel /tmp/model70b --no-weights --layers 80 --hidden 8192 \
    --heads 64 --kv-heads 8 --head-dim 128 --intermediate 28672 --vocab 128256 --max-position 131072 >/dev/null
[ -d /tmp/model70b-awq ] || python3 -m kvtui.runtime.engines.vllm.awqdummy /tmp/model70b /tmp/model70b-awq >/dev/null
[ -d /tmp/model8b-awq ] || python3 -m kvtui.runtime.engines.vllm.awqdummy /tmp/model8b /tmp/model8b-awq >/dev/null
FG="h200-llama8b --set ramp.max=256 --set ramp.resolution=32"
KV=h200-llama8b-kvbound
B70=h200-llama70b
# run GPU NAME NEWMODES ARGS…: NEWMODES (a grep pattern) picks the records measured here.
run() {
  local gpu=$1 name=$2 pat=$3; shift 3
  local left=$(( deadline - $(date +%s) ))
  if [ $left -lt 60 ]; then echo "$name: not started ($left s left)"; return; fi
  CUDA_VISIBLE_DEVICES=$gpu timeout -s INT -k 25 $left python3 -m kvtui run "$@" --headless \
      --out /tmp/runs/$name.json -v >/tmp/runs/$name.run.log 2>&1
  echo "$name rc=$? at $(( $(date +%s) - t0 )) s"
  grep -E "\"mode\":\"($pat)\"" /tmp/runs/$name.records.jsonl | gzip > $OUT/$name.new.jsonl.gz
}
( run 0 fg-awq 'awq-int4\+fp8-kv' $FG --mode awq-int4+fp8-kv --resume docs/results/h200-v2.json
  run 0 b70-a 'bf16|awq-int4\+fp8-kv' $B70 --mode bf16 --mode awq-int4+fp8-kv ) &
( run 1 kvb3 'fp8-w' $KV --mode fp8-w --resume .runs/kvb2.json
  run 1 b70-w 'fp8-w\+kv' $B70 --mode fp8-w+kv ) &
wait
cd /tmp/runs && tar czf $OUT/runs.tar.gz *.json *.run.log
for f in /tmp/runs/*.run.log; do echo "== $f"; grep -E "^\[|^kvtui: error" "$f" | grep -v "INFO\|WARNING" | tail -14; done
nvidia-smi --query-gpu=index,memory.used --format=csv; echo "end $(( $(date +%s) - t0 )) s"
