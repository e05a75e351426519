#!/usr/bin/env bash
# The clock source side by side (decision 69): alternating processes with CPROF_CLOCK=monotonic
# (the vDSO clock) and the default (the TSC where the kernel's clocksource is tsc), same build.
# Per source: bench_with_stack (ns per Python call; python and, if present, python3.12 via
# pyenv) and bench_ranges (net ns per range in a window); medians over N pairs of processes.
#   bash benchmarks/ab_clock.sh [N=8] > ab.txt
set -u
cd "$(dirname "$0")/.."
N=${1:-8}
RAW=$(mktemp)
for _ in $(seq "$N"); do for src in vdso tsc; do
  if [ $src = vdso ]; then export CPROF_CLOCK=monotonic; else unset CPROF_CLOCK; fi
  python benchmarks/bench_with_stack.py --rounds 5 2>&1 \
    | awk -v v="$src 3.11" '/cprof with_stack/ && !/overhead/ {print v, $0}'
  if PYENV_VERSION=3.12.1 python -c "" 2>/dev/null; then
    PYENV_VERSION=3.12.1 python benchmarks/bench_with_stack.py --rounds 5 2>&1 \
      | awk -v v="$src 3.12" '/cprof with_stack/ && !/overhead/ {print v, $0}'
  fi
  python benchmarks/bench_ranges.py --rounds 5 2>&1 \
    | awk -v v="$src 3.11" '/in window/ && /cprof/ {print v, "RANGES", $0}'
done; done > "$RAW"
cat "$RAW"
python - "$RAW" <<'P'
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) < 8:
        continue
    src, py = p[0], p[1]
    if p[2] == "RANGES" and "torch" not in line:
        key, val = " ".join(p[3:-5]), float(p[-1])    # net ns per range
    elif p[2] == "RANGES":
        continue
    else:
        key, val = " ".join(p[2:-5]), float(p[-2])    # ns per call
    d[(py, key, src)].append(val)
print("\nmedian over processes: ns per call (with_stack) / net ns per range")
for py, key in sorted({(a, b) for a, b, _ in d}):
    v, t = d.get((py, key, "vdso")), d.get((py, key, "tsc"))
    if v and t:
        mv, mt = statistics.median(v), statistics.median(t)
        print(f"{py} {key:45s} vdso {mv:6.1f}  tsc {mt:6.1f}  tsc/vdso {mt / mv:.2f}  n={len(v)}")
P
rm -f "$RAW"
