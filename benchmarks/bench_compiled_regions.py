#!/usr/bin/env python
"""What recording torch.compile's regions costs (cprof/_compiled.py, csrc/py_regions.c), side by
side with torch.profiler recording the same regions, one process, interleaved rounds.

Two workloads (CPU, backend="eager" so no C compiler is needed):

  compiled call   a torch.compile'd function with one graph break (two regions nested, as
                  seed 001 draws them) on a small tensor: `--n` calls
  python calls    `--n` x 100 calls of a tiny Python function, not compiled, while compiled
                  code is known: what the capture costs code it does not watch (3.11: the
                  profile function sees every call; 3.12+: nothing, local events only)

Variants:

  unprofiled            no window
  cprof window          cprof.profile(activities=[CPU], record_ops=False) open: regions captured
  cprof, no regions     the same window with the capture switched off (_compiled.install
                        patched to return None): what the regions add to a window
  torch.profiler        torch.profiler.profile(activities=[CPU]) open (its regions come from
                        C++ RecordFunction, along with every aten op)

Each cell is the median over rounds of (elapsed / calls) in microseconds; "added" columns are
variant - unprofiled. The cprof window is checked to hold 2 regions per compiled call.

First, without torch (so it also runs on a Python without it, e.g. 3.12 here): the mechanism
alone, ns per call of a one-line function whose code is watched ("region") and of another one
while the capture is active, against both unwatched with no capture.

    python benchmarks/bench_compiled_regions.py [--rounds 7] [--n 300] [--json PATH]
"""
import argparse
import gc
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import cprof  # noqa: E402
from cprof import _compiled  # noqa: E402

try:
    import torch
    import torch._dynamo
except ImportError:  # the mechanism table still runs
    torch = None

import _common  # noqa: E402

clock = time.perf_counter_ns


def f(x):
    x = x.sin()
    torch._dynamo.graph_break()
    return x.cos()


def tiny(a):
    return a + 1


def run_compiled(cf, x, n):
    t0 = clock()
    for _ in range(n):
        cf(x)
    return (clock() - t0) / n / 1e3


def run_python(n):
    t0 = clock()
    for _ in range(n * 100):
        tiny(1)
    return (clock() - t0) / (n * 100) / 1e3


def variant(name, work):
    """Runs work() inside the variant's window; returns its time per call (us)."""
    if name == "unprofiled":
        return work(), None
    if name == "torch.profiler":
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            return work(), None
    real = _compiled.install
    if name == "cprof, no regions":
        _compiled.install = lambda with_stack=False: None
    try:
        # record_ops=False: with operators, torch's own region ranges arrive as ops and
        # cprof's capture, what this measures, is not installed
        with cprof.profile(activities=[cprof.ProfilerActivity.CPU], record_ops=False) as p:
            t = work()
    finally:
        _compiled.install = real
    regions = sum(1 for e in p.events() if e.name.startswith("Torch-Compiled Region"))
    return t, regions


def _leaf(x):
    return x + 1


def _other(x):
    return x + 1


def mechanism(rounds, n=200000):
    def per_call(fn):
        t0 = clock()
        for i in range(n):
            fn(i)
        return (clock() - t0) / n

    res = {k: [] for k in ("watched fn, no capture", "other fn, no capture",
                           "watched fn (a region)", "other fn, capture active")}
    for _ in range(rounds):
        res["watched fn, no capture"].append(per_call(_leaf))
        res["other fn, no capture"].append(per_call(_other))
        cprof._C.start()
        r = _compiled._Regions(False)
        r.add(_leaf.__code__, "region")
        res["watched fn (a region)"].append(per_call(_leaf))
        res["other fn, capture active"].append(per_call(_other))
        r.remove()
        cprof._C.stop().close()
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"mechanism (Python {sys.version.split()[0]}, {r.mode}):")
    for k, v in med.items():
        print(f"  {k:<26} {v:7.1f} ns/call")
    return med


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    mech = mechanism(args.rounds)
    if torch is None:
        print("torch is not installed: the torch.compile table is skipped")
        return
    cf = torch.compile(f, backend="eager")
    x = torch.randn(16)
    cf(x)
    names = ["unprofiled", "cprof window", "cprof, no regions", "torch.profiler"]
    works = {"compiled call": lambda: run_compiled(cf, x, args.n),
             "python calls": lambda: run_python(args.n)}
    samples = {(w, v): [] for w in works for v in names}
    gc.disable()
    try:
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for w, work in works.items():
                for v in order:
                    t, regions = variant(v, work)
                    if v == "cprof window" and w == "compiled call" and regions != 2 * args.n:
                        sys.exit(f"cprof window recorded {regions} regions, "
                                 f"expected {2 * args.n}")
                    samples[(w, v)].append(t)
    finally:
        gc.enable()
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"{'workload':<14} {'variant':<19} {'us/call':>9} {'added us':>9}")
    for w in works:
        base = med[(w, "unprofiled")]
        for v in names:
            print(f"{w:<14} {v:<19} {med[(w, v)]:9.3f} {med[(w, v)] - base:9.3f}")
    if args.json:
        _common.write_results(args.json, {
            "machine": _common.machine_info(torch, cprof), "rounds": args.rounds, "n": args.n,
            "mechanism_ns": mech,
            "median_us": {f"{w} | {v}": m for (w, v), m in med.items()},
            "samples_us": {f"{w} | {v}": s for (w, v), s in samples.items()}})


if __name__ == "__main__":
    main()
