"""Self time that with_stack charges to the user's frame holding the `with` (decision 168).

A window's own start and stop work that runs while the Python tracer is on is recorded as
self time of the frame holding `with cprof.profile(with_stack=True)` (torch.profiler shows its
own start as `torch/profiler/...` frames instead). Around one forward pass of a small model that
frame can become the top `self_cpu_time_total` row. This measures, per window, the self time of
that frame (a function named `holder`), the window's total self time, and what share of it the
holder takes; the first window of the process is reported apart (type caches, imports).

    python benchmarks/bench_holder_self.py [--windows 40] [--json PATH]

Compare two checkouts by running the script from each (it imports cprof from the repository
root it lives in, unless PYTHONPATH says otherwise; `cprof_file` in the JSON names it)."""
import argparse
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import cprof  # noqa: E402
from _common import add_threads_arg, machine_info, set_threads, write_results  # noqa: E402


def holder(model, x):
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], with_stack=True) as prof:
        model(x)
    return prof


def one(model, x):
    prof = holder(model, x)
    ka = prof.key_averages()
    total = ka.self_cpu_time_total
    mine = sum(e.self_cpu_time_total for e in ka if e.key.endswith("holder"))
    return mine, total


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=40)
    ap.add_argument("--json")
    add_threads_arg(ap)
    args = ap.parse_args()
    set_threads(torch, args.threads)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU())
                                  for _ in range(8)])
    x = torch.randn(4, 64)
    with torch.no_grad():
        model(x)
        first = one(model, x)
        rest = [one(model, x) for _ in range(args.windows)]
    med_mine = statistics.median(m for m, _ in rest)
    med_total = statistics.median(t for _, t in rest)
    share = statistics.median(m / t for m, t in rest if t)
    print(f"cprof: {cprof.__file__}")
    print(f"first window: holder self {first[0]:.1f} us of {first[1]:.1f} us")
    print(f"next {args.windows} windows (median): holder self {med_mine:.1f} us of "
          f"{med_total:.1f} us ({100 * share:.1f}%)")
    if args.json:
        write_results(args.json, {"machine": machine_info(torch, cprof),
                                  "first": first, "windows": rest,
                                  "median_holder_us": med_mine, "median_total_us": med_total,
                                  "median_share": share})


if __name__ == "__main__":
    main()
