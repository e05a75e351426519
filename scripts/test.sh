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
# pytest exits 5 when it collected nothing: that is a failure of the suite, not a pass
exit $rc
