#!/bin/bash
# Issue 28 on the H200: a four-mode comparison (bf16, fp8 KV, fp8 weights, fp8 w+kv) on the 8B
# shape, 8k prompt / 512 out, TTFT p95 ≤ 3 s, ITL p95 ≤ 300 ms (8k prefills stall decode ~200 ms; ITL_P95_MS, TPOT_P95_MS below), no preemption
# (an SLO the window alone can judge: docs/PROTOCOL.md), with the continuous protocol, one mode per call so each
# fits a 10-minute device call; the snapshot carries the finished modes (--resume).
#
# kvtui itself needs platformdirs, which the device image lacks: add its wheel to .gpu3/deps before the install call
# (python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .gpu3/deps platformdirs).
# On the device (repo root, vLLM 0.26 at /tmp/site, model /tmp/model8b, /tmp/gpu-env.sh as in
# /work/shared/gpu/README.md), one call per mode, at once one after the other (warm 30 s):
#     bash scripts/h200_answer.sh bf16
#     bash scripts/h200_answer.sh fp8-kv
#     bash scripts/h200_answer.sh fp8-w
#     bash scripts/h200_answer.sh fp8-w+kv
# then, in any call (or here on the fetched $OUT): bash scripts/h200_answer.sh report
# Each call writes $OUT/answer.json (the snapshot so far), answer-MODE.run.log and prints the time
# split (start / windows / overhead per mode). Anywhere, on the simulator: SIM=1 bash scripts/h200_answer.sh all
# Or the whole comparison as one run that no call's end cuts (a device call lasts 10 minutes at most):
#     bash scripts/h200_answer.sh detach bash scripts/h200_answer.sh all     # first call: starts it, waits BUDGET_S
#     bash scripts/h200_answer.sh wait                                        # each call after it, at once
# Each returns $OUT/TAG-runs-*.tar.xz with everything so far; `wait` says when the chain is done.
set -u
WHAT=${1:-all}
PROTOCOL=${PROTOCOL:-continuous}
RUNS=${RUNS:-/tmp/runs}   # where each run's snapshot, records and log go (the tests give their own)
OUT=${OUT:-$RUNS}; mkdir -p "$RUNS" "$OUT"
PY=${PYTHON:-python3}
# SCENARIO=NAME runs a shipped scenario instead (e.g. h200-llama8b, the published 2k/256 workload) under TAG.
TAG=${TAG:-answer}
LATEST=$RUNS/$TAG.latest   # the path of the newest snapshot (each run writes its own --out; the next resumes it)
SC=$RUNS/$TAG.toml   # per TAG: a detached chain's runs, and a `wait` beside them, never rewrite one another's
bundle() {  # everything this call measured, in one file ($OUT takes 8 files at most)
  tar -C "$RUNS" -cJf "$OUT/$TAG-runs-$(date +%H%M%S).tar.xz" . 2>/dev/null
}
wait_chain() {  # wait for a detached chain (below) until it is done or ${BUDGET_S:-580} s have passed; bundle what it has
  local t_end=$(( $(date +%s) + ${BUDGET_S:-580} ))
  while [ ! -f "$RUNS/chain.done" ] && [ "$(date +%s)" -lt "$t_end" ]; do sleep 2; done
  if [ -f "$RUNS/chain.done" ]; then
    echo "chain: done, rc $(cat "$RUNS/chain.done")"
  elif [ -f "$RUNS/chain.pid" ]; then
    echo "chain: still running (pid $(cat "$RUNS/chain.pid")): call 'bash scripts/h200_answer.sh wait' again at once (a warm machine waits 30 s)"
  else
    echo "chain: none was started in $RUNS"
  fi
  tail -n 60 "$RUNS/chain.log" 2>/dev/null
  bundle
}
# detach and wait run no scenario of their own: they are handled before one is written, so a chain's stays as it is
case "$WHAT" in
  detach)  # detach COMMAND...: run COMMAND (e.g. `bash scripts/h200_answer.sh all`, or a bash -c chain of such runs) in a
           # session of its own, so that it outlives this device call (a call's leftover processes are killed when it
           # returns, except a new session's), then wait for it as `wait` does. The runs then go on across calls with no
           # cut: a mode is never stopped by a call's end and restarted (its server started again) by the next.
    shift
    [ $# -gt 0 ] || { echo "detach: name the command to run (e.g. bash scripts/h200_answer.sh all)" >&2; exit 2; }
    rm -f "$RUNS/chain.done" "$RUNS/chain.pid"
    # the runs inside write their snapshots and splits under $RUNS: each call's $OUT is emptied before it starts
    OUT=$RUNS CHAIN_DIR=$RUNS setsid bash -c 'echo $$ > "$CHAIN_DIR/chain.pid"; "$@"; echo $? > "$CHAIN_DIR/chain.done"' \
      chain "$@" >"$RUNS/chain.log" 2>&1 </dev/null &
    wait_chain
    exit 0 ;;
  wait) wait_chain; exit 0 ;;
