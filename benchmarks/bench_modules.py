#!/usr/bin/env python
"""Overhead per nn.Module call: cprof's module capture (both modes) vs torch.profiler's
with_modules, same run.

Models (CPU, batch 1): `--modules` tiny modules in one nn.Sequential, so a forward is that many
module calls plus the Sequential itself:

  identity   nn.Identity()          (no aten op: the module machinery and the hooks only)
  linear     nn.Linear(8, 8)        (a few aten ops per call)

Variants (each timed as `--n` forwards; us/forward = elapsed / n):

  unprofiled                          no hooks, no session
  no-op Python hooks                  global pre + post (always_call) hooks that do nothing:
                                      what torch's hooked Module._call_impl costs by itself
  cprof call                          _modules.install(mode="call") (the default) in an open
                                      cprof window: nn.Module.__call__ replaced by the C wrapper
  cprof call + shapes                 _modules.install(mode="call", record_shapes=True): tensors
                                      read through torch's C++ tensors (cprof._torch_ops,
                                      decision 94) where it is built
  cprof call + shapes read from Python  the same with CPROF_FAST_SHAPES=0 (py_hooks.c reads
                                      `.shape` / `.dtype`)
  cprof hooks                         _modules.install(mode="hooks"): the C hooks as torch's
                                      global forward hooks
  cprof hooks + shapes                _modules.install(mode="hooks", record_shapes=True)
  torch modules                       torch.profiler.profile(activities=[CPU], with_stack=True,
                                      with_modules=True)
  torch modules + record_shapes       ... and record_shapes=True

"ns/call added" = (variant - unprofiled) / module calls per forward: what profiling adds to one
module call; "x cprof call" = that, divided by cprof call's. torch 2.13 writes module events
("nn.Module: Linear_0") only from its Python tracer, so with_modules needs with_stack=True
(with_modules alone records no module at all); torch also records the aten ops the modules
run and every Python call, while cprof records only the module ranges here.

Rounds are interleaved (every round runs every variant once, order rotated); the table gives
medians over rounds. Opening/closing the window or session and writing are outside the timed
region; the garbage collector is off during the timed loops. Each cprof window is checked to
hold exactly n x (modules + 1) ranges.

    python benchmarks/bench_modules.py [--rounds 7] [--modules 200] [--n 200] [--json PATH]
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
import torch  # noqa: E402
from cprof import _modules  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.modules import module as torch_module  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import _common  # noqa: E402

_C = cprof._C
clock = time.perf_counter_ns


def make_models(k):
    return {
        "identity": nn.Sequential(*[nn.Identity() for _ in range(k)]),
        "linear": nn.Sequential(*[nn.Linear(8, 8) for _ in range(k)]),
    }


def _timed(model, x, n):
    gc.disable()
    try:
        with torch.no_grad():
            t0 = clock()
            for _ in range(n):
                model(x)
            return clock() - t0
    finally:
        gc.enable()


def unprofiled(model, x, n, calls):
    return _timed(model, x, n)


def cprof_capture(mode, record_shapes, fast_shapes=True):
    def run(model, x, n, calls):
        _C.set_buffer_cap(max(256 << 20, n * calls * 64 * 2))
        _C.start()
        try:
            os.environ["CPROF_FAST_SHAPES"] = "1" if fast_shapes else "0"
            handle = _modules.install(record_shapes=record_shapes, mode=mode)
            try:
                dt = _timed(model, x, n)
            finally:
                handle.remove()
        finally:
            snap = _C.stop()
        got, dropped = snap.ranges, snap.dropped
        snap.close()
        if got != n * calls or dropped:
            raise SystemExit(f"bench_modules: window recorded {got} ranges ({dropped} dropped), "
                             f"expected {n * calls}")
        return dt

    return run


def noop_hooks(model, x, n, calls):
    pre = torch_module.register_module_forward_pre_hook(lambda module, args: None)
    post = torch_module.register_module_forward_hook(lambda module, args, out: None,
                                                     always_call=True)
    try:
        return _timed(model, x, n)
    finally:
        pre.remove()
        post.remove()


def torch_session(record_shapes):
    def run(model, x, n, calls):
        with profile(activities=[ProfilerActivity.CPU], with_stack=True, with_modules=True,
                     record_shapes=record_shapes):
            dt = _timed(model, x, n)
        return dt  # the session's exit (event processing) is outside the timed region

    return run


VARIANTS = [
    ("none", "unprofiled", unprofiled),
    ("noop", "no-op Python hooks", noop_hooks),
    ("call", "cprof call", cprof_capture("call", False)),
    ("call_shapes", "cprof call + shapes", cprof_capture("call", True)),
    ("call_shapes_py", "cprof call + shapes read from Python", cprof_capture("call", True, False)),
    ("hooks", "cprof hooks", cprof_capture("hooks", False)),
    ("hooks_shapes", "cprof hooks + shapes", cprof_capture("hooks", True)),
    ("torch", "torch modules", torch_session(False)),
    ("torch_shapes", "torch modules + record_shapes", torch_session(True)),
]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--modules", type=int, default=200, help="modules in the Sequential")
    ap.add_argument("--n", type=int, default=200, help="forwards per variant and round")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    torch.set_num_threads(1)
    models = make_models(args.modules)
    x = torch.randn(1, 8)
    calls = args.modules + 1  # the Sequential is a module call too
    for model in models.values():  # warm-up: imports, first sessions, caches
        for _, _, run in VARIANTS:
            run(model, x, 5, calls)

    samples = {m: {key: [] for key, *_ in VARIANTS} for m in models}
    k = len(VARIANTS)
    for r in range(args.rounds):
        order = VARIANTS[r % k:] + VARIANTS[: r % k]
        for mname, model in models.items():
            for key, _, run in order:
                samples[mname][key].append(run(model, x, args.n, calls) / args.n)

    results = {}
    for mname in models:
        med = {key: statistics.median(v) for key, v in samples[mname].items()}
        base = med["none"]
        results[mname] = {
            key: {
                "label": label,
                "median_ns_per_forward": med[key],
                "min_ns_per_forward": min(samples[mname][key]),
                "max_ns_per_forward": max(samples[mname][key]),
                "added_ns_per_call": (med[key] - base) / calls,
                "samples_ns_per_forward": samples[mname][key],
            }
            for key, label, _ in VARIANTS
        }
    elapsed = time.perf_counter() - t_start

    info = _common.machine_info(torch, cprof)
    print(f"bench_modules: {info['cpu_model']}, {info['nproc']} cpus, kernel {info['kernel']}, "
          f"Python {info['python']}, torch {info['torch']}, cprof {info['cprof']}")
    print(f"{args.rounds} interleaved rounds; {args.n} forwards of nn.Sequential of "
          f"{args.modules} modules ({calls} module calls per forward), 1 torch thread; medians")
    print()
    print(f"{'model':<9} {'variant':<36} {'us/forward':>11} {'min':>9} {'max':>9} "
          f"{'ns/call added':>14} {'x cprof call':>13}")
    print("-" * 106)
    for mname, res in results.items():
        ref = res["call"]["added_ns_per_call"]
        for key, v in res.items():
            ratio = ("" if key == "none" or ref <= 0
                     else f"{v['added_ns_per_call'] / ref:.1f}")
            print(f"{mname:<9} {v['label']:<36} {v['median_ns_per_forward'] / 1e3:>11.1f} "
                  f"{v['min_ns_per_forward'] / 1e3:>9.1f} {v['max_ns_per_forward'] / 1e3:>9.1f} "
                  f"{v['added_ns_per_call']:>14.0f} {ratio:>13}")
    print()
    print(f"total time {elapsed:.1f} s")

    if args.json:
        out = {
            "benchmark": "bench_modules",
            "machine": info,
            "rounds": args.rounds,
            "modules": args.modules,
            "n": args.n,
            "results": results,
            "elapsed_s": elapsed,
        }
        _common.write_results(args.json, out)


if __name__ == "__main__":
    main()
