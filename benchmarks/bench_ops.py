#!/usr/bin/env python
"""Cost of recording one torch operator: cprof (ITT collector in C) vs torch.profiler.

Workload: N calls of torch.add on two 4-element CPU tensors (one aten op each, no children),
so the per-call difference to the unprofiled loop is the cost of recording one operator.

Configurations, interleaved over rounds (the order rotates each round), medians reported:

  none            no profiler
  cprof:ops       cprof.profile(activities=[CPU], record_ops=True)
  cprof:no_ops    cprof.profile(activities=[CPU], record_ops=False) (no operators)
  torch           torch.profiler.profile(activities=[CPU])

Only the loop is timed (not opening, closing or exporting). cprof must be imported before
torch for its operator capture (this script does so).

    python benchmarks/bench_ops.py [--rounds 9] [--n 20000] [--json P]
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cprof  # noqa: E402  (before torch: see the docstring)

CONFIGS = ("none", "cprof:ops", "cprof:no_ops", "torch")


def run(torch, config, n, a, b):
    add = torch.add
    gc.collect()
    gc.disable()
    try:
        if config == "none":
            prof = None
        elif config == "cprof:ops":
            prof = cprof.profile(activities=["CPU"], record_ops=True)
        elif config == "cprof:no_ops":
            prof = cprof.profile(activities=["CPU"], record_ops=False)
        else:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if prof is not None:
                prof.__enter__()
            try:
                t0 = time.perf_counter()
                for _ in range(n):
                    add(a, b)
                t1 = time.perf_counter()
            finally:
                if prof is not None:
                    prof.__exit__(None, None, None)
        if config == "cprof:ops":
            # the measurement is only valid if the operators were recorded
            got = sum(1 for e in prof.events() if e.name == "aten::add")
            if got != n:
                raise SystemExit(f"bench_ops: cprof recorded {got} of {n} aten::add calls "
                                 f"({prof._last.notes.get('ops') if prof._last else None})")
        return (t1 - t0) / n * 1e9
    finally:
        gc.enable()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import torch
    from _common import machine_info
    a, b = torch.ones(4), torch.ones(4)
    for c in CONFIGS:
        run(torch, c, 1000, a, b)
    times = {c: [] for c in CONFIGS}
    for r in range(args.rounds):
        order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
        for c in order:
            times[c].append(run(torch, c, args.n, a, b))
    med = {c: statistics.median(v) for c, v in times.items()}
    print(f"machine: {machine_info(torch, cprof)}")
    print(f"{args.rounds} rounds x {args.n} torch.add calls, medians of ns per call")
    print(f"{'config':<14} {'ns/call':>9} {'+ns vs none':>12}")
    for c in CONFIGS:
        print(f"{c:<14} {med[c]:>9.0f} {med[c] - med['none']:>12.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_info(torch, cprof), "ns_per_call": med,
                       "rounds": args.rounds, "n": args.n}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