esac
# ITL_P95_MS=100: the interactive SLO for the same workload (300: the published one, a KV-bound knee).
# TPOT_P95_MS=30: judge decode by each request's mean gap instead (MLPerf's LLM latency constraints bound TTFT
# and TPOT, at p99); ITL is then judged only where ITL_P95_MS is also given. At 8k prompts an ITL p95 is a cliff
# (an 8k prefill stalls every stream ~170 ms: the p95 reads a stall once more than 5 % of gaps are stalled),
# a TPOT p95 rises smoothly with load (docs/results/h200-8k512-itl100.md).
if [ -n "${TPOT_P95_MS:-}" ]; then
  DECODE_SLO="tpot_p95_ms = $TPOT_P95_MS${ITL_P95_MS:+
itl_p95_ms = $ITL_P95_MS}"
  DECODE_TEXT="TPOT p95 <= ${TPOT_P95_MS} ms${ITL_P95_MS:+, ITL p95 <= $ITL_P95_MS ms}"
else
  ITL_P95_MS=${ITL_P95_MS:-300}
  DECODE_SLO="itl_p95_ms = $ITL_P95_MS"
  DECODE_TEXT="ITL p95 <= ${ITL_P95_MS} ms"
fi
cat >"$SC" <<TOML
name = "h200-answer-8k512"
description = "8B shape, 8k in / 512 out, TTFT p95 <= 3 s, $DECODE_TEXT: the answer in minutes (issue 28)"
seed = 0
[server]
engine = "vllm"
model = "/tmp/model8b"
served_model_name = "m8b"
load_format = "dummy"
max_model_len = 9216
gpu_memory_utilization = 0.9
enable_prefix_caching = false
startup_timeout_s = 600
gpu = "H200"
env = { VLLM_USE_FLASHINFER_SAMPLER = "0" }
[[modes]]
name = "bf16"
dtype = "bfloat16"
[[modes]]
name = "fp8-kv"
dtype = "bfloat16"
kv_cache_dtype = "fp8"
[[modes]]
name = "fp8-w"
dtype = "bfloat16"
quantization = "fp8"
[[modes]]
name = "fp8-w+kv"
dtype = "bfloat16"
quantization = "fp8"
kv_cache_dtype = "fp8"
[workload]
api = "completions"
prompt_tokens = 8192
output_tokens = 512
jitter = 0.1
ignore_eos = true
[ramp]
start = 8
max = 256
search = "auto"
warmup_s = 5
resolution = 8
protocol = "$PROTOCOL"
confirm_when = "${CONFIRM_WHEN:-always}"
min_samples = ${MIN_SAMPLES:-20}
window_s = ${WINDOW_S:-20}
[slo]
ttft_p95_ms = 3000
$DECODE_SLO
max_error_rate = 0.01
max_preemptions_per_request = 0
TOML
[ -n "${SCENARIO:-}" ] && SC=$SCENARIO
# A shipped scenario keeps its own [ramp]: what is asked for here overrides it on the command line (before
# 2026-12-05 it did not, and the "doubt" runs of h200-2k256-doubt.md ran the scenario's "always").
SETS=()
for kv in confirm_when=${CONFIRM_WHEN:-} min_samples=${MIN_SAMPLES:-} window_s=${WINDOW_S:-}; do
  [ -n "${kv#*=}" ] && SETS+=(--set "ramp.$kv")
done
for kv in ${SET:-}; do SETS+=(--set "$kv"); done   # SET="ramp.search=fast ramp.start=128": any other override
if [ "${SIM:-0}" = 1 ]; then
  [ -n "${SCENARIO:-}" ] && { SC=$RUNS/$TAG.toml; cp "$($PY -c 'import sys; from pathlib import Path; from kvtui.paths import find_scenario; print(find_scenario(Path(sys.argv[1])))' "$SCENARIO")" "$SC"; }
  sed -i 's/^engine = "vllm"/engine = "sim"/; s#^model = "/tmp/model8b"#model = "llama-3.1-8b"#' "$SC"
  extra=(--fast)
else
  source /tmp/gpu-env.sh; export PYTHONPATH=$PWD:/tmp/site
  extra=(-v)
