#!/usr/bin/env bash
# The main job: profiles the bundled example model, prints where the trace is and a summary of
# the recorded ranges, then analyses the trace with `cprof report` (the answers: kernels,
# utilisation, idle gaps, GPU time per step and range, diagnoses) and writes an HTML report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
PY=${PYTHON:-python3}
export PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
$PY examples/train_mlp.py "$@" | tee "$log"
trace=$(sed -n 's/^trace: //p' "$log" | tail -n 1)
if [ -n "$trace" ] && [ -f "$trace" ]; then
    html="${trace%.trace.json*}.report.html"
    echo
    echo "== cprof report $trace"
    $PY -m cprof report "$trace" --step-range train_step --top 10 --html "$html"
fi
