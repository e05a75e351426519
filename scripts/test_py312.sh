#!/usr/bin/env bash
# The suite once more on another Python than the main run's, without torch (torch tests skip,
# everything else runs). Builds cprof/_C.cpython-3XX-*.so beside the main one. Exit 0 with a
# note when no such Python with headers is found.
#   bash scripts/test_py312.sh          # 3.12+ (CPROF_PY312 names one): sys.monitoring
#                                       # paths, the GPU machine's Python
#   bash scripts/test_py312.sh 3.10     # 3.10 (CPROF_PY310 names one): the oldest supported
set -uo pipefail
cd "$(dirname "$0")/.."
want=${1:-3.12}
case "$want" in
  3.12) cands=("${CPROF_PY312:-}" python3.13 python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python
               "$HOME"/.pyenv/versions/3.13*/bin/python)
        check='sys.version_info >= (3, 12)' ;;
  3.10) cands=("${CPROF_PY310:-}" python3.10 "$HOME"/.pyenv/versions/3.10*/bin/python)
        check='sys.version_info[:2] == (3, 10)' ;;
  *) echo "test_py312: unknown version $want (3.12 or 3.10)" >&2; exit 2 ;;
esac
name=test_py${want/./}
find_py() {
  local c
  for c in "${cands[@]}"; do
    [ -n "$c" ] || continue
    command -v "$c" >/dev/null 2>&1 || [ -x "$c" ] || continue
    # a pyenv shim answers for versions it cannot run: ask the interpreter itself
    "$c" -c "import sys, sysconfig, os; sys.exit(0 if $check and
os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')) else 1)" \
      >/dev/null 2>&1 && { echo "$c"; return 0; }
  done
  return 1
}
PY=$(find_py) || { echo "$name: no Python $want with headers here: skipped"; exit 0; }
echo "$name: $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
"$PY" -m pytest --version >/dev/null 2>&1 || "$PY" -m pip install -q pytest || exit 1
# Python 3.12 ships no setuptools: setup.py needs it (and pyflakes for tests/test_py_lint.py)
"$PY" -c "import setuptools" >/dev/null 2>&1 || "$PY" -m pip install -q setuptools || exit 1
"$PY" -c "import pyflakes" >/dev/null 2>&1 || "$PY" -m pip install -q pyflakes || true
"$PY" setup.py build_ext --inplace >/tmp/cprof_build_$name.log 2>&1 \
  || { tail -n 30 /tmp/cprof_build_$name.log; exit 1; }
exec "$PY" -m pytest -q -p no:cacheprovider tests
