#!/usr/bin/env bash
# Redraws the README's picture: the answer screen of the published KV-bound H200 run (the run whose
# table the README shows), through kvtui's own SVG export, at a size a README renders legibly.
# Usage: bash scripts/readme_images.sh   (from anywhere; PYTHON=… to pick the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
"$PY" -m kvtui export docs/results/h200-kvb.json --format svg --view answer --width 110 --height 36 \
  --out docs/img/answer.svg --force
