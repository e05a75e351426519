#!/usr/bin/env bash
# Builds tests/fake_cupti/libfake_cupti.so, the stand-in for libcupti and libcuda.so.1 that
# tests load through CPROF_CUPTI_PATH / CPROF_LIBCUDA_PATH. Needs only gcc (or $CC); no CUDA.
# Usage: tests/fake_cupti/build.sh [output.so]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$here/libfake_cupti.so}"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# Built into a temporary name and renamed, so a test running concurrently never loads half a file.
"${CC:-gcc}" -std=c11 -Wall -Wextra -Werror -O1 -g -fPIC -shared -pthread \
    -I"$root/csrc" "$here/fake_cupti.c" -o "$tmp"
mv -f "$tmp" "$out"
