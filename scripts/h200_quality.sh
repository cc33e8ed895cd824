#!/bin/bash
# Issue 32 on the H200: SmolLM2-135M-Instruct in bf16, fp8 KV, fp8 weights and fp8 w+kv
# (kvtui/data/scenarios/h200-smollm2-quality.toml), each mode with
#   - kvtui_arith through lm-evaluation-harness (its YAML task, its 300 items in the tree, the
#     harness's prompts and scoring), n = 300 a mode;
#   - multi-key needles at 2k/4k/8k and the agreement prompts (150 each);
#   - quality at the knee: those 600 items again while the knee's load runs (n >= 150 a task);
#   - TOST against bf16 (2 pt) and the q-adjusted $/Mtok as a range.
# The device has no network: the harness's wheels travel in the tree's staging folders, the data
# inside the tree (kvtui/data/eval). Following /work/shared/gpu/README.md and scripts/h200_smollm2.sh.
#
# HERE (no device time), from the project's root, once:
#   bash ../shared/gpu/build_bundle.sh && bash scripts/gpu_bundle_split.sh   # vLLM 0.26.0 (.gpu1 … .gpuN)
#   (the SmolLM2 GGUF in .gpuG* as for scripts/h200_smollm2.sh)
#   bash scripts/h200_quality.sh stage        # lm_eval[api] 0.4.13 + deps, py3.12 wheels -> .gpuE1 …
# ON THE DEVICE, back to back (the machine stays warm ~30 s between calls):
#   carry [".gpu1"]  : bash .gpu1/bin/stage.sh        … each vLLM folder but the last, and .gpuG* …
#   carry [".gpuE1"] : bash scripts/h200_quality.sh stage-device .gpuE1     … each .gpuE folder (3, ~44 MiB) …
#   carry [".gpuN"]  : bash .gpuN/bin/install.sh && source /tmp/gpu-env.sh && bash scripts/h200_quality.sh run bf16 fp8-kv
#   carry []         : source /tmp/gpu-env.sh && OUTNAME=h200-quality-b bash scripts/h200_quality.sh run fp8-w fp8-w+kv
# Fewer calls (five, 2026-12-03): `GGUF=… bash scripts/h200_quality.sh payload` after `stage` packs all of the
# above into .gpuP1 … .gpuPn (scripts/gpu_payload.sh); on the device, `gpu_payload.sh stage` for each but the
# last, then `gpu_payload.sh unpack /tmp/stage && bash scripts/h200_quality.sh install`, then `run` as above.
# Two modes a call: each mode is ~1 min to start, ~1 min of steps, a few minutes of quality phases
# (600 items alone, 600 at the knee). `give_back` when done. The snapshot, its Markdown and the
# log come back under $OUT; publish them in docs/results/ with these commands.
set -uo pipefail
cmd=${1:-}; shift || true
DEVICE_HAS='^(torch|numpy|transformers|tokenizers|safetensors|huggingface_hub|hf_xet|pyyaml|regex|requests|urllib3|certifi|idna|charset_normalizer|tqdm|filelock|fsspec|packaging|jinja2|markupsafe|typing_extensions|httpx|httpcore|anyio|h11|sniffio|rich|pygments|markdown_it_py|mdurl|setuptools|aiohttp|aiosignal|aiohappyeyeballs|attrs|frozenlist|multidict|propcache|yarl|psutil|six|python_dateutil)-'

case "$cmd" in
stage)  # here: download the harness and its dependencies as Python 3.12 wheels, split under 48 MiB
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  # Three of lm-eval's requirements are sdists only: built here (pure Python, any interpreter).
  python3 -m pip wheel -q --no-deps -w "$work" sqlitedict word2number rouge-score
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any --find-links "$work" -d "$work" 'lm_eval[api]==0.4.13'
  # One tarball of the wheels the image lacks, cut in 44 MiB parts (pyarrow alone is ~50 MB), a folder each.
  mkdir -p "$work/keep"
  for w in "$work"/*.whl; do basename "$w" | grep -Eiq "$DEVICE_HAS" || cp "$w" "$work/keep/"; done
  tar -C "$work/keep" -cf "$work/evaldeps.tar" . && rm -rf .gpuE[0-9]*
  split -b 44M -d -a 2 "$work/evaldeps.tar" "$work/evaldeps.tar.part"
  n=0; for part in "$work"/evaldeps.tar.part*; do n=$((n + 1)); mkdir -p .gpuE$n; mv "$part" .gpuE$n/; done
  (cd "$work" && md5sum evaldeps.tar | cut -d' ' -f1) > .gpuE$n/evaldeps.md5
  ex=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$ex")"
  grep -q '^/.gpuE' "$ex" 2>/dev/null || echo '/.gpuE*/' >> "$ex"
  du -sh .gpuE*; echo "h200_quality: stage each .gpuE folder with 'stage-device' before the run" ;;
stage-device)  # on the device: keep this call's wheels for the run
  mkdir -p /tmp/stage && cp "$1"/evaldeps.* /tmp/stage/ && ls -l /tmp/stage/evaldeps.* ;;
