#!/usr/bin/env python
"""Cost of recording one torch operator: cprof (the RecordFunction observer, or the ITT collector
in C) vs torch.profiler.

Workload: N calls of torch.add on two 4-element CPU tensors (one aten op each, no children),
so the per-call difference to the unprofiled loop is the cost of recording one operator.

Configurations, interleaved over rounds (the order rotates each round); reported: the median
ns per call, and the median over rounds of each config's ns per call minus the same round's
unprofiled loop (paired: the machine drifts between rounds), and the fastest round of each:

  none            no profiler
  cprof:ops       cprof.profile(activities=[CPU], record_ops=True) with CPROF_OPS_CAPTURE=itt
                  (names through cprof's ITT collector)
  cprof:no_ops    cprof.profile(activities=[CPU], record_ops=False) (no operators)
  torch           torch.profiler.profile(activities=[CPU])
  cprof:observer  cprof:ops with the default capture (names through the RecordFunction
                  observer, decision 98)
  cprof:shapes    cprof.profile(activities=[CPU], record_ops=True, record_shapes=True)
                  (csrc/torch_ops.cpp: the op with its inputs' shapes, types, strides)
  torch:shapes    torch.profiler.profile(activities=[CPU], record_shapes=True)

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

CONFIGS = ("none", "cprof:ops", "cprof:no_ops", "torch", "cprof:observer", "cprof:shapes",
           "torch:shapes")
# the capture each config runs with (None: CPROF_OPS_CAPTURE unset, cprof's default); set for
# one config's run only, so no config inherits another's (the rotation once gave cprof:shapes
# the ITT capture of the config before it, which records no shapes)
CAPTURE = {"cprof:ops": "itt", "cprof:observer": "auto"}


def run(torch, config, n, a, b):
    add = torch.add
    saved = os.environ.pop("CPROF_OPS_CAPTURE", None)
    if config in CAPTURE:
        os.environ["CPROF_OPS_CAPTURE"] = CAPTURE[config]
    gc.collect()
    gc.disable()
    try:
        if config == "none":
            prof = None
        elif config in ("cprof:ops", "cprof:observer"):
            prof = cprof.profile(activities=["CPU"], record_ops=True)
        elif config == "cprof:no_ops":
            prof = cprof.profile(activities=["CPU"], record_ops=False)
        elif config == "cprof:shapes":
            prof = cprof.profile(activities=["CPU"], record_ops=True, record_shapes=True)
        else:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                          record_shapes=config == "torch:shapes")
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
        if config in ("cprof:ops", "cprof:observer", "cprof:shapes"):
            # the measurement is only valid if the operators (and their shapes) were recorded
            adds = [e for e in prof.events() if e.name == "aten::add"]
            shaped = sum(1 for e in adds if e.input_shapes == [[4], [4], []])
            mode = (prof._last.notes.get("ops") or {}).get("mode")
            want = "itt" if config == "cprof:ops" else "record_function"
            if len(adds) != n or (config == "cprof:shapes" and shaped != n) or mode != want:
                raise SystemExit(f"bench_ops: cprof recorded {len(adds)} of {n} aten::add calls, "
                                 f"{shaped} with shapes "
                                 f"({prof._last.notes.get('ops') if prof._last else None})")
        return (t1 - t0) / n * 1e9
    finally:
        gc.enable()
        os.environ.pop("CPROF_OPS_CAPTURE", None)
        if saved is not None:
            os.environ["CPROF_OPS_CAPTURE"] = saved


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
    # the machine drifts between rounds: each config against the same round's unprofiled loop
    paired = {c: statistics.median(t - n for t, n in zip(times[c], times["none"]))
              for c in CONFIGS}
    print(f"machine: {machine_info(torch, cprof)}")
    print(f"{args.rounds} rounds x {args.n} torch.add calls, medians of ns per call")
    # and the fastest round of each: on a VM whose rounds are bimodal (a neighbour's load
    # doubles some of them), the uncontended cost
    best = {c: min(v) for c, v in times.items()}
    print(f"{'config':<14} {'ns/call':>9} {'+ns paired':>11} {'best':>7} {'+ns best':>9}")
    for c in CONFIGS:
        print(f"{c:<14} {med[c]:>9.0f} {paired[c]:>11.0f} {best[c]:>7.0f} "
              f"{best[c] - best['none']:>9.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_info(torch, cprof), "ns_per_call": med,
                       "added_ns_paired": paired, "best_ns_per_call": best, "rounds": args.rounds, "n": args.n,
                       "per_round": times}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
