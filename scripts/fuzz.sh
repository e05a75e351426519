#!/usr/bin/env bash
# Fuzzes the trace reader (`cprof report`), the rank merger (`cprof merge`) and the writer's
# string escaping with libFuzzer + ASan + UBSan, each harness for SECONDS (default 60).
# Harnesses: tests/fuzz/fuzz_*.c, compiled with the csrc/ files they need (no Python).
# Seeds: tests/fuzz/corpus_trace (+ trace.dict), tests/fuzz/corpus_escape; inputs that once
# crashed, tests/fuzz/regressions/<harness>/, are replayed first. Needs clang with libFuzzer
# (Debian: apt-get install clang; scripts/setup.sh does it when CI or CPROF_FUZZ=1 is set).
# Work files in build/fuzz/ (the growing corpus is kept there between runs); a crash leaves
# build/fuzz/artifacts/<harness>-crash-* and fails the script: copy the input into
# tests/fuzz/regressions/<harness>/ and add it to tests/test_fuzz_regressions.py.
# Usage: bash scripts/fuzz.sh [SECONDS [HARNESS...]]   (HARNESS: trace_report json_escape trace_merge)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(trace_report json_escape trace_merge)
CLANG=${CLANG:-clang}
if ! command -v "$CLANG" >/dev/null; then
  echo "fuzz: no $CLANG; install it (apt-get install clang, or CPROF_FUZZ=1 bash scripts/setup.sh)" >&2
  exit 2
fi
work=build/fuzz
mkdir -p "$work/artifacts"

# the csrc files each harness needs (trace_merge brings its own in-memory sink)
reader="csrc/trace_read.c csrc/trace_dedup.c csrc/trace_implicit.c csrc/json_scan.c csrc/trace_analyse.c csrc/trace_gaps.c csrc/trace_memory.c csrc/jsonw.c"
declare -A srcs=(
  [trace_report]="$reader"
  [trace_merge]="$reader csrc/trace_merge.c"
  [json_escape]="csrc/jsonw.c"
)
declare -A seeds=([trace_report]=corpus_trace [trace_merge]=corpus_trace [json_escape]=corpus_escape)
flags=(-g -O1 -std=c11 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -Icsrc)

for h in "${harnesses[@]}"; do
  [ -n "${srcs[$h]:-}" ] || { echo "fuzz: unknown harness $h" >&2; exit 2; }
  t0=$(date +%s)
  # shellcheck disable=SC2086  # the source lists split on spaces
  "$CLANG" "${flags[@]}" "tests/fuzz/fuzz_$h.c" ${srcs[$h]} -lz -lcjson -lm -o "$work/fuzz_$h"
  echo "fuzz: built fuzz_$h in $(( $(date +%s) - t0 )) s"
done

export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
rc=0
for h in "${harnesses[@]}"; do
  exe="$work/fuzz_$h"
  # 1. every saved crash input must now pass (a plain run over the files, no fuzzing)
  reg=tests/fuzz/regressions/$h
  if [ -d "$reg" ] && [ -n "$(ls -A "$reg")" ]; then
    if "$exe" -runs=0 "$reg"/* > "$work/$h.regressions.log" 2>&1; then
      echo "fuzz: $h: $(ls "$reg" | wc -l) regression inputs pass"
    else
      tail -40 "$work/$h.regressions.log" >&2
      echo "fuzz: $h: a regression input fails again (log: $work/$h.regressions.log)" >&2
      rc=1
      continue
    fi
  fi
  # 2. fuzz for $secs seconds from the seeds plus what earlier runs found
  corpus="$work/corpus_$h"
  mkdir -p "$corpus"
  dict=()
  [ "${seeds[$h]}" = corpus_trace ] && dict=(-dict=tests/fuzz/trace.dict)
  # -max_len: the seeds are up to 7 KB; -timeout: one input taking 10 s is a hang;
  # -rss_limit_mb: the reader preallocates 8 MB of events per trace, ASan adds its shadow
  set +e
  "$exe" "$corpus" "tests/fuzz/${seeds[$h]}" "${dict[@]}" -max_total_time="$secs" \
    -max_len=16384 -timeout=10 -rss_limit_mb=3072 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$h-" > "$work/$h.log" 2>&1
  r=$?
  set -e
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$h.log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$work/$h.log" | tail -1 || true)
  ft=$(grep -o 'ft: [0-9]*' "$work/$h.log" | tail -1 || true)
  echo "fuzz: $h: ${secs} s, ${runs:-?} executions, ${cov:-cov: ?}, ${ft:-ft: ?}, corpus $(ls "$corpus" | wc -l) files, exit $r"
  if [ $r != 0 ]; then
    grep -A40 -m1 -E 'ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error|fuzz_[a-z_]*: ' \
      "$work/$h.log" >&2 || tail -40 "$work/$h.log" >&2
    ls "$work/artifacts/$h-"* >&2 2>/dev/null || true
    echo "fuzz: $h found a problem (log: $work/$h.log)" >&2
    rc=1
  fi
done
exit $rc
