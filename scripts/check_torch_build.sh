#!/usr/bin/env bash
# Compiles cprof._torch_ops (csrc/*.cpp) against another torch's headers and libraries without
# installing that torch, and checks that every torch symbol the result needs is defined there.
# For the torch a GPU machine has, where the build would otherwise first be tried on that machine:
#
#     pip download torch==2.11.0 --no-deps -d /tmp/whl      # ~530 MB, no CUDA libraries needed
#     bash scripts/check_torch_build.sh /tmp/whl/torch-2.11.0-*.whl
#
# Uses the flags setup.py uses (the C++ standard torch's cpp_extension uses, -Wall -Wextra
# -Werror on cprof's own code, torch's headers as system headers, the CXX11 ABI), with this
# machine's python3 headers (torch's C++ API is the same for every Python). Prints OK and
# exits 0, or says what failed. Running the result needs that torch installed: not done here.
set -euo pipefail
wheel=${1:?usage: check_torch_build.sh TORCH_WHEEL}
[ -f "$wheel" ] || { echo "check_torch_build: no such wheel: $wheel" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 -m zipfile -e "$wheel" unpacked > /dev/null 2>&1 || unzip -q "$wheel" -d unpacked
t=unpacked/torch
[ -d "$t/include" ] || { echo "check_torch_build: $wheel has no torch/include" >&2; exit 2; }
version=$(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$t/version.py")
std=-std=c++17
grep -q -- "-std=c++20" "$t/utils/cpp_extension.py" && std=-std=c++20
pyinc=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
for f in torch_ops py_torch_ops py_torch_shapes; do
    g++ "$std" -O2 -fPIC -fvisibility=hidden -Wall -Wextra -Werror -D_GLIBCXX_USE_CXX11_ABI=1 \
        "-DCPROF_TORCH_VERSION=\"$version\"" -I"$root/csrc" -isystem "$t/include" \
        -isystem "$t/include/torch/csrc/api/include" -isystem "$pyinc" \
        -c "$root/csrc/$f.cpp" -o "$f.o"
done
g++ -shared ./*.o -L"$t/lib" -lc10 -ltorch_cpu -ltorch_python -o _torch_ops.so
# every undefined symbol that is not Python's, libc's or libstdc++'s must come from torch
nm -D --undefined-only _torch_ops.so | awk '{print $2}' | grep -v '@' \
    | grep -v -E '^(_?Py|_ITM_|__gmon_start__|__cxa_|_Unwind)' | sort -u > need.txt || true
for l in libc10.so libtorch_cpu.so libtorch_python.so; do
    nm -D --defined-only "$t/lib/$l" | awk '{print $3}'
done | sort -u > have.txt
missing=$(comm -23 need.txt have.txt)
if [ -n "$missing" ]; then
    echo "check_torch_build: torch $version does not define:" >&2
    echo "$missing" | c++filt >&2
    exit 1
fi
echo "check_torch_build: OK: cprof._torch_ops compiles ($std, -Werror) and links against torch $version; $(wc -l < need.txt) torch symbols, all defined"
