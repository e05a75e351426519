#!/usr/bin/env bash
# The main job: profiles the bundled example model and prints where the trace is and a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
PY=${PYTHON:-python3}
PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}" exec $PY examples/train_mlp.py "$@"
