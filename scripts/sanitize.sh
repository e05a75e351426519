#!/usr/bin/env bash
# The whole test suite against an ASan + UBSan build of cprof._C (CPROF_SANITIZE=1).
# The working tree (tracked + untracked, not ignored files) is copied to a scratch directory
# and built there, so the normal in-place build is never clobbered; tests run from the copy
# (conftest.py and the subprocess tests import cprof from their own ROOT). Needs what
# scripts/setup.sh --test installs. Usage: bash scripts/sanitize.sh [pytest args...]
# Environment: CPROF_SANITIZE_DIR (scratch copy; default ${TMPDIR:-/tmp}/sanitized-tree: a
# name without "cprof" in it, as tests check that "cprof" is absent from user tracebacks).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
dest=${CPROF_SANITIZE_DIR:-${TMPDIR:-/tmp}/sanitized-tree}
t0=$(date +%s)

# --- copy the tree (git's view of it: no build outputs, no stale .so) ---
rm -rf "$dest"
mkdir -p "$dest"
git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do
  [ -e "$f" ] && printf '%s\0' "$f"
done | tar --null -T - -cf - | tar -xf - -C "$dest"
# test_fresh_clone.py clones the checkout: give the copy the repository too (it skips without)
[ -d .git ] && cp -a .git "$dest/.git"

# --- runtimes: the python binary is not instrumented, so libasan is preloaded (ASan must be
# the first library in the process); libubsan comes in as a dependency of the extension ---
libasan=$(gcc -print-file-name=libasan.so)
[ -e "$libasan" ] || { echo "sanitize: gcc has no libasan.so ($libasan)" >&2; exit 2; }

# every C compile the tests do (tests/fake_cupti/build.sh, the ABI and layout checks, the
# fresh-clone build) goes through $CC: instrument those too
mkdir -p "$dest/.sanbin"
cat > "$dest/.sanbin/cc-san" <<'EOF'
#!/bin/sh
exec gcc -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer "$@"
EOF
chmod +x "$dest/.sanbin/cc-san"
export CC="$dest/.sanbin/cc-san"
# ... but not the browser test_html.py starts: Chromium under a preloaded libasan hangs (its
# own allocator and sandbox); the page it renders comes from the instrumented `cprof report`
for b in chromium chromium-browser google-chrome google-chrome-stable; do
  real=$(command -v "$b" 2>/dev/null) || continue
  printf '#!/bin/sh\nunset LD_PRELOAD\nexec %q "$@"\n' "$real" > "$dest/.sanbin/$b"
  chmod +x "$dest/.sanbin/$b"
done
export PATH="$dest/.sanbin:$PATH"

# --- build ---
(cd "$dest" && CPROF_SANITIZE=1 CPROF_WERROR=1 $PY setup.py -q build_ext --inplace) \
  > "$dest/.build.log" 2>&1 || { cat "$dest/.build.log" >&2; echo "sanitize: build failed" >&2; exit 1; }
bash "$dest/tests/fake_cupti/build.sh"
so=$(ls "$dest"/cprof/_C*.so)
ldd "$so" | grep libasan >/dev/null || { echo "sanitize: $so is not instrumented" >&2; exit 1; }
t1=$(date +%s)

# --- options ---
# detect_leaks=0: CPython and torch keep interned objects, caches and module state alive until
# exit by design; LeakSanitizer would report thousands of those at every interpreter exit.
# cprof's own leaks are hunted where no interpreter runs: scripts/fuzz.sh's harnesses run
# LeakSanitizer over the trace reader, merger and escaping.
# halt_on_error / -fno-sanitize-recover: the first finding stops the process, so a test fails.
# protect_shadow_gap is left on: torch 2.13 CPU runs with it (checked; it is needed only by
# CUDA's driver, which maps memory in the shadow gap).
# libstdc++ right after libasan: ASan's __cxa_throw interceptor resolves the real one when it
# starts, and a preloaded libasan starts before any C++ library is loaded, so without it the
# first C++ exception torch throws (a failing op inside a window, torch.profiler's setup)
# aborts the process with "CHECK failed ... real___cxa_throw".
libstdcxx=$(gcc -print-file-name=libstdc++.so.6)
export LD_PRELOAD="$libasan $libstdcxx${LD_PRELOAD:+ $LD_PRELOAD}"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=86${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=87${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
# ASan keeps freed memory in quarantine (256 MB) before reusing it, and hands freed pages back
# to the system only on a timer: tests that measure resident memory (flat over many windows,
# falling when the cap is lowered) fail under it. They run apart, with the quarantine off and
# pages released at once (overflows and UB are still caught; use-after-free much less so).
# Keep this list in step with them.
rss_tests=(
  tests/test_reliability_process.py::test_thousand_windows_do_not_grow_memory_or_descriptors
  tests/test_reliability_resources.py::test_ten_million_ranges_stay_within_the_cap
  tests/test_reliability_resources.py::test_lowering_the_cap_returns_memory
  tests/test_reliability_resources.py::test_threads_recording_outside_windows_leave_nothing_behind
)

# --capture=sys: a sanitizer writes its report to fd 2 and exits; with pytest's default fd
# capture that report would vanish with the process. Python-level output is still captured.
echo "sanitize: built in $((t1 - t0)) s; running pytest in $dest (ASan + UBSan)"
deselect=()
for t in "${rss_tests[@]}"; do deselect+=(--deselect "$t"); done
set +e
(cd "$dest" && $PY -m pytest -q -ra -p no:cacheprovider --capture=sys "${deselect[@]}" "$@" tests)
rc=$?
present=() # those still there (a renamed test is skipped here; it then runs in the first pass)
for t in "${rss_tests[@]}"; do
  grep -q "^def ${t##*::}(" "$dest/${t%%::*}" 2>/dev/null && present+=("$t")
done
if [ $rc = 0 ] && [ $# = 0 ] && [ ${#present[@]} -gt 0 ]; then
  echo "sanitize: the resident-memory tests, ASan quarantine off"
  (cd "$dest" && ASAN_OPTIONS="$ASAN_OPTIONS:quarantine_size_mb=0:allocator_release_to_os_interval_ms=0" \
     $PY -m pytest -q -ra -p no:cacheprovider --capture=sys "${present[@]}")
  rc=$?
fi
set -e
t2=$(date +%s)
case $rc in
  86) echo "sanitize: AddressSanitizer stopped the test run (report above)" >&2 ;;
  87) echo "sanitize: UndefinedBehaviorSanitizer stopped the test run (report above)" >&2 ;;
esac
echo "sanitize: pytest exit $rc after $((t2 - t1)) s (total $((t2 - t0)) s)"
exit $rc
