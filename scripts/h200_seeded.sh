#!/bin/bash
# Issue 21 on the H200: one mode of a published workload re-run with the prediction-seeded search,
# its steps and GPU time against the published run's (docs/results).
#
# On the device (repo root, after .gpu4/bin/install.sh has unpacked /tmp/model8b and /tmp/gpu-env.sh):
#     bash scripts/h200_seeded.sh [MODE] [SCENARIO] [PUBLISHED.json]
# defaults: fp8-kv of the KV-bound workload (h200-llama8b-kvbound, published docs/results/h200-kvb.json:
# 7 steps, 371 s of steps, knee 148). Writes /tmp/runs/seeded-MODE.{json,run.log,records.jsonl} and,
# under $OUT, the snapshot, its log and the comparison (seeded-MODE.md).
#
# Anywhere, on the simulator (no GPU; the same scenario, mode and search, offline in seconds):
#     SIM=1 bash scripts/h200_seeded.sh fp8-kv
set -u
MODE=${1:-fp8-kv}; SC=${2:-h200-llama8b-kvbound}; PUB=${3:-docs/results/h200-kvb.json}
OUT=${OUT:-/tmp/runs}; mkdir -p /tmp/runs "$OUT"
PY=${PYTHON:-python3}
args=(run "$SC" --mode "$MODE" --set ramp.search=\"seeded\" --headless --out /tmp/runs/seeded-$MODE.json)
if [ "${SIM:-0}" = 1 ]; then
  rm -f /tmp/runs/seeded-$MODE.json /tmp/runs/seeded-$MODE.records.jsonl /tmp/runs/seeded-$MODE.journal.jsonl
  args+=(--engine sim --fast --set server.model=\"llama-3.1-8b\" --set server.gpu=\"H200\")
else
  source /tmp/gpu-env.sh; export PYTHONPATH=$PWD:/tmp/site
  args+=(-v)
fi
t0=$(date +%s)
$PY -m kvtui "${args[@]}" >/tmp/runs/seeded-$MODE.run.log 2>&1
echo "run rc=$? in $(( $(date +%s) - t0 )) s"
grep -E "^\[|prediction|^kvtui: (warning|error)" /tmp/runs/seeded-$MODE.run.log | grep -v "INFO\|WARNING" | tail -14
$PY scripts/seeded_vs_published.py "$PUB" /tmp/runs/seeded-$MODE.json "$MODE" | tee "$OUT/seeded-$MODE.md"
[ "$OUT" != /tmp/runs ] && cp /tmp/runs/seeded-$MODE.json /tmp/runs/seeded-$MODE.run.log "$OUT/" 2>/dev/null
exit 0
