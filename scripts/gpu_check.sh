#!/usr/bin/env bash
# The one command for a machine with an NVIDIA GPU: builds cprof in place, runs the GPU tests
# (real CUPTI vs torch.profiler, the fake-CUPTI ones, torch.compile regions on the machine's
# Python, bucket timers, operators), then the rest of the suite, and the GPU overhead, options,
# bucket-timer and compiled-region benchmarks.
#   bash scripts/gpu_check.sh
# Logs and results go to $OUT (default ./gpu_check_out): build.log, gpu_tests.log,
# rest_tests.log, bench_*.log / bench_*.json, perf_step.log, nvidia_smi.txt. Needs no network.
# Exit status: 0 when every step passed (a benchmark that fails or measures nothing counts).
# GPU_CHECK_REST=0 skips the rest of the suite; GPU_CHECK_BENCHES="timers cupti_modes" (names:
# clock gpu_overhead options timers compiled_regions cupti_modes residual perf) picks the
# benchmarks; GPU_CHECK_TESTS overrides the GPU test files ("none": no tests);
# GPU_CHECK_ROUNDS (15) the rounds of gpu_overhead and options; CUPTI_MODES / CUPTI_REPEAT (2)
# the modes and processes of cupti_modes; RESIDUAL_PASSES (6) the passes of residual;
# PERF_PROFILER=pyspy makes "perf" sample with py-spy even where perf is installed,
# PERF_DEVICE=cpu runs its step on the CPU (to try it without a GPU).
#
# One device call runs 10 minutes at most; everything takes ~20 (H200, estimates from the
# 2026-11-23 runs: build ~1 min, GPU tests ~4-5, rest of the suite ~4, residual ~3,
# cupti_modes ~4.5 (15 modes x 2 processes), gpu_overhead ~1.5, options ~2, perf ~1.5).
# GPU_CHECK_PART=N runs the N-th share of what the same command would run, each share under
# ~8 minutes; run the parts in order, one call each (each part builds again: a no-op on a
# warm machine, ~1 min on a fresh one):
#   1  the GPU test files
#   2  benchmarks cupti_modes, gpu_overhead, clock
#   3  benchmarks residual, options, perf, timers, compiled_regions
#   4  the rest of the suite (GPU_CHECK_REST)
# Each section prints the seconds it took ("[N s]") and the summary lists them, so the next
# session can re-split from measured times. GPU_CHECK_QUICK=1 runs every benchmark with its
# smallest settings (a dry run of flags, files and outputs, e.g. with PERF_DEVICE=cpu, or with
# tests/fake_cuda_torch + tests/fake_cupti as tests/test_gpu_check_script.py does): its
# figures mean nothing.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"

# GPU_CHECK_PART: which share of the tests and benchmarks this call runs (see the header)
part=${GPU_CHECK_PART:-}
case $part in
  ""|1|2|3|4) ;;
  *) echo "gpu_check: GPU_CHECK_PART=$part: give 1, 2, 3 or 4 (or leave it unset for everything)"
     exit 2 ;;
esac
bench_part() {  # the part a benchmark runs in
  case $1 in
    cupti_modes|gpu_overhead|clock) echo 2 ;;
    *) echo 3 ;;
  esac
}
quick=${GPU_CHECK_QUICK:-0}
section_t0=$SECONDS
timings=()
took() {  # "[N s]" for the section that began at section_t0, and a line for the summary
  local dt=$((SECONDS - section_t0))
  echo "[$1: ${dt} s]"
  timings+=("$1 ${dt}s")
  section_t0=$SECONDS
}

status_build="not run" status_tests="not run" status_rest="not run"
bench_status=()
rest_line=""
tests_line="" failed=0

echo "== environment =="
echo "repo: $PWD   out: $OUT   python: $($PY -c 'import sys; print(sys.version.split()[0])' 2>&1)"
$PY -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, \
'available', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" 2>&1
$PY -c "import triton; print('triton', triton.__version__)" 2>/dev/null || echo "triton: not importable (the torch.compile test will skip)"
$PY -c "import pytest; print('pytest', pytest.__version__)" 2>/dev/null || echo "pytest: NOT importable (tests cannot run)"
command -v gcc >/dev/null && echo "gcc: $(gcc -dumpfullversion 2>/dev/null)" || echo "gcc: not found"
command -v g++ >/dev/null && echo "g++: $(g++ -dumpfullversion 2>/dev/null)" \
  || echo "g++: not found (cprof._torch_ops, operator shapes, will not build)"