payload)  # here: everything the device needs in one stream (scripts/gpu_payload.sh), fewer calls
  # The harness's wheels less those the device image holds (pyarrow, scipy, pandas, scikit-learn, lxml:
  # 117 of its 130 MB; KINDS.md lists the image), the vLLM bundle whole, its deps with gguf and
  # platformdirs (the model build), the dummy 8B model, env.sh, and the SmolLM2 GGUF ($GGUF).
  : "${GGUF:?GGUF=path of SmolLM2-135M-Instruct.Q4_1.gguf (kvtui model build leaves it in its models dir)}"
  B=${BUNDLE:-/tmp/vllm_bundle}; work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/ev" "$work/deps"
  cat $(ls .gpuE[0-9]*/evaldeps.tar.part* | sort) | tar -x -C "$work/ev"
  rm -f "$work"/ev/pyarrow-* "$work"/ev/scipy-* "$work"/ev/pandas-* "$work"/ev/scikit_learn-* "$work"/ev/lxml-*
  tar -C "$work/ev" -cf "$work/evaldeps.tar.part00" . && md5sum < "$work/evaldeps.tar.part00" | cut -d' ' -f1 > "$work/evaldeps.md5"
  cp "$B"/deps/*.whl "$work/deps/"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform any -d "$work/deps" gguf==0.19.0 platformdirs==4.14.9
  tar -C "$work" -cf "$work/deps.tar" deps
  cp "$GGUF" "$work/gguf.part00"
  bash scripts/gpu_payload.sh pack "$B/vllm026.tar.xz" "$B/model8b.tar.xz" "$(ls -d .gpu[0-9]*/bin | tail -1)/env.sh" \
    "$work/deps.tar" "$work/evaldeps.tar.part00" "$work/evaldeps.md5" "$work/gguf.part00" ;;
install)  # on the device, after `gpu_payload.sh unpack /tmp/stage`: vLLM and its deps into /tmp/site
  set -e
  tar -xf /tmp/stage/deps.tar -C /tmp/stage
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    /tmp/stage/deps/*.whl 2>&1 | grep -v "Target directory" || true
  xz -dc -T0 /tmp/stage/vllm026.tar.xz | tar x -C /tmp/site
  tar xJf /tmp/stage/model8b.tar.xz -C /tmp
  # xgrammar 0.2.9 passes extra_lib_paths= to apache-tvm-ffi 0.1.10 (vLLM's pin), which lacks it.
  sed -i "s/, extra_lib_paths=package_paths//" /tmp/site/xgrammar/load_binding.py
  cp /tmp/stage/env.sh /tmp/gpu-env.sh
  source /tmp/gpu-env.sh
  python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" ;;
run)  # on the device, after install.sh: the harness, the model, the run
  export KVTUI_MODELS_DIR=/tmp/kvm PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:/tmp/site:${PYTHONPATH:-}
  export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1
  if ! python3 -c 'import lm_eval, tenacity, datasets, sacrebleu' 2>/dev/null; then
    cat $(ls /tmp/stage/evaldeps.tar.part* | sort) > /tmp/stage/evaldeps.tar
    [ "$(md5sum < /tmp/stage/evaldeps.tar | cut -d' ' -f1)" = "$(cat /tmp/stage/evaldeps.md5)" ] || {
      echo "h200_quality: the staged harness wheels are incomplete: stage every .gpuE folder" >&2; exit 3; }
    mkdir -p /tmp/stage/evaldeps && tar -C /tmp/stage/evaldeps -xf /tmp/stage/evaldeps.tar
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/stage/evaldeps/*.whl 2>&1 \
      | grep -v "Target directory" || true
  fi
  python3 -c 'import importlib.metadata as m, lm_eval; print("lm-eval", m.version("lm_eval"))' || {
    echo "h200_quality: lm-eval does not import (a dependency the image lacks: stage it, see above)" >&2; exit 3; }
  OUTNAME=${OUTNAME:-h200-quality} SCEN=kvtui/data/scenarios/h200-smollm2-quality.toml
  # The model and the run as scripts/h200_smollm2.sh does them, on this scenario.
  mkdir -p $KVTUI_MODELS_DIR/gguf
  G=$KVTUI_MODELS_DIR/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
  [ -f "$G" ] || { cat $(ls /tmp/stage/gguf.part* | sort) > "$G.part" && mv "$G.part" "$G"; }
  python3 -c 'import gguf' 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile \
    --target /tmp/site .gpu*/deps/gguf-*.whl .gpu*/deps/platformdirs-*.whl 2>/dev/null | grep -v "Target directory" || true
  t0=$(date +%s); python3 -m kvtui model build smollm2-135m-instruct || exit 3
  echo "model build: $(( $(date +%s) - t0 )) s"
  modes=(); for m in "$@"; do modes+=(--mode "$m"); done
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  t0=$(date +%s)
  # SIGTERM before the device call's 10-minute limit: kvtui finalises the snapshot with what it measured.
  timeout -s TERM "${RUN_LIMIT_S:-540}" python3 -m kvtui run "$SCEN" --headless "${modes[@]}" --out "$OUT/$OUTNAME.json" 2>&1 \
    | tee "$OUT/$OUTNAME.run.log" | grep -v "^  |"
  rc=${PIPESTATUS[0]}
  echo "run: $(( $(date +%s) - t0 )) s"
  gzip -9 -f "$OUT/$OUTNAME.records.jsonl" 2>/dev/null
  python3 -m kvtui export "$OUT/$OUTNAME.json" --format md --out "$OUT/$OUTNAME.md" >/dev/null 2>&1
  exit $rc ;;
*)
  echo "usage: bash scripts/h200_quality.sh stage | stage-device .gpuEk | run MODE..." >&2; exit 2 ;;
esac
