#!/usr/bin/env bash
# Downloads the Debian packages cprof builds against (cJSON, zlib headers) into .deps/ (git
# ignores it), for a machine that cannot install them itself, such as the GPU machine.
# There: `for f in .deps/*.deb; do dpkg -x "$f" /tmp/cprof-deps; done` and build with
# CPROF_DEPS_PREFIX=/tmp/cprof-deps (scripts/gpu_check.sh does both when .deps/ is there).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
if [ -d .git ]; then mkdir -p .git/info; grep -qx '/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >> .git/info/exclude; fi
(cd .deps && apt-get download libcjson1 libcjson-dev zlib1g-dev >/dev/null)
# py-spy (one static binary in a wheel) samples native + Python stacks where perf is missing,
# as on the GPU machine (gpu_check.sh's "perf" benchmark)
if ! ls .deps/py_spy-*.whl >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: -d .deps py-spy \
    || echo "fetch_build_deps: py-spy not downloaded (the perf benchmark falls back to timing only)"
fi
ls -1 .deps
