#!/usr/bin/env bash
# Runs tests/reliability_res_scripts/threads_workload.py (threads that exit inside a window,
# threads inside a range at stop, short-lived threads, pushes racing window start/stop) under
# Valgrind: Helgrind for data races and lock misuse, then Memcheck for use-after-free of the
# per-thread buffers. CPython's own synchronisation (GIL atomics, condition variables signalled
# without their mutex) is suppressed (tests/reliability_res_scripts/helgrind-cpython.supp);
# every remaining report is counted, and the ones with a frame in cprof's C code are listed.
# Exit status 1 when a report has cprof's code on top of its stack (cprof itself accessed the
# memory). Not part of CI: ~30 s with the default 40 short-lived threads.
# Usage: bash scripts/reliability_helgrind.sh [SHORT_THREADS] [LOGDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v valgrind >/dev/null; then
  echo "reliability_helgrind: valgrind is not installed"
  exit 2
fi
PY=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')  # not a pyenv shim
SHORT=${1:-40}
LOGDIR=${2:-$(mktemp -d /tmp/cprof-helgrind.XXXXXX)}
mkdir -p "$LOGDIR"
OUT=$(mktemp -d /tmp/cprof-helgrind-traces.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
export PYTHONMALLOC=malloc  # let Valgrind see every allocation (no pymalloc arenas)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
WORK=tests/reliability_res_scripts/threads_workload.py
SUPP=tests/reliability_res_scripts/helgrind-cpython.supp

echo "reliability_helgrind: helgrind, $SHORT short-lived threads (log: $LOGDIR/helgrind.log)"
valgrind --tool=helgrind --error-limit=no --suppressions="$SUPP" \
  --log-file="$LOGDIR/helgrind.log" "$PY" "$WORK" "$OUT" "$SHORT"
echo "reliability_helgrind: memcheck (log: $LOGDIR/memcheck.log)"
valgrind --tool=memcheck --error-limit=no --log-file="$LOGDIR/memcheck.log" \
  "$PY" "$WORK" "$OUT" "$SHORT"

"$PY" - "$LOGDIR/helgrind.log" "$LOGDIR/memcheck.log" <<'EOF'
import re
import sys

CPROF = re.compile(r"\((?:events|module|sink|trace_writer|meta|names|jsonw|summary|clock|link|"
                   r"py_\w+)\.c:\d+\)|_C\.cpython")
START = re.compile(r"(Possible data race|Thread #\d+: |Lock at|Invalid (read|write|free)|"
                   r"Conditional jump|Use of uninitialised|Mismatched|Syscall param)")
status = 0
for path in sys.argv[1:]:
    reports, cur = [], None
    summary = ""
    for line in open(path):
        body = re.sub(r"^==\d+== ?", "", line.rstrip("\n"))
        if body.startswith("ERROR SUMMARY"):
            summary = body
        if START.match(body):
            cur = [body]
            reports.append(cur)
        elif not body.strip() or body.startswith("---"):
            cur = None
        elif cur is not None:
            cur.append(body)
    ours = [r for r in reports if any(CPROF.search(x) for x in r)]
    on_top = [r for r in ours
              if any(CPROF.search(x) for x in r[1:4] if x.lstrip().startswith("at "))]
    print(f"{path}: {summary}")
    print(f"  reports: {len(reports)}; with a cprof frame: {len(ours)}; "
          f"cprof's code on top: {len(on_top)}")
    for r in ours:
        frames = [x.strip() for x in r if CPROF.search(x)][:3]
        print(f"    {r[0][:70]} | {' <- '.join(frames)}")
    if on_top:
        status = 1
sys.exit(status)
EOF
