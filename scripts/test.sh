#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs, builds, runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
PY=${PYTHON:-python3}
set +e
$PY -m pytest -q -ra "$@" tests
rc=$?
set -e
# On CI (CI set) or when asked, and only for the whole suite (no pytest arguments): the suite
# on Python 3.12+ when one is installed (scripts/test_py312.sh: sys.monitoring paths, no torch,
# ~3 min; CPROF_PY312_TESTS=1) and on 3.10, the oldest supported (~3 min; CPROF_PY310_TESTS=1),
# again under ASan + UBSan (scripts/sanitize.sh, 2-3.5 min on 2
# cores; CPROF_SANITIZE_TESTS=1), then each libFuzzer harness for 60 s (scripts/fuzz.sh,
# ~3.2 min; CPROF_FUZZ=1). Any one failing fails the run; the first failure's exit status is kept.
# extra_step FLAG_VAR SCRIPT [ARGS]: runs SCRIPT on CI or when $FLAG_VAR is 1; keeps the first
# failing exit status in rc.
extra_step() {
  local flag=$1 script=$2 t0 s
  shift 2
  [ -n "${CI:-}" ] || [ "${!flag:-}" = 1 ] || return 0
  t0=$(date +%s)
  bash "$script" "$@"
  s=$?
  echo "test: $script${*:+ $*} exit $s in $(( $(date +%s) - t0 )) s"
  [ $rc != 0 ] || rc=$s
}
if [ $# = 0 ]; then
  set +e
  extra_step CPROF_PY312_TESTS scripts/test_py312.sh
  extra_step CPROF_PY310_TESTS scripts/test_py312.sh 3.10
  extra_step CPROF_SANITIZE_TESTS scripts/sanitize.sh
  extra_step CPROF_FUZZ scripts/fuzz.sh "${CPROF_FUZZ_SECONDS:-60}"
  set -e
fi
# pytest exits 5 when it collected nothing: that is a failure of the suite, not a pass
exit $rc