echo
echo "== build: $PY setup.py build_ext --inplace =="
# carried Debian packages (scripts/fetch_build_deps.sh, run where apt works; carry .deps/)
if ls .deps/*.deb >/dev/null 2>&1; then
  for f in .deps/*.deb; do dpkg -x "$f" /tmp/cprof-deps; done
  export CPROF_DEPS_PREFIX=/tmp/cprof-deps
  # zlib1g-dev's libz.so links to libz.so.1, which is in zlib1g (not carried): left dangling,
  # the linker takes the non-PIC libz.a instead. Point it at the machine's own libz.so.1.
  dl=/tmp/cprof-deps/usr/lib/x86_64-linux-gnu
  if [ ! -e "$dl/libz.so" ]; then
    sysz=$(ldconfig -p 2>/dev/null | awk '/libz\.so\.1 .*x86-64/ {print $NF; exit}')
    [ -n "$sysz" ] && ln -sf "$sysz" "$dl/libz.so" && rm -f "$dl/libz.a"
  fi
  echo "gpu_check: building against the packages in .deps/ (unpacked in /tmp/cprof-deps)"
fi
deps=${CPROF_DEPS_PREFIX:-}
missing=()
[ -f /usr/include/zlib.h ] || [ -f "$deps/usr/include/zlib.h" ] || missing+=("zlib.h (zlib1g-dev)")
[ -f /usr/include/cjson/cJSON.h ] || [ -f "$deps/usr/include/cjson/cJSON.h" ] \
  || missing+=("cjson/cJSON.h (libcjson-dev)")
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu_check: headers the C extension needs are missing: ${missing[*]}."
  echo "gpu_check: run scripts/fetch_build_deps.sh where apt works and carry .deps/, or install"
  echo "gpu_check: them (apt-get install zlib1g-dev libcjson-dev; needs network), or"
  echo "gpu_check: bring a cprof/_C*.so built for this Python (and libcjson.so.1 at run time)."
fi
if $PY setup.py build_ext --inplace >"$OUT/build.log" 2>&1; then
  status_build="ok"
elif $PY -c "import cprof._C" 2>/dev/null; then
  status_build="build FAILED; using the cprof/_C*.so already here"
  tail -n 20 "$OUT/build.log"
else
  status_build="FAILED (see build.log)"
  tail -n 30 "$OUT/build.log"
  failed=1
fi
# the RecordFunction observer (operator shapes; optional, built against this torch)
if $PY -c "import torch, cprof._C, cprof._torch_ops as t
assert t.TORCH_VERSION == torch.__version__, t.TORCH_VERSION" >>"$OUT/build.log" 2>&1; then
  status_build="$status_build; cprof._torch_ops built"
else
  status_build="$status_build; cprof._torch_ops NOT available (no operator shapes; see build.log)"
fi
echo "build: $status_build"
if ! $PY -c "import cprof._C" >>"$OUT/build.log" 2>&1; then
  echo "gpu_check: cprof._C cannot be imported:"; tail -n 5 "$OUT/build.log"
  status_build="FAILED: cprof._C not importable"
  failed=1
else
  $PY -c "import json, cprof; print(json.dumps(cprof.features()['gpu_activity'], indent=1))"
fi

echo
echo "== nvidia-smi =="
if command -v nvidia-smi >/dev/null; then
  nvidia-smi 2>&1 | tee "$OUT/nvidia_smi.txt"
else
  echo "nvidia-smi: not found" | tee "$OUT/nvidia_smi.txt"
fi

if [ "$failed" = 0 ]; then
  took "build"
  echo
  # The GPU files first (test_gpu_fake.py carries no gpu mark: it runs on CI too), then the rest
  # of the suite, which must also pass where a GPU is visible. A per-test limit where
  # pytest-timeout is there, so one hang cannot eat the whole call.
  gpu_files=${GPU_CHECK_TESTS:-"tests/test_gpu_real.py tests/test_gpu_profile.py tests/test_gpu_timers.py tests/test_gpu_fake.py tests/test_compiled_regions.py tests/test_ops.py tests/test_op_shapes.py tests/test_async_ranges.py"}
  run_rest=${GPU_CHECK_REST:-1}
  if [ -n "$part" ] && [ "$part" != 1 ] && [ "$gpu_files" != none ]; then
    status_tests="not in part $part (GPU_CHECK_PART=1 runs them)"
  fi
  if [ -n "$part" ] && [ "$part" != 4 ] && [ "$run_rest" = 1 ]; then
    run_rest=0 status_rest="not in part $part (GPU_CHECK_PART=4 runs it)"
  fi
  tlimit=""
  $PY -c "import pytest_timeout" 2>/dev/null && tlimit="--timeout=180"
  for f in $gpu_files; do
    [ "$f" = none ] || [ -e "$f" ] || echo "gpu_check: GPU_CHECK_TESTS names $f, which is not here"
  done
  if [ -n "$part" ] && [ "$part" != 1 ]; then
    :
  elif [ "$gpu_files" = none ]; then
    echo "== tests: skipped (GPU_CHECK_TESTS=none) =="
    status_tests="skipped (GPU_CHECK_TESTS=none)"
  else
    echo "== tests: $PY -m pytest -q -rA $tlimit $gpu_files =="
    # shellcheck disable=SC2086  # $tlimit and $gpu_files are lists
    $PY -m pytest -q -rA $tlimit $gpu_files 2>&1 | tee "$OUT/gpu_tests.log"
    rc=${PIPESTATUS[0]}
    tests_line=$(tail -n 1 "$OUT/gpu_tests.log" | sed 's/=//g; s/^ *//; s/ *$//')
    if [ "$rc" = 0 ]; then status_tests="ok"; else status_tests="FAILED (exit $rc)"; failed=1; fi
    if ! grep -q "PASSED tests/test_gpu_" "$OUT/gpu_tests.log"; then
      status_tests="$status_tests; the real-GPU tests all SKIPPED"
      failed=1
    fi
    took "GPU tests"
  fi
  if [ "$run_rest" = 1 ]; then
    ignores=""
    for f in $gpu_files; do [ "$f" = none ] || ignores="$ignores --ignore=$f"; done
    echo
    echo "== tests: $PY -m pytest -q -rfE $tlimit tests/ (the rest of the suite) =="
    # shellcheck disable=SC2086
    $PY -m pytest -q -rfE $tlimit tests/ $ignores 2>&1 | tee "$OUT/rest_tests.log" | tail -n 40
    rc=${PIPESTATUS[0]}
    rest_line=$(tail -n 1 "$OUT/rest_tests.log" | sed 's/=//g; s/^ *//; s/ *$//')
    if [ "$rc" = 0 ]; then status_rest="ok"; else status_rest="FAILED (exit $rc)"; failed=1; fi
    took "rest of the suite"
  fi

  rounds=${GPU_CHECK_ROUNDS:-15} repeat=${CUPTI_REPEAT:-2} passes=${RESIDUAL_PASSES:-}
  m_rounds=21 m_steps=30 perf_s=4 plain_s=3 q=()
  if [ "$quick" = 1 ]; then  # the smallest settings: a dry run, figures meaningless
    rounds=${GPU_CHECK_ROUNDS:-2} repeat=${CUPTI_REPEAT:-1} passes=${RESIDUAL_PASSES:-1}
    m_rounds=2 m_steps=3 perf_s=0.3 plain_s=0.3
  fi
  bench_status=()
  # run_bench NAME JSON LOG CMD...: runs CMD, its output (less torch's "USDT:" lines) on the
  # terminal and in LOG; the status says ok, FAILED (exit N) or nothing measured (no JSON)
  run_bench() {
    local name=$1 json=$2 log=$3 rc st
    shift 3
    "$@" 2>&1 | { grep -v -E '^(USDT:|py-spy>)' || true; } | tee -a "$log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" != 0 ]; then st="FAILED (exit $rc)"; failed=1
    elif [ -n "$json" ] && [ ! -s "$json" ]; then st="nothing measured (see $(basename "$log"))"; failed=1
    else st="ok"; fi
    bench_status+=("$name: $st")
    [ "$st" = ok ]
  }
  # GPU_CHECK_BENCHES picks the benchmarks (default: all below but cupti_modes, the CUPTI
  # mode A/B of issue 3, residual and perf, which run only when named)
  for b in ${GPU_CHECK_BENCHES:-clock gpu_overhead options timers compiled_regions}; do
    if [ -n "$part" ] && [ "$(bench_part "$b")" != "$part" ]; then
      continue
    fi
    echo
    case $b in
      gpu_overhead)
        # torch's profiler prints "USDT: ..." to stderr for every session: dropped
        [ "$quick" = 1 ] && q=(--workloads launch --steps 3 --warmup 1)
        echo "== benchmark: $PY benchmarks/bench_gpu_overhead.py --rounds $rounds ${q[*]} --json $OUT/bench_gpu.json =="
        run_bench gpu_overhead "$OUT/bench_gpu.json" "$OUT/bench_gpu.log" \
          $PY benchmarks/bench_gpu_overhead.py --rounds "$rounds" "${q[@]}" --json "$OUT/bench_gpu.json" ;;
      options)
        [ "$quick" = 1 ] && q=(--steps 3)
        echo "== benchmark: $PY benchmarks/bench_options.py --device cuda --rounds $rounds ${q[*]} --json $OUT/bench_options.json =="
        run_bench options "$OUT/bench_options.json" "$OUT/bench_options.log" \
          $PY benchmarks/bench_options.py --device cuda --rounds "$rounds" "${q[@]}" --json "$OUT/bench_options.json" ;;
      timers)
        [ "$quick" = 1 ] && q=(--rounds 1 --n 100)
        echo "== benchmark: $PY benchmarks/bench_timers.py ${q[*]} --json $OUT/bench_timers.json =="
        run_bench timers "$OUT/bench_timers.json" "$OUT/bench_timers.log" \
          $PY benchmarks/bench_timers.py "${q[@]}" --json "$OUT/bench_timers.json" ;;
      compiled_regions)
        [ "$quick" = 1 ] && q=(--rounds 1 --n 10)
        echo "== benchmark: $PY benchmarks/bench_compiled_regions.py ${q[*]} --json $OUT/bench_compiled_regions.json =="
        run_bench compiled_regions "$OUT/bench_compiled_regions.json" "$OUT/bench_compiled_regions.log" \
          $PY benchmarks/bench_compiled_regions.py "${q[@]}" --json "$OUT/bench_compiled_regions.json" ;;
      clock)
        echo "== benchmark: benchmarks/bench_clock.c (cprof's clock read vs rdtsc on this machine) =="
        cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null \
          | sed 's/^/clocksource: /' | tee "$OUT/bench_clock.log"
        run_bench clock "" "$OUT/bench_clock.log" bash -c 'gcc -O2 -Icsrc benchmarks/bench_clock.c csrc/clock.c -lpthread -o "$1" && "$1"' _ "$OUT/bench_clock"
        rm -f "$OUT/bench_clock" ;;
      cupti_modes)
        echo "== benchmark: $PY benchmarks/bench_cupti_modes.py --repeat $repeat --rounds $m_rounds --steps $m_steps ${CUPTI_MODES:+--modes $CUPTI_MODES} --json $OUT/bench_cupti_modes.json =="
        run_bench cupti_modes "$OUT/bench_cupti_modes.json" "$OUT/bench_cupti_modes.log" \
          $PY benchmarks/bench_cupti_modes.py --repeat "$repeat" --rounds "$m_rounds" --steps "$m_steps" \
          ${CUPTI_MODES:+--modes "$CUPTI_MODES"} --json "$OUT/bench_cupti_modes.json" ;;
      residual)
        [ "$quick" = 1 ] && q=(--blocks 2 --steps 3)
        echo "== benchmark: $PY benchmarks/bench_cupti_residual.py ${passes:+--passes $passes} ${q[*]} --json $OUT/bench_cupti_residual.json =="
        run_bench residual "$OUT/bench_cupti_residual.json" "$OUT/bench_cupti_residual.log" \
          $PY benchmarks/bench_cupti_residual.py ${passes:+--passes "$passes"} "${q[@]}" \
          --json "$OUT/bench_cupti_residual.json" ;;
      perf)
        # where each configuration's per-step cost goes (benchmarks/perf_step.py): steps/s of
        # each, and a perf profile of none and defaults where perf is installed
        # perf, or else py-spy (its wheel carried in .deps/ by scripts/fetch_build_deps.sh)
        pyspy=""
        if ! command -v perf >/dev/null || [ "${PERF_PROFILER:-}" = pyspy ]; then
          w=$(ls .deps/py_spy-*.whl 2>/dev/null | head -n 1)
          if [ -n "$w" ]; then
            mkdir -p /tmp/cprof-pyspy
            $PY -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); n = [m for m in z.namelist() if m.endswith('/scripts/py-spy')][0]; open('/tmp/cprof-pyspy/py-spy', 'wb').write(z.read(n))" "$w" \
              && chmod +x /tmp/cprof-pyspy/py-spy && /tmp/cprof-pyspy/py-spy --version >/dev/null 2>&1 \
              && pyspy=/tmp/cprof-pyspy/py-spy
          else
            echo "gpu_check: no perf and no .deps/py_spy-*.whl (scripts/fetch_build_deps.sh): timing only"
          fi
        fi
        dev=${PERF_DEVICE:-cuda}
        echo "== benchmark: $PY benchmarks/perf_step.py per configuration (perf: $(command -v perf || echo none); py-spy: ${pyspy:-none}) =="
        perf_failed=()
        for c in none gpu defaults stack stack_noc shapes modules; do
          if [ -n "$pyspy" ] && [ $c != modules ]; then
            # native + Python stacks, 499 Hz; the summary counts samples inside the step only
            run_bench "perf $c" "" "$OUT/perf_step.log" $pyspy record --native -r 499 -f raw \
              -o "$OUT/pyspy_$c.raw" -- $PY benchmarks/perf_step.py --config $c --seconds "$perf_s" \
              --device "$dev" || perf_failed+=("$c")
            if [ -s "$OUT/pyspy_$c.raw" ]; then
              $PY benchmarks/pyspy_summary.py "$OUT/pyspy_$c.raw" --top 40 > "$OUT/pyspy_$c.txt" 2>&1
              gzip -f "$OUT/pyspy_$c.raw"
            fi
          elif command -v perf >/dev/null && { [ $c = none ] || [ $c = defaults ]; }; then
            run_bench "perf $c" "" "$OUT/perf_step.log" perf record -q -g -F 1999 \
              -o "$OUT/perf_$c.data" $PY benchmarks/perf_step.py --config $c --seconds "$perf_s" \
              --device "$dev" || perf_failed+=("$c")
            perf report -i "$OUT/perf_$c.data" --no-children --sort dso,symbol -g none \
              2>/dev/null | grep -v '^#' | grep '%' | sed 's/   */  /g' | head -n 80 > "$OUT/perf_$c.txt"
            rm -f "$OUT/perf_$c.data"
          else
            run_bench "perf $c" "" "$OUT/perf_step.log" $PY benchmarks/perf_step.py --config $c \
              --seconds "$plain_s" --device "$dev" || perf_failed+=("$c")
          fi
        done
        # one line in the summary for the seven runs
        n=${#bench_status[@]}
        bench_status=("${bench_status[@]:0:n-7}")
        if [ ${#perf_failed[@]} = 0 ]; then bench_status+=("perf: ok (py-spy: ${pyspy:-none})")
        else bench_status+=("perf: FAILED for ${perf_failed[*]} (see perf_step.log)"); fi ;;
      *) echo "gpu_check: unknown benchmark '$b' in GPU_CHECK_BENCHES"
         bench_status+=("$b: unknown benchmark"); failed=1 ;;
    esac
    q=()
    took "benchmark $b"
  done
fi

echo
echo "== summary =="
printf '%-10s %s\n' "build" "$status_build"
printf '%-10s %s\n' "tests" "$status_tests${tests_line:+ -- $tests_line}"
if [ -f "$OUT/gpu_tests.log" ]; then
  grep -E '^(FAILED|ERROR|XFAIL|SKIPPED)' "$OUT/gpu_tests.log" | sed 's/^/           /' | head -n 30
fi
printf '%-10s %s\n' "rest" "$status_rest${rest_line:+ -- $rest_line}"
if [ -f "$OUT/rest_tests.log" ]; then
  grep -E '^(FAILED|ERROR)' "$OUT/rest_tests.log" | sed 's/^/           /' | head -n 20
fi
if [ ${#bench_status[@]} = 0 ]; then printf '%-10s %s\n' "benchmark" "none run${part:+ in part $part}"; fi
for s in "${bench_status[@]}"; do printf '%-10s %s\n' "benchmark" "$s"; done
if [ -f "$OUT/bench_gpu.json" ]; then
  $PY - "$OUT/bench_gpu.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
m = d["machine"]
print(f"           {m['device']}, torch {m['torch']} (CUDA {m['torch_cuda']}), "
      f"driver {m.get('nvidia_smi') or m['cuda_driver_api']}")
cfgs = ["none", "cprof_gpu", "cprof_default", "torch"]
print("           " + f"{'workload':<10}" + "".join(f"{c:>22}" for c in cfgs))
for name, w in d["workloads"].items():
    cells = []
    for c in cfgs:
        v = w["configs"][c]
        cell = f"{v['ms_per_step_median']:.3f} ms"
        if c != "none":
            cell += f" {v['ratio_vs_none']:.2f}x"
        cells.append(f"{cell:>22}")
    print("           " + f"{name:<10}" + "".join(cells))
for f in d.get("findings", []):
    print(f"           finding: {f}")
EOF
fi
printf '%-10s %s\n' "seconds" "${timings[*]:-} (whole run: ${SECONDS} s${part:+, part $part})"
echo "logs: $OUT"
exit $failed
