"""--capture-range tests: argv[1] is how the target range is made (cprof, cprof_decorator,
push, record_function, autograd, nvtx, nvtx_range) or cudaProfilerApi / cuda_profile.
Ranges: before, then the target range "target" holding "inner", then after, then a second
"target" (not captured: one window per run)."""
import sys

import cprof

kind = sys.argv[1]


def nvtx_on_cpu(torch):
    # CPU torch has no NVTX library: a stand-in, so the Python side of NVTX runs
    class FakeNvtx:
        depth = 0

        @staticmethod
        def rangePushA(msg):
            FakeNvtx.depth += 1
            return FakeNvtx.depth - 1

        @staticmethod
        def rangePop():
            FakeNvtx.depth -= 1
            return FakeNvtx.depth

    import torch.cuda.nvtx as nv
    nv._nvtx = FakeNvtx


def body():
    with cprof.range("inner"):
        sum(range(100))


def target():
    if kind == "cprof":
        with cprof.range("target"):
            body()
    elif kind == "cprof_decorator":
        deco()
    elif kind == "push":
        cprof.push("target")
        body()
        cprof.pop()
    elif kind == "record_function":
        with torch.profiler.record_function("target"):
            body()
    elif kind == "autograd":
        with torch.autograd.profiler.record_function("target"):
            body()
    elif kind == "nvtx":
        torch.cuda.nvtx.range_push("target")
        body()
        torch.cuda.nvtx.range_pop()
    elif kind == "nvtx_range":
        with torch.cuda.nvtx.range("target"):
            body()
    elif kind == "cudaProfilerApi":
        torch.cuda.profiler.start()
        with cprof.range("target"):
            body()
        torch.cuda.profiler.stop()
    elif kind == "cuda_profile":
        with torch.cuda.profiler.profile():
            with cprof.range("target"):
                body()


@cprof.range("target")
def deco():
    body()


if kind not in ("cprof", "cprof_decorator", "push"):
    import torch
    nvtx_on_cpu(torch)

with cprof.range("before"):
    pass
target()
with cprof.range("after"):
    pass
target()
print("done")
