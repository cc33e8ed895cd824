#!/bin/bash
# Issue 51 on a lent H100 or H200: MoE + MLA (DeepSeek-V2-Lite shape), MoE without MLA (Qwen3-30B-A3B shape) and
# the dense 8B shape, dummy weights, 4096 in / 384 out, default SLO (TTFT p95 <= 2 s, TPOT p95 <= 50 ms), four
# modes each, one kvtui run per mode, all of them one detached chain that no device call's end cuts.
#
# On the device, repo root, after the bundle's stage and install calls (/work/shared/gpu/README.md: vLLM 0.26 at
# /tmp/site, /tmp/model8b, /tmp/gpu-env.sh; platformdirs' wheel among the installed deps):
#     bash scripts/gpu51.sh models                      # builds /tmp/dsv2lite and /tmp/qwen3moe (shapedummy), seconds
#     bash scripts/h200_answer.sh detach bash scripts/gpu51.sh chain     # starts the chain, waits BUDGET_S (580 s)
#     bash scripts/h200_answer.sh wait                  # each later call, at once (a warm machine waits 30 s)
# PLAN="SCENARIO:MODE ..." picks the runs (default below; SCENARIO a shipped one, e.g. h100-dsv2lite-4k384).
# Each run resumes its scenario's latest snapshot; after each, one line "RESULT scenario mode knee=… start_s=…"
# goes to the chain's log. Time savers (issue 51, item 4): vLLM's compile cache (kvtui's per-user VLLM_CACHE_ROOT,
# kept across runs on the machine), CUDA graphs captured only up to CAPTURE (default: each scenario's
# ramp.max, so no load the search visits runs without a graph), the seeded search, confirmation only where in
# doubt, 3 s warm-up and 10 s windows.
# Anywhere, on the simulator (no GPU): SIM=1 bash scripts/gpu51.sh chain
set -u
WHAT=${1:-chain}
RUNS=${RUNS:-/tmp/runs}; mkdir -p "$RUNS"
PY=${PYTHON:-python3}
PLAN=${PLAN:-"h100-dsv2lite-4k384:bf16 h100-llama8b-4k384:bf16 h100-dsv2lite-4k384:fp8-kv h100-llama8b-4k384:fp8-kv \
h100-dsv2lite-4k384:fp8-w h100-dsv2lite-4k384:fp8-w+kv h100-llama8b-4k384:fp8-w h100-llama8b-4k384:fp8-w+kv"}
CAPTURE=${CAPTURE:-ramp}   # ramp: each scenario's ramp.max; 0: vLLM's default (512); N: up to N
SETS=(--set ramp.warmup_s=${WARMUP_S:-3} --set ramp.window_s=${WINDOW_S:-10} --set ramp.confirm_when='"'${CONFIRM_WHEN:-doubt}'"')
if [ "${SIM:-0}" = 1 ]; then
  extra=(--engine sim --fast)
else
  source /tmp/gpu-env.sh; export PYTHONPATH=$PWD:/tmp/site
  extra=(-v)
fi
models() {
  $PY -m kvtui.runtime.engines.vllm.shapedummy deepseek-v2-lite /tmp/dsv2lite
  $PY -m kvtui.runtime.engines.vllm.shapedummy qwen3-30b-a3b /tmp/qwen3moe
  nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader 2>/dev/null
}
result() {  # one line per finished run, from its snapshot
  $PY - "$1" "$2" <<'PYEOF'
import json, sys
doc = json.load(open(sys.argv[1]))
for m in doc["modes"]:
    if m["name"] != sys.argv[2]:
        continue
    st = m.get("steps") or []
    srv = m.get("server") or {}
    err = (m.get("error") or {}).get("message")
    loads = ",".join(f"{s.get('load', s.get('concurrency'))}{'' if s.get('passed') else 'x'}" for s in st)
    print(f"RESULT {doc['scenario']['name']} {m['name']} knee={m.get('best_concurrency')} steps={len(st)} "
          f"start_s={srv.get('startup_s')} compile_cache={srv.get('compile_cache')} "
          f"kv_tokens={srv.get('kv_cache_tokens') or srv.get('num_gpu_blocks')} loads={loads}"
          + (f" ERROR={err[:300]}" if err else ""))
PYEOF
}
chain() {
  for item in $PLAN; do
    sc=${item%%:*}; mode=${item##*:}
    latest=$RUNS/$sc.latest; out=$RUNS/$sc-$mode.json; res=()
    [ -f "$latest" ] && res=(--resume "$(cat "$latest")")
    cap=()
    if [ "${SIM:-0}" != 1 ] && [ "$CAPTURE" != 0 ]; then
      c=$CAPTURE
      [ "$c" = ramp ] && c=$($PY -c 'import sys; from pathlib import Path; from kvtui.paths import find_scenario; from kvtui.io.scenario import load_scenario; print(int(load_scenario(find_scenario(Path(sys.argv[1]))).ramp.max))' "$sc")
      cap=(--set "server.extra_args=[\"--max-cudagraph-capture-size=$c\"]")
    fi
    t0=$(date +%s)
    timeout -s INT "${MODE_TIMEOUT:-600}" $PY -m kvtui run "$sc" --mode "$mode" --headless --out "$out" "${res[@]}" \
      "${SETS[@]}" "${cap[@]}" "${extra[@]}" >"${out%.json}.run.log" 2>&1
    rc=$?
    echo "$sc $mode: rc=$rc in $(( $(date +%s) - t0 )) s (at $(date -u +%H:%M:%S))"
    if [ -f "$out" ]; then echo "$out" > "$latest"; result "$out" "$mode"; fi
    grep -E "^kvtui: (warning|error)|Error|refus" "${out%.json}.run.log" | grep -v "INFO\|DEBUG" | tail -4
  done
}
case "$WHAT" in
  models) models ;;
  chain) chain ;;
  *) echo "gpu51.sh: models | chain" >&2; exit 2 ;;
esac
