#!/usr/bin/env python
"""What a stretch of steps costs with CPU collection toggled off inside a window
(toggle_collection_dynamic(False, [CPU]); design decision 91), against the same stretch
collected and unprofiled, with torch.profiler's same method beside.

Workload: the launch-bound step of the CUPTI issue on CPU (16 x (Linear(256, 256) + ReLU) in an
nn.Sequential inside a module, batch 8, torch.no_grad). One timed block = --steps steps.
Variants, interleaved over --rounds rounds (order rotated each round):

  none          no profiler
  cprof on      inside cprof.profile(activities=[CPU], with_stack=True, record_shapes=True)
                (ProfilerContext's defaults on the CPU)
  cprof off     the same window, CPU toggled off around the block
  torch on      torch.profiler.profile with the same options
  torch off     the same session, torch.profiler's toggle_collection_dynamic(False, [CPU])

Opening and closing the window is outside the timed block. Reported: ms per step (median over
rounds), the paired ratio to "none" of the same round (median), and how many CPU ranges the
block recorded (cprof: the window's ranges; "toggled off": those left out).

torch's intra-op threads: --threads, 1 by default (set_threads in _common.py).

    python benchmarks/bench_toggle.py [--steps 50] [--rounds 7] [--threads N] [--json PATH]
"""
import argparse
import gc
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

import cprof  # noqa: E402
from _common import (add_threads_arg, launch_step_model, machine_info,  # noqa: E402
                     paired_ratios, set_threads, write_results)


def block(model, x, steps):
    gc.disable()
    t0 = time.perf_counter()
    for _ in range(steps):
        model(x)
    dt = time.perf_counter() - t0
    gc.enable()
    return dt / steps


def one(kind, model, x, steps):
    """(seconds per step, CPU ranges recorded, CPU ranges toggled off)"""
    if kind == "none":
        return block(model, x, steps), 0, 0
    P = torch.profiler if kind.startswith("torch") else cprof
    acts = [P.ProfilerActivity.CPU]
    p = P.profile(activities=acts, with_stack=True, record_shapes=True)
    p.start()
    if kind.endswith("off"):
        p.toggle_collection_dynamic(False, acts)
    dt = block(model, x, steps)
    if kind.endswith("off"):
        p.toggle_collection_dynamic(True, acts)
    p.stop()
    if P is torch.profiler:
        return dt, 0, 0
    snap = p._last.snapshot
    return dt, snap.ranges, snap.toggled_off


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", default=None)
    add_threads_arg(ap)
    a = ap.parse_args()
    set_threads(torch, a.threads)
    print(f"machine: {machine_info(torch, cprof)}")
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    model, x = launch_step_model(torch), torch.randn(8, 256)
    kinds = ["none", "cprof on", "cprof off", "torch on", "torch off"]
    runs = {k: [] for k in kinds}
    with torch.no_grad():
        for k in kinds:  # warm-up
            one(k, model, x, 5)
        for r in range(a.rounds):
            for k in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
                runs[k].append(one(k, model, x, a.steps))
    base = [s for s, _, _ in runs["none"]]
    print(f"{'variant':<10} {'ms/step':>8} {'x none':>7} {'(q1-q3)':>13} {'ranges':>8} "
          f"{'toggled off':>11}")
    med = {}
    for k in kinds:
        secs = [s for s, _, _ in runs[k]]
        ratio = paired_ratios(secs, base)
        med[k] = {"ms_per_step": statistics.median(secs) * 1e3, "ratio": ratio[0],
                  "q1": ratio[1], "q3": ratio[2],
                  "ranges": statistics.median(r for _, r, _ in runs[k]),
                  "toggled_off": statistics.median(o for _, _, o in runs[k])}
        m = med[k]
        print(f"{k:<10} {m['ms_per_step']:>8.3f} {m['ratio']:>6.3f}x "
              f"{m['q1']:>6.3f}-{m['q3']:.3f} {m['ranges']:>8.0f} {m['toggled_off']:>11.0f}")
    if a.json:
        write_results(a.json, {"machine": machine_info(torch, cprof), "args": vars(a),
                               "median": med, "runs": runs})


if __name__ == "__main__":
    main()
