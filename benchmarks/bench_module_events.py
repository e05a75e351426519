#!/usr/bin/env python
"""What the "nn.Module: <path>" python_function events cost a trace (with_stack: one beside each
module range, for TensorBoard's Module view; design decision 90), with torch.profiler's
export of the same options beside.

Workload: the launch-bound step of the CUPTI issue on CPU (16 x (Linear(256, 256) + ReLU) in an
nn.Sequential inside a module, batch 8, torch.no_grad), --steps steps in one window of
cprof.profile(activities=[CPU], with_stack=True, record_shapes=True) (ProfilerContext's
defaults; record_shapes installs the module capture), then export_chrome_trace to .json and to
.json.gz. Variants, interleaved over --rounds rounds (medians reported):

  cprof           the default: module events written
  cprof, off      CPROF_MODULE_EVENTS=0 at export (the same kind of window)
  torch           torch.profiler.profile(activities=[CPU], with_stack=True, record_shapes=True)
                  (its operators and module events; export timed the same way)

Reported: events in traceEvents, plain JSON bytes, .gz bytes, the .gz export's time.

torch's intra-op threads: --threads, 1 by default (set_threads in _common.py).

    python benchmarks/bench_module_events.py [--steps 50] [--rounds 5] [--threads N]
                                             [--json PATH]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

import cprof  # noqa: E402
from _common import (add_threads_arg, launch_step_model, machine_info,  # noqa: E402
                     set_threads, write_results)


def one(kind, model, x, steps, d):
    P = torch.profiler if kind == "torch" else cprof
    p = P.profile(activities=[P.ProfilerActivity.CPU], with_stack=True, record_shapes=True)
    with torch.no_grad():
        p.start()
        for _ in range(steps):
            model(x)
        p.stop()
    if kind == "cprof, off":
        os.environ["CPROF_MODULE_EVENTS"] = "0"
    try:
        plain = os.path.join(d, f"{len(os.listdir(d))}.pt.trace.json")
        p.export_chrome_trace(plain)
        gz = os.path.join(d, f"{len(os.listdir(d))}.pt.trace.json.gz")
        if kind == "torch":  # Kineto saves a session's trace once: a second session for .gz
            p = P.profile(activities=[P.ProfilerActivity.CPU], with_stack=True,
                          record_shapes=True)
            with torch.no_grad():
                p.start()
                for _ in range(steps):
                    model(x)
                p.stop()
        t0 = time.perf_counter()
        p.export_chrome_trace(gz)
        dt = time.perf_counter() - t0
    finally:
        os.environ.pop("CPROF_MODULE_EVENTS", None)
    with open(plain) as f:
        tr = json.load(f)
    evs = tr["traceEvents"] if isinstance(tr, dict) else tr
    twins = sum(1 for e in evs if e.get("cat") == "python_function" and
                str(e.get("name", "")).startswith("nn.Module: "))
    res = {"events": len(evs), "module_events": twins, "json_bytes": os.path.getsize(plain),
           "gz_bytes": os.path.getsize(gz), "gz_write_s": dt}
    os.unlink(plain)
    os.unlink(gz)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=None)
    add_threads_arg(ap)
    a = ap.parse_args()
    set_threads(torch, a.threads)
    print(f"machine: {machine_info(torch, cprof)}")
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    model, x = launch_step_model(torch), torch.randn(8, 256)
    kinds = ["cprof", "cprof, off", "torch"]
    runs = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as d:
        for k in kinds:  # warm-up
            one(k, model, x, 2, d)
        for r in range(a.rounds):
            for k in kinds[r % 3:] + kinds[:r % 3]:
                runs[k].append(one(k, model, x, a.steps, d))
    med = {k: {f: statistics.median(v[f] for v in runs[k]) for f in runs[k][0]} for k in kinds}
    base = med["cprof, off"]
    print(f"{'variant':<12} {'events':>8} {'module ev':>9} {'JSON kB':>9} {'gz kB':>8} "
          f"{'gz export ms':>12}  vs off (JSON, gz, time)")
    for k in kinds:
        m = med[k]
        print(f"{k:<12} {m['events']:>8.0f} {m['module_events']:>9.0f} "
              f"{m['json_bytes'] / 1e3:>9.1f} {m['gz_bytes'] / 1e3:>8.1f} "
              f"{m['gz_write_s'] * 1e3:>12.2f}  {m['json_bytes'] / base['json_bytes']:.3f}x "
              f"{m['gz_bytes'] / base['gz_bytes']:.3f}x {m['gz_write_s'] / base['gz_write_s']:.3f}x")
    if a.json:
        write_results(a.json, {"machine": machine_info(torch, cprof), "args": vars(a),
                               "median": med, "runs": runs})


if __name__ == "__main__":
    main()
