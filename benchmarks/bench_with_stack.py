#!/usr/bin/env python
"""ns per Python call with the with_stack tracer on: cprof vs torch.profiler, in the same run.

Workloads (pure Python calls, no torch ops):

  fib          recursive fib(20): 21,891 calls, depth up to 20
  small calls  a loop calling a one-line function N times

Variants (only the workload is timed; opening/closing windows and sessions is outside):

  unprofiled                      no profiler
  cprof with_stack                _pystack.start() in an open window (Python calls only)
  cprof with_stack, c_calls       _pystack.start(c_calls=True): builtins / C calls as well
  torch with_stack                torch.profiler.profile(activities=[CPU], with_stack=True):
                                  torch's Python tracer records python_function events for
                                  every Python and C call (checked in its trace)

Rounds are interleaved (order rotated per round); the table reports medians over rounds and
the overhead per call = (median - unprofiled median) / calls. The garbage collector is off
during the timed region (as timeit does).

    python benchmarks/bench_with_stack.py [--rounds 7] [--fib 20] [--n 100000] [--json PATH]

Without torch installed the torch row is left out (to measure the sys.monitoring backend on a
Python that has no torch build).
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
from cprof import _pystack  # noqa: E402

try:  # without torch (e.g. another Python) the torch row is left out
    import torch
    from torch.profiler import ProfilerActivity, profile
except ImportError:
    torch = None

import _common  # noqa: E402

_C = cprof._C
clock = time.perf_counter_ns


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def fib_calls(n):
    a, b = 1, 1  # calls(n) = calls(n-1) + calls(n-2) + 1, calls(0) = calls(1) = 1
    for _ in range(n - 1):
        a, b = b, a + b + 1
    return b if n > 0 else 1


def small(x):
    return x + 1


def loop_small(n):
    for i in range(n):
        small(i)


WORKLOADS = {
    "fib": (lambda a: fib(a.fib), lambda a: fib_calls(a.fib), "fib({fib})"),
    "small": (lambda a: loop_small(a.n), lambda a: a.n, "{n} small calls"),
}


def _timed(work):
    gc.disable()
    try:
        t0 = clock()
        work()
        return clock() - t0
    finally:
        gc.enable()


def run_plain(work, calls):
    return _timed(work)


def run_cprof(c_calls):
    def run(work, calls):
        _C.start()
        try:
            _pystack.start(c_calls=c_calls)
            try:
                dt = _timed(work)
            finally:
                counts = _pystack.stop()
        finally:
            snap = _C.stop()
        n, dropped = snap.ranges, snap.dropped
        snap.close()
        if counts["calls"] < calls or n < calls or dropped:
            raise SystemExit(f"bench_with_stack: cprof recorded {n} ranges ({dropped} dropped, "
                             f"{counts}), expected at least {calls}")
        return dt

    return run


def run_torch(work, calls):
    with profile(activities=[ProfilerActivity.CPU], with_stack=True):
        dt = _timed(work)
    return dt  # the session's event processing at exit is outside the timed region


VARIANTS = [
    ("plain", "unprofiled", run_plain),
    ("cprof", "cprof with_stack", run_cprof(False)),
    ("cprof_c", "cprof with_stack, c_calls", run_cprof(True)),
] + ([("torch", "torch with_stack", run_torch)] if torch is not None else [])


def check_torch_records_python_functions():
    """torch's with_stack must really trace Python calls for the comparison to be fair."""
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as p:
        loop_small(10)
    names = [e.name for e in p.events() if getattr(e, "device_type", None) is not None]
    n = sum(1 for nm in names if nm.endswith("): small"))
    return n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--fib", type=int, default=20)
    ap.add_argument("--n", type=int, default=100_000, help="calls in the small-calls loop")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = ap.parse_args(argv)
    _C.set_buffer_cap(max(256 << 20, 4 * 64 * max(args.n, fib_calls(args.fib))))

    t_start = time.perf_counter()
    torch_small = check_torch_records_python_functions() if torch is not None else None
    for _, _, run in VARIANTS:  # warm-up: imports, first sessions, name caches
        run(lambda: loop_small(100), 100)

    results = {}
    for wkey, (work_of, calls_of, label) in WORKLOADS.items():
        work, calls = (lambda w=work_of: w(args)), calls_of(args)
        samples = {key: [] for key, *_ in VARIANTS}
        k = len(VARIANTS)
        for r in range(args.rounds):
            for key, _, run in VARIANTS[r % k:] + VARIANTS[: r % k]:
                samples[key].append(run(work, calls))
        med = {key: statistics.median(v) for key, v in samples.items()}
        base = med["plain"]
        results[wkey] = {
            "label": label.format(fib=args.fib, n=args.n),
            "calls": calls,
            "variants": {
                key: {
                    "label": vlabel,
                    "median_ms": med[key] / 1e6,
                    "min_ms": min(samples[key]) / 1e6,
                    "max_ms": max(samples[key]) / 1e6,
                    "overhead_ns_per_call": (med[key] - base) / calls,
                    "samples_ns": samples[key],
                }
                for key, vlabel, _ in VARIANTS
            },
        }
    elapsed = time.perf_counter() - t_start

    info = _common.machine_info(torch or argparse.Namespace(__version__="-"), cprof)
    print(f"bench_with_stack: {info['cpu_model']}, {info['nproc']} cpus, kernel {info['kernel']}, "
          f"Python {info['python']}, torch {info['torch']}, cprof {info['cprof']}")
    backend = "sys.monitoring" if sys.version_info >= (3, 12) else "PyEval_SetProfile"
    print(f"{args.rounds} interleaved rounds, medians; cprof backend: {backend}")
    if torch is not None:
        print(f"torch with_stack recorded {torch_small}/10 calls of a traced function as "
              f"python_function events")
    print()
    print(f"{'workload':<18} {'variant':<28} {'median ms':>10} {'min':>8} {'max':>8} "
          f"{'ns/call':>9} {'x plain':>8}")
    print("-" * 95)
    for res in results.values():
        base = res["variants"]["plain"]["median_ms"]
        for v in res["variants"].values():
            ov = v["overhead_ns_per_call"]
            print(f"{res['label']:<18} {v['label']:<28} {v['median_ms']:>10.2f} "
                  f"{v['min_ms']:>8.2f} {v['max_ms']:>8.2f} "
                  f"{'' if v is res['variants']['plain'] else f'{ov:.0f}':>9} "
                  f"{v['median_ms'] / base:>8.2f}")
        print()
    for wkey, res in results.items():
        v = res["variants"]
        if "torch" not in v:
            continue
        ratio = v["torch"]["overhead_ns_per_call"] / max(v["cprof"]["overhead_ns_per_call"], 1e-9)
        print(f"{res['label']}: torch with_stack overhead / cprof with_stack overhead = "
              f"{ratio:.1f}x")
    print(f"total time {elapsed:.1f} s")

    if args.json:
        out = {"benchmark": "bench_with_stack", "machine": info, "rounds": args.rounds,
               "backend": backend, "workloads": results, "elapsed_s": elapsed}
        _common.write_results(args.json, out)


if __name__ == "__main__":
    main()
