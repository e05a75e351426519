#!/usr/bin/env bash
# The suite once more on Python 3.12+, where with_stack runs on sys.monitoring and torch.compile
# regions on local monitoring events (the code paths the GPU machine's Python 3.12 takes; the
# main run covers 3.11's). No torch is installed for it: torch tests skip, everything else runs.
# Builds cprof/_C.cpython-312-*.so beside the 3.11 one. Exit 0 with a note when no Python 3.12+
# with headers is found (CPROF_PY312 names one).
#   bash scripts/test_py312.sh
set -uo pipefail
cd "$(dirname "$0")/.."
find_py() {
  local c
  for c in "${CPROF_PY312:-}" python3.13 python3.12 \
           "$HOME"/.pyenv/versions/3.12*/bin/python "$HOME"/.pyenv/versions/3.13*/bin/python; do
    [ -n "$c" ] || continue
    command -v "$c" >/dev/null 2>&1 || [ -x "$c" ] || continue
    # a pyenv shim answers for versions it cannot run: ask the interpreter itself
    "$c" -c 'import sys, sysconfig, os; sys.exit(0 if sys.version_info >= (3, 12) and
os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' \
      >/dev/null 2>&1 && { echo "$c"; return 0; }
  done
  return 1
}
PY=$(find_py) || { echo "test_py312: no Python 3.12+ with headers here: skipped"; exit 0; }
echo "test_py312: $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
"$PY" -m pytest --version >/dev/null 2>&1 || "$PY" -m pip install -q pytest || exit 1
# Python 3.12 ships no setuptools: setup.py needs it (and pyflakes for tests/test_py_lint.py)
"$PY" -c "import setuptools" >/dev/null 2>&1 || "$PY" -m pip install -q setuptools || exit 1
"$PY" -c "import pyflakes" >/dev/null 2>&1 || "$PY" -m pip install -q pyflakes || true
"$PY" setup.py build_ext --inplace >/tmp/cprof_build_py312.log 2>&1 \
  || { tail -n 30 /tmp/cprof_build_py312.log; exit 1; }
exec "$PY" -m pytest -q -p no:cacheprovider tests