fi
split() {  # the time split per mode and for the comparison, from the snapshot
  $PY - "$1" <<'PYEOF'
import json, statistics, sys
doc = json.load(open(sys.argv[1]))
tot = {"start": 0.0, "windows": 0.0, "overhead": 0.0}
r = doc["scenario"]["ramp"]
print(f"ramp: protocol {r.get('protocol')}, confirm_when {r.get('confirm_when')}, warm-up {r.get('warmup_s')} s, window {r.get('window_s')} s")
print("mode       knee  steps  start_s  windows_s  overhead_s  total_s  median_step_s  stopped_early")
for m in doc["modes"]:
    st = m.get("steps") or []
    if not st:
        print(f"{m['name']:<10} (no steps: {(m.get('error') or {}).get('message', 'not measured')})"); continue
    # every server started for the mode: this run's, and those of the runs it continued (a call's end cut it)
    start = float((m.get("server") or {}).get("startup_s") or 0) + sum((m.get("continued") or {}).get("startup_s") or [])
    win = sum(s["t_window_end"] - s["t_window_start"] for s in st)
    meas = sum(s["duration_s"] for s in st)
    for k, v in (("start", start), ("windows", win), ("overhead", meas - win)):
        tot[k] += v
    print(f"{m['name']:<10} {m.get('best_concurrency')!s:>5} {len(st):>6} {start:>8.0f} {win:>10.0f} {meas - win:>11.0f}"
          f" {start + meas:>8.0f} {statistics.median(s['duration_s'] for s in st):>14.1f}"
          f" {sum(1 for s in st if s.get('stopped_early')):>14}")
print(f"comparison: start {tot['start']:.0f} s, windows {tot['windows']:.0f} s, overhead {tot['overhead']:.0f} s, "
      f"total {sum(tot.values()):.0f} s ({sum(tot.values()) / 60:.1f} min)")
PYEOF
}
# CAL_SCALE=0.7: predict from a calibration whose efficiencies (weights, GEMM, KV bandwidth) are that
# factor of the shipped H200 one: a prediction made wrong on purpose (x0.7: about 30 % low), to show the
# search recovering on the real GPU (issue 28, item 5). The file is written here, its factor in its name.
CAL=()
if [ -n "${CAL_SCALE:-}" ]; then
  CALF=$RUNS/cal-x$CAL_SCALE.toml
  $PY - "$CAL_SCALE" "$CALF" <<'PYEOF'
import sys
from pathlib import Path
from kvtui.explore.refit import REFIT_PARAMS
from kvtui.simulator.model import fit
from kvtui.simulator.model.calibration_file import calibration_toml, read_calibration
f = float(sys.argv[1])
cal = fit.apply(read_calibration(None), REFIT_PARAMS, [f] * len(REFIT_PARAMS))
cal.name = f"h200-vllm-0.26.0-x{sys.argv[1]}"
Path(sys.argv[2]).write_text(calibration_toml(cal, {"note": f"the shipped H200 calibration, efficiencies x{f}: wrong on purpose"}))
PYEOF
  CAL=(--calibration "$CALF")
fi
run_mode() {
  local mode=$1 res=() out
  out=$RUNS/$TAG-$mode-$(date +%s).json   # a run never shares its --out: each run its own, resuming the last
  [ -f "$LATEST" ] && res=(--resume "$(cat "$LATEST")")
  t0=$(date +%s)
  timeout -s INT "${TIMEOUT:-100000}" $PY -m kvtui run "$SC" --mode "$mode" --headless --out "$out" "${res[@]}" "${SETS[@]}" "${CAL[@]}" "${extra[@]}" \
    >"${out%.json}.run.log" 2>&1
  echo "$mode: rc=$? in $(( $(date +%s) - t0 )) s"
  [ -f "$out" ] && echo "$out" > "$LATEST"
  grep -E "^\[|^kvtui: (warning|error)" "${out%.json}.run.log" | grep -v "INFO\|WARNING" | tail -8
}
finished() {  # the modes the snapshot holds as finished (search done), one per line
  [ -f "$LATEST" ] || return 0
  $PY -c 'import json,sys; [print(m["name"]) for m in json.load(open(sys.argv[1]))["modes"] if (m.get("search") or {}).get("done")]' "$(cat "$LATEST")"
}
case "$WHAT" in
  report) ;;
  next)  # one device call: the modes not yet finished, in order, within ${BUDGET_S:-560} s from now; a mode cut by
         # the call's end is resumed by the next call (--resume keeps its steps)
    t_end=$(( $(date +%s) + ${BUDGET_S:-560} ))
    for m in ${MODES:-bf16 fp8-kv fp8-w fp8-w+kv}; do
      finished | grep -qxF "$m" && continue
      left=$(( t_end - $(date +%s) ))
      [ "$left" -lt "${MIN_MODE_S:-150}" ] && { echo "next: ${left} s left in this call: $m waits for the next"; break; }
      TIMEOUT=$(( left - 10 )) run_mode "$m"
    done
    echo "finished: $(finished | tr '\n' ' ')"
    bundle ;;
  all) rm -f "$LATEST" $RUNS/$TAG-*; for m in ${MODES:-bf16 fp8-kv fp8-w fp8-w+kv}; do run_mode "$m"; done ;;
  *) run_mode "$WHAT" ;;
esac
[ -f "$LATEST" ] && split "$(cat "$LATEST")" | tee "$OUT/$TAG-split.txt"
exit 0
