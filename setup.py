"""Builds cprof._C from csrc/*.c. No CUDA is needed to build: CUDA libraries are loaded at run
time. Switches (environment): CPROF_WERROR=1 (warnings are errors; CI sets it),
CPROF_DEBUG=1 (-O0 -g, CPROF_DEBUG defined), CPROF_SANITIZE=1 (ASan + UBSan)."""
import glob
import os

from setuptools import Extension, setup


def flag(name):
    return os.environ.get(name, "") not in ("", "0")


extra_compile = ["-std=c11", "-Wall", "-Wextra", "-fvisibility=hidden"]
extra_link = []
macros = []
include_dirs = ["csrc"]
library_dirs = []
# Debian packages unpacked with `dpkg -x` into a prefix (scripts/fetch_build_deps.sh), for
# machines without apt access such as the GPU machine: headers and libraries from there
prefix = os.environ.get("CPROF_DEPS_PREFIX")
if prefix:
    include_dirs.append(os.path.join(prefix, "usr", "include"))
    libdir = os.path.join(prefix, "usr", "lib", "x86_64-linux-gnu")
    library_dirs.append(libdir)
    extra_link.append(f"-Wl,-rpath,{libdir}")
if flag("CPROF_WERROR") or flag("CI"):
    extra_compile.append("-Werror")
if flag("CPROF_DEBUG") or flag("CPROF_SANITIZE"):
    extra_compile += ["-O0", "-g3", "-fno-omit-frame-pointer"]
    macros.append(("CPROF_DEBUG", "1"))
else:
    extra_compile += ["-O2"]
if flag("CPROF_SANITIZE"):
    san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
    # Python's CFLAGS carry -fwrapv, which makes signed overflow defined (wrapping) and so
    # invisible to UBSan; the C core must not rely on it (it is built without it elsewhere:
    # the fuzz harnesses, the ABI checks)
    extra_compile += san + ["-fno-wrapv"]
    extra_link += san

setup(
    ext_modules=[
        Extension(
            "cprof._C",
            sources=sorted(glob.glob("csrc/*.c")),
            depends=sorted(glob.glob("csrc/*.h")),  # a header change rebuilds
            include_dirs=include_dirs,
            library_dirs=library_dirs,
            libraries=["z", "cjson", "dl", "pthread"],
            define_macros=macros,
            extra_compile_args=extra_compile,
            extra_link_args=extra_link,
        )
    ],
)
