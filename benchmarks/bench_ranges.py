#!/usr/bin/env python
"""ns per CPU range from Python: cprof vs torch.profiler, in the same run.

Variants (each timed as a tight loop of N iterations; ns/iter = elapsed / N):

  empty loop                    for _ in ...: pass                     (loop baseline)
  cprof.range, no window        with cprof.range("name"): pass         outside any window
  cprof.range, in window        with cprof.range("name"): pass         inside _C.start()/stop()
  cprof.push/pop, in window     cprof.push("name"); cprof.pop()        inside a window
  ProfilerContext(enabled=False) with cprof.ProfilerContext(enabled=False): pass
                                                                       (construct + enter + exit)
  torch record_function, no session
                                with record_function("name"): pass     no profiler running
  torch record_function, in session
                                with record_function("name"): pass     inside an open
                                        torch.profiler.profile(activities=[ProfilerActivity.CPU])
  torch _RecordFunctionFast, no session / in session
                                with _RecordFunctionFast("name"): pass
                                        torch._C._profiler._RecordFunctionFast: the range torch
                                        uses internally, without record_function's dispatch
                                        through torch.ops.profiler (most of its cost even with
                                        no session); skipped where torch lacks it. The session's
                                        events are counted: the script fails unless it holds N.

Rounds are interleaved: every round runs every variant once (order rotated per round), so
machine noise hits all variants alike; the table reports the median over rounds. Opening and
closing the cprof window / torch session is outside the timed region. The garbage collector is
disabled during the timed loops (as timeit does).

    python benchmarks/bench_ranges.py [--rounds 7] [--n 200000] [--n-torch 20000] [--json PATH]
"""
import argparse
import gc
import itertools
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import cprof  # noqa: E402
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

import _common  # noqa: E402

_C = cprof._C
repeat = itertools.repeat
clock = time.perf_counter_ns


def machine_info():
    return _common.machine_info(torch, cprof)


def _timed(fn, n):
    gc.disable()
    try:
        t0 = clock()
        fn(n)
        return clock() - t0
    finally:
        gc.enable()


# ---- loop bodies: each takes n and runs the body n times ----
def body_empty(n):
    for _ in repeat(None, n):
        pass


def body_cprof_range(n):
    rng = cprof.range
    for _ in repeat(None, n):
        with rng("name"):
            pass


def body_cprof_pushpop(n):
    push, pop = cprof.push, cprof.pop
    for _ in repeat(None, n):
        push("name")
        pop()


def body_pc_disabled(n):
    PC = cprof.ProfilerContext
    for _ in repeat(None, n):
        with PC(enabled=False):
            pass


def body_torch_rf(n):
    rf = record_function
    for _ in repeat(None, n):
        with rf("name"):
            pass


RecordFunctionFast = getattr(torch._C._profiler, "_RecordFunctionFast", None)


def body_torch_rf_fast(n):
    rf = RecordFunctionFast
    for _ in repeat(None, n):
        with rf("name"):
            pass


# ---- variants: (key, label, uses torch N?, runner(n) -> elapsed ns) ----
def plain(body):
    return lambda n: _timed(body, n)


def in_cprof_window(body):
    def run(n):
        _C.set_buffer_cap(max(256 << 20, n * 64 * 2))
        _C.start()
        try:
            dt = _timed(body, n)
        finally:
            snap = _C.stop()
        got = snap.ranges
        dropped = snap.dropped
        snap.close()
        if got != n or dropped:
            raise SystemExit(f"bench_ranges: window recorded {got} ranges ({dropped} dropped), "
                             f"expected {n}")
        return dt

    return run


def in_torch_session(body, check=False):
    def run(n):
        with profile(activities=[ProfilerActivity.CPU]) as p:
            dt = _timed(body, n)
        # the session's exit (event processing) and the check are outside the timed region
        if check:
            got = sum(1 for e in p.events() if e.name == "name")
            if got != n:
                raise SystemExit(f"bench_ranges: torch session recorded {got} ranges, "
                                 f"expected {n}")
        return dt

    return run


