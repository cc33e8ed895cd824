#!/usr/bin/env bash
# The structure's guards (issue 17): ruff, mypy over all of kvtui/, the import contract, and the
# import-cycle script that reads every import (those inside functions too). Run from .ci/run;
# alone: PYTHON=.venv/bin/python bash .ci/lint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bin=$(dirname "$PY")
echo "lint: ruff"
"$PY" -m ruff check kvtui scripts tests
echo "lint: mypy (all of kvtui, 0 errors)"
"$PY" -m mypy
echo "lint: import contract (import-linter)"
"$bin/lint-imports"
echo "lint: import cycles (every import, ast)"
"$PY" scripts/import_cycles.py
