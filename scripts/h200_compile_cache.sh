#!/bin/bash
# Issue 28 item 7 on the H200: what keeping vLLM's torch.compile cache saves per mode start.
# Three kvtui runs of one short step each, against one fresh cache root (KVTUI_VLLM_CACHE_ROOT):
#   1. MODE, the root empty         -> modes[].server.compile_cache = "cold" (compiles)
#   2. MODE again                   -> "hit" (loads the graphs; the saving = 1's start − 2's start)
#   3. OTHER mode, the same root    -> "miss" (another configuration: compiles beside MODE's entry)
# On the device (repo root, after the bundle's install step: /tmp/model8b and /tmp/gpu-env.sh):
#     bash scripts/h200_compile_cache.sh [MODE] [OTHER|-] [SCENARIO]
# defaults: bf16, fp8-kv, h200-llama8b. About 3 starts × 80–130 s + 3 × ~20 s of step: ≈ 6–7 min.
# Writes $OUT/compile-cache.md (a table: start s, torch.compile s, engine init s, cache state) and
# the three snapshots.
set -u
MODE=${1:-bf16}; OTHER=${2:-fp8-kv}; SC=${3:-h200-llama8b}
[ "$OTHER" = "-" ] && OTHER=""
OUT=${OUT:-/tmp/runs}; mkdir -p /tmp/runs "$OUT"
PY=${PYTHON:-python3}
source /tmp/gpu-env.sh; export PYTHONPATH=$PWD:/tmp/site
export KVTUI_VLLM_CACHE_ROOT=/tmp/kvtui-vllm-cache-$$   # fresh: the first start is cold
rm -rf "$KVTUI_VLLM_CACHE_ROOT"
one() {  # $1 tag, $2 mode
  $PY -m kvtui run "$SC" --mode "$2" --headless -v --out "/tmp/runs/cc-$1.json" \
    --set ramp.search=\"linear\" --set ramp.confirm=false --set ramp.start=8 --set ramp.max=8 \
    --set ramp.warmup_s=2 --set ramp.window_s=8 >"/tmp/runs/cc-$1.run.log" 2>&1
  echo "$1 ($2): rc=$?"; grep -E "\] (ready|start):" "/tmp/runs/cc-$1.run.log"
  grep -m1 -o "launching: .\{0,160\}" "/tmp/runs/cc-$1.run.log"   # the key through stdin where vLLM hashes it
}
one cold "$MODE"; one warm "$MODE"; [ -n "$OTHER" ] && one other "$OTHER"   # OTHER "-": skip the third start

$PY - "$OUT/compile-cache.md" <<'PY'
import json, sys
rows = ["| start | mode | cache | ready s | torch.compile s | engine init s | load s |", "|---|---|---|---|---|---|---|"]
got = {}
for tag in ("cold", "warm", "other"):
    try:
        d = json.load(open(f"/tmp/runs/cc-{tag}.json"))
    except (OSError, ValueError) as e:
        rows.append(f"| {tag} | — | failed: {e} | | | | |"); continue
    m = d["modes"][0]; s = m.get("server") or {}
    got[tag] = s
    rows.append(f"| {tag} | {m['name']} | {s.get('compile_cache')} | {s.get('startup_s')} | {s.get('compile_s')} | "
                f"{s.get('init_engine_s')} | {s.get('load_s')} |")
if "cold" in got and "warm" in got and got["cold"].get("startup_s") and got["warm"].get("startup_s"):
    c, w = got["cold"], got["warm"]
    rows += ["", f"saving of a warm start: {c['startup_s'] - w['startup_s']:.1f} s of {c['startup_s']:.1f} s "
                 f"(×{w['startup_s'] / c['startup_s']:.2f}); torch.compile {c.get('compile_s')} s → {w.get('compile_s')} s"]
text = "\n".join(rows)
print(text); open(sys.argv[1], "w").write(text + "\n")
PY
cp /tmp/runs/cc-*.json /tmp/runs/cc-*.run.log "$OUT/" 2>/dev/null
exit 0
