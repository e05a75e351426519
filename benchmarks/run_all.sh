#!/usr/bin/env bash
# Runs every cprof benchmark and prints its table.
#   benchmarks/run_all.sh [RESULTS_DIR]
# With RESULTS_DIR, each benchmark also writes its results there as JSON
# (bench_ranges.json, bench_write.json, ...). Builds the C extension in place if it is missing.
# bench_end_to_end's big window needs ~3 GB of memory for torch.profiler's process.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}

if ! "$PY" -c "import cprof._C" 2>/dev/null; then
    echo "building the cprof extension (setup.py build_ext --inplace)"
    "$PY" setup.py build_ext --inplace -q
fi

json_args() {  # --json RESULTS_DIR/NAME.json when a results dir was given
    if [ -n "${RESULTS_DIR:-}" ]; then echo "--json" "$RESULTS_DIR/$1.json"; fi
}
RESULTS_DIR=${1:-}
if [ -n "$RESULTS_DIR" ]; then mkdir -p "$RESULTS_DIR"; fi

# torch's profiler logs "USDT: ... profiler_start/stop" to stderr for every session: drop those
echo "== bench_ranges: ns per range, cprof vs torch.profiler =="
"$PY" benchmarks/bench_ranges.py $(json_args bench_ranges) 2> >(grep -v '^USDT:' >&2)
echo
echo "== bench_write: trace writing, cprof vs torch.profiler =="
"$PY" benchmarks/bench_write.py $(json_args bench_write) 2> >(grep -v '^USDT:' >&2)
echo
echo "== bench_module_events: what TensorBoard's module events cost a trace =="
"$PY" benchmarks/bench_module_events.py $(json_args bench_module_events) 2> >(grep -v '^USDT:' >&2)
echo
echo "== bench_toggle: a stretch with CPU collection toggled off, cprof vs torch.profiler =="
"$PY" benchmarks/bench_toggle.py $(json_args bench_toggle) 2> >(grep -v '^USDT:\|^\[W' >&2)
echo
echo "== bench_compiled_regions: torch.compile regions, cprof vs torch.profiler =="
"$PY" benchmarks/bench_compiled_regions.py $(json_args bench_compiled_regions) 2> >(grep -v '^USDT:' >&2)
echo
echo "== bench_ops: ns per torch operator recorded, cprof vs torch.profiler =="
"$PY" benchmarks/bench_ops.py $(json_args bench_ops) 2> >(grep -v '^USDT:' >&2)
echo
echo "== bench_end_to_end: enter/exit/export, key_averages, import: cprof vs torch.profiler =="
"$PY" benchmarks/bench_end_to_end.py $(json_args bench_end_to_end) 2> >(grep -v '^USDT:\|^\[W' >&2)
echo
echo "== bench_memory: CPU time per sample of profile_memory's memory track =="
"$PY" benchmarks/bench_memory.py $(json_args bench_memory) 2> >(grep -v '^USDT:' >&2)

echo "== bench_holder_self: with_stack's self time in the frame holding the with =="
"$PY" benchmarks/bench_holder_self.py $(json_args bench_holder_self) 2> >(grep -v '^USDT:' >&2)