VARIANTS = [
    ("empty", "empty loop (baseline)", False, plain(body_empty)),
    ("cprof_range_off", "cprof.range, no window", False, plain(body_cprof_range)),
    ("cprof_range_on", "cprof.range, in window", False, in_cprof_window(body_cprof_range)),
    ("cprof_pushpop_on", "cprof.push/pop, in window", False, in_cprof_window(body_cprof_pushpop)),
    ("pc_disabled", "ProfilerContext(enabled=False)", False, plain(body_pc_disabled)),
    ("torch_rf_off", "torch record_function, no session", True, plain(body_torch_rf)),
    ("torch_rf_on", "torch record_function, in session", True, in_torch_session(body_torch_rf)),
]
if RecordFunctionFast is not None:
    VARIANTS += [
        ("torch_rff_off", "torch _RecordFunctionFast, no session", True,
         plain(body_torch_rf_fast)),
        ("torch_rff_on", "torch _RecordFunctionFast, in session", True,
         in_torch_session(body_torch_rf_fast, check=True)),
    ]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=200_000, help="iterations for non-torch variants")
    ap.add_argument("--n-torch", type=int, default=20_000, help="iterations for torch variants")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    # warm-up: one short pass of every variant (imports, first torch session, caches)
    for _, _, is_torch, run in VARIANTS:
        run(2000)

    samples = {key: [] for key, *_ in VARIANTS}
    k = len(VARIANTS)
    for r in range(args.rounds):
        order = VARIANTS[r % k:] + VARIANTS[: r % k]  # rotate so no variant always runs first
        for key, _, is_torch, run in order:
            n = args.n_torch if is_torch else args.n
            samples[key].append(run(n) / n)

    med = {key: statistics.median(v) for key, v in samples.items()}
    base = med["empty"]
    results = {}
    for key, label, is_torch, _ in VARIANTS:
        v = samples[key]
        results[key] = {
            "label": label,
            "n": args.n_torch if is_torch else args.n,
            "median_ns": med[key],
            "min_ns": min(v),
            "max_ns": max(v),
            "net_ns": med[key] - base,
            "samples_ns": v,
        }
    ratio = med["torch_rf_on"] / med["cprof_range_on"]
    ratio_net = (med["torch_rf_on"] - base) / max(med["cprof_range_on"] - base, 1e-9)
    elapsed = time.perf_counter() - t_start

    info = machine_info()
    print(f"bench_ranges: {info['cpu_model']}, {info['nproc']} cpus, kernel {info['kernel']}, "
          f"Python {info['python']}, torch {info['torch']}, cprof {info['cprof']} "
          f"({info['cprof_file']}), load {info['loadavg']}")
    print(f"{args.rounds} interleaved rounds; N={args.n} (torch: N={args.n_torch}); "
          f"median over rounds; net = median - empty loop")
    print()
    print(f"{'variant':<38} {'N':>8} {'median ns':>10} {'min':>9} {'max':>9} {'net ns':>9}")
    print("-" * 88)
    for key, res in results.items():
        print(f"{res['label']:<38} {res['n']:>8} {res['median_ns']:>10.1f} {res['min_ns']:>9.1f} "
              f"{res['max_ns']:>9.1f} {res['net_ns']:>9.1f}")
    print()
    print(f"torch record_function (in session) / cprof.range (in window): {ratio:.1f}x "
          f"(net of loop: {ratio_net:.1f}x)")
    ratio_fast = None
    if "torch_rff_on" in med:
        ratio_fast = med["torch_rff_on"] / med["cprof_range_on"]
        print(f"torch _RecordFunctionFast (in session) / cprof.range (in window): "
              f"{ratio_fast:.1f}x (record_function's extra cost is torch.ops dispatch, paid "
              f"with no session too)")
    target = 150.0
    verdict = "met" if med["cprof_range_on"] <= target else "MISSED"
    print(f"target <= {target:.0f} ns per cprof.range in a window: {med['cprof_range_on']:.1f} ns "
          f"({verdict})")
    print(f"total time {elapsed:.1f} s")

    if args.json:
        out = {
            "benchmark": "bench_ranges",
            "machine": info,
            "rounds": args.rounds,
            "n": args.n,
            "n_torch": args.n_torch,
            "variants": results,
            "ratio_torch_over_cprof": ratio,
            "ratio_torch_over_cprof_net": ratio_net,
            "ratio_torch_fast_over_cprof": ratio_fast,
            "target_ns": target,
            "target_met": med["cprof_range_on"] <= target,
            "elapsed_s": elapsed,
        }
        _common.write_results(args.json, out)


if __name__ == "__main__":
    main()
