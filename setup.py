"""Builds cprof._C from csrc/*.c. No CUDA is needed to build: CUDA libraries are loaded at run
time. Switches (environment): CPROF_WERROR=1 (warnings are errors; CI sets it),
CPROF_DEBUG=1 (-O0 -g, CPROF_DEBUG defined), CPROF_SANITIZE=1 (ASan + UBSan).

With torch importable, also cprof._torch_ops from csrc/*.cpp (torch's operators with
their shapes; built against that torch, optional: a failed build leaves cprof without operator
shapes, and says so; CPROF_TORCH_OPS=0 skips it)."""
import glob
import json
import os
import sys

# Before setuptools: the C extension uses the C API of 3.10+ (csrc/py_binding.h), and an
# older Python would otherwise fail deep in the compiler's output
if sys.version_info < (3, 10):
    sys.exit(f"cprof needs Python 3.10 or newer; this is {sys.version.split()[0]} "
             f"({sys.executable})")

from setuptools import Extension, setup  # noqa: E402


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



def torch_ops_extension():
    """cprof._torch_ops, built against the torch this Python imports, or None without torch."""
    if os.environ.get("CPROF_TORCH_OPS", "1").strip().lower() in ("0", "off", "false", "no"):
        return None
    try:
        import torch
        from torch.utils import cpp_extension
    except Exception:  # no torch, or a broken one: cprof works without operator shapes
        return None
    incs = cpp_extension.include_paths()
    libdirs = cpp_extension.library_paths()
    with open(cpp_extension.__file__) as f:  # the C++ standard torch's own extensions use
        std = "-std=c++20" if "-std=c++20" in f.read() else "-std=c++17"
    abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    return Extension(
        "cprof._torch_ops",
        sources=["csrc/torch_ops.cpp", "csrc/py_torch_ops.cpp", "csrc/py_torch_shapes.cpp"],
        # torch's own headers are system headers here: their warnings are not ours
        depends=["csrc/op_api.h", "csrc/torch_ops.h", os.path.join(os.path.dirname(torch.__file__), "version.py")],
        include_dirs=["csrc"],
        library_dirs=libdirs,
        libraries=["c10", "torch_cpu", "torch_python"],
        define_macros=[("_GLIBCXX_USE_CXX11_ABI", str(abi)),
                       ("CPROF_TORCH_VERSION", json.dumps(torch.__version__))],
        extra_compile_args=[std, "-O2", "-fvisibility=hidden", "-Wall", "-Wextra"]
        + [a for d in incs for a in ("-isystem", d)],
        extra_link_args=[f"-Wl,-rpath,{d}" for d in libdirs],
        language="c++",
        optional=True,
    )


torch_ops = torch_ops_extension()
if torch_ops is None and "build_ext" in sys.argv:
    print("cprof: torch is not importable: cprof._torch_ops (operator shapes) is not built",
          file=sys.stderr)

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
    ] + ([torch_ops] if torch_ops is not None else []),
)
