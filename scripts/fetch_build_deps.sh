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
ls -1 .deps
