#!/usr/bin/env bash
# Installs everything cprof needs on a fresh Debian machine and builds it in place.
# Idempotent: each step checks before it installs. Usage: bash scripts/setup.sh [--test]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi

missing=()
[ -f /usr/include/zlib.h ] || missing+=(zlib1g-dev)
[ -f /usr/include/cjson/cJSON.h ] || missing+=(libcjson-dev)
command -v gcc >/dev/null || missing+=(gcc)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# headless Chromium for tests/test_html.py (renders the `cprof report --html` page): only when asked
# (CPROF_HTML_TESTS=1) or on CI (CI set, as CI services do); ~120 MB download, ~10 s to install
if { [ "${CPROF_HTML_TESTS:-}" = 1 ] || [ -n "${CI:-}" ]; } \
   && ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null \
   && ! command -v google-chrome >/dev/null; then
  echo "setup: apt-get install chromium (for the HTML report test)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

# clang with libFuzzer for scripts/fuzz.sh: only when asked (CPROF_FUZZ=1) or on CI. Debian 12's
# `clang` is clang 14; its fuzzer runtime (libclang-rt-dev) is only a recommendation of it, so
# named; llvm-symbolizer (package llvm) names the lines in a crash's stack. ~300 MB, ~30 s.
if { [ "${CPROF_FUZZ:-}" = 1 ] || [ -n "${CI:-}" ]; }; then
  fuzz_missing=()
  if ! command -v clang >/dev/null \
     || ! ls "$(clang --print-runtime-dir 2>/dev/null)"/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
    fuzz_missing+=(clang libclang-rt-dev)
  fi
  command -v llvm-symbolizer >/dev/null || fuzz_missing+=(llvm)
  if [ ${#fuzz_missing[@]} -gt 0 ]; then
    echo "setup: apt-get install ${fuzz_missing[*]} (for scripts/fuzz.sh)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      "${fuzz_missing[@]}" >/dev/null
  fi
fi

pip_install() { $PY -m pip install -q --disable-pip-version-check "$@"; }
# torch: from pip's configured index (this project's machines: the CPU wheel, a local file);
# from PyPI on Linux that is the CUDA build (see README.md)
$PY -c "import torch" 2>/dev/null || pip_install torch==2.13.0
$PY -c "import setuptools, wheel" 2>/dev/null || pip_install setuptools wheel
if [ "${1:-}" = "--test" ]; then
  $PY -c "import pytest" 2>/dev/null || pip_install pytest
  $PY -c "import numpy" 2>/dev/null || pip_install numpy
  $PY -c "import pyflakes" 2>/dev/null || pip_install pyflakes  # tests/test_py_lint.py
  # Holistic Trace Analysis reads our traces in a test; installed without touching torch
  $PY -c "import hta, pandas; assert int(pandas.__version__.split('.')[0]) < 3" 2>/dev/null ||
    bash scripts/install_hta.sh || echo "setup: HTA not installed; its test will skip"
  # TensorBoard's profiler plugin (its parser only) reads our traces in a test
  $PY -c "import torch_tb_profiler.profiler.run_generator" 2>/dev/null ||
    bash scripts/install_tb_profiler.sh || echo "setup: torch-tb-profiler not installed; its test will skip"
fi

# build the extension in place (warnings are errors), and install the package + `cprof`
# (its output, setuptools' deprecation notices included, is printed only when the build fails)
build_log=$(mktemp)
if ! CPROF_WERROR=1 $PY setup.py -q build_ext --inplace >"$build_log" 2>&1; then
  cat "$build_log" >&2
  rm -f "$build_log"
  echo "setup: the C extension did not build (above)" >&2
  exit 1
fi
rm -f "$build_log"
# (re)install if the importable cprof is not this checkout's (another clone's editable install)
here=$(pwd)
where=$(cd / && $PY -c "import cprof, os; print(os.path.dirname(os.path.dirname(os.path.realpath(cprof.__file__))))" 2>/dev/null || true)
if [ "$where" != "$(realpath "$here")" ]; then
  pip_install --no-build-isolation --no-deps -e . >/dev/null 2>"$build_log.pip" ||
    { cat "$build_log.pip" >&2; rm -f "$build_log.pip"; exit 1; }
  rm -f "$build_log.pip"
fi
(cd / && $PY -c "import cprof; print('setup: cprof', cprof.__version__, 'ready at', cprof.__file__)")
