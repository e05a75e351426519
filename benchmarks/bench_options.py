#!/usr/bin/env python
"""Step-time overhead of each profiler option, cprof side by side with torch.profiler.

Workload (fixed seed, after warm-up): the launch-bound step of the CUPTI issue, 16 x
(Linear(256, 256) + ReLU) in an nn.Sequential inside a module, batch 8, torch.no_grad, on
--device (cpu or cuda).

Configurations (cprof.profile vs torch.profiler.profile with the same option):

  none            no profiler
  base            activities only (CPU, + CUDA on cuda); torch.profiler records its operators
  ops             cprof: base + record_ops=True, torch's operators as torch.profiler records
                  them: cprof.profile's default (torch.profiler has no switch: its column
                  repeats base)
  stack           + with_stack
  modules         + with_modules
  shapes          + record_shapes (cprof: module calls with shapes)
  memory          + profile_memory (cprof: the sampled CPU memory track, and CUDA memory
                  history on cuda; torch: its allocator's [memory] events)
  defaults        ProfilerContext's defaults: with_stack + record_shapes

Method: a configuration opens its profiler around a block of K steps; the block is timed from
after the profiler started to after the K steps (and a torch.cuda.synchronize() on cuda);
opening, closing and exporting are not in the step time. Rounds interleave all
configurations (the order rotates each round); the table gives medians over rounds and, as the
ratio, the median over rounds of each block over the same round's "none" block (paired: a VM's
step time drifts between rounds; the JSON has quartiles and the ratio of medians too). On cuda, torch.profiler may keep CUPTI after its session, so cprof's
configurations all run first (phase 1, with its own "none") and torch's after (phase 2).

torch's intra-op threads: --threads, 1 by default on the CPU (set_threads in _common.py);
recorded in the header and the JSON.

    python benchmarks/bench_options.py [--device cpu|cuda] [--rounds 7] [--steps 50]
                                       [--threads N] [--json P]
"""
import argparse
import gc
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

clock = time.perf_counter

# cprof rows other than "ops" pass record_ops=False (cprof.profile's default records torch's
# operators, as torch.profiler does; ProfilerContext's does not), so each row adds one option
OPTIONS = {
    "base": {"record_ops": False},
    "ops": {"record_ops": True},
    "stack": {"with_stack": True, "record_ops": False},
    "modules": {"with_modules": True, "record_ops": False},
    "shapes": {"record_shapes": True, "record_ops": False},
    "memory": {"profile_memory": True, "record_ops": False},
    "defaults": {"with_stack": True, "record_shapes": True, "record_ops": False},
}


def build(torch, device):
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            layers = []
            for _ in range(16):
                layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
            self.body = torch.nn.Sequential(*layers)

        def forward(self, x):
            return self.body(x)

    net = Net().to(device).eval()
    x = torch.randn(8, 256, device=device)

    def step():
        with torch.no_grad():
            net(x)

    return step


def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def run_block(torch, cprof, kind, option, step, k, device, tmpdir, faults):
    """Seconds the block's k steps took; appends the minor page faults they took to faults
    (first touches of new memory: on a VM whose memory the host has not yet backed, each one
    also costs the host a fault, which would make a profiler's new buffers dearer there)."""
    def steps():
        for _ in range(k):
            step()
        if device == "cuda":
            torch.cuda.synchronize()

    gc.collect()
    gc.disable()
    try:
        if kind == "none":
            f0 = minor_faults()
            t0 = clock()
            steps()
            t1 = clock()
            faults.append(minor_faults() - f0)
            return t1 - t0
        opts = OPTIONS[option]
        if kind == "cprof":
            acts = ["CPU", "CUDA"] if device == "cuda" else ["CPU"]
            prof = cprof.profile(activities=acts, **opts)
        else:
            tp = torch.profiler
            acts = [tp.ProfilerActivity.CPU]
            if device == "cuda":
                acts.append(tp.ProfilerActivity.CUDA)
            opts = {k: v for k, v in opts.items() if k != "record_ops"}
            prof = tp.profile(activities=acts, **opts)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prof.__enter__()
            f0 = minor_faults()
            t0 = clock()
            try:
                steps()
                t1 = clock()
                faults.append(minor_faults() - f0)
            finally:
                prof.__exit__(None, None, None)
            path = os.path.join(tmpdir, "t.json")
            prof.export_chrome_trace(path)
            os.remove(path)
        return t1 - t0
    finally:
        gc.enable()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--json", default=None)
    from _common import add_threads_arg, machine_info, paired_ratios, set_threads
    add_threads_arg(ap)
    a = ap.parse_args(argv)
    import cprof  # before torch: cprof records torch's operators only when imported first
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench_options: no CUDA GPU here; run with --device cpu")
        return 0
    set_threads(torch, a.threads, a.device)
    step = build(torch, a.device)
    for _ in range(20):
        step()
    tmpdir = tempfile.mkdtemp(prefix="cprof_bench_opts_")
    phases = [[("none", None)] + [("cprof", o) for o in OPTIONS],
              [("none", None)] + [("torch", o) for o in OPTIONS]]
    results = {}
    for pi, phase in enumerate(phases):
        times = {c: [] for c in phase}
        faults = {c: [] for c in phase}
        for r in range(a.rounds):
            order = phase[r % len(phase):] + phase[: r % len(phase)]
            for kind, opt in order:
                s = run_block(torch, cprof, kind, opt, step, a.steps, a.device, tmpdir,
                              faults[(kind, opt)])
                times[(kind, opt)].append(s / a.steps * 1e3)
        base = statistics.median(times[("none", None)])
        for (kind, opt), v in times.items():
            key = f"{kind}:{opt}" if opt else f"none(phase{pi + 1})"
            # paired: each round's block over the same round's no-profiler block
            ratio, q1, q3 = paired_ratios(v, times[("none", None)])
            results[key] = {"ms_per_step": statistics.median(v),
                            "ratio": ratio, "ratio_q1": q1, "ratio_q3": q3,
                            "ratio_of_medians": statistics.median(v) / base,
                            "minor_faults_per_step":
                                statistics.median(faults[(kind, opt)]) / a.steps}
    info = machine_info(torch, cprof)
    info["device"] = a.device
    if a.device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    print(f"machine: {info}")
    print(f"{a.rounds} rounds x {a.steps} steps, medians; ratio = median over rounds of the "
          "block / the same round's no-profiler block (same phase)")
    print("flt/step: minor page faults per step in the timed block (median over rounds)")
    print(f"{'option':<10} {'none ms':>9} {'cprof ms':>9} {'cprof x':>8} {'flt/step':>8} "
          f"{'torch ms':>9} {'torch x':>8} {'flt/step':>8}")
    n1, n2 = results["none(phase1)"], results["none(phase2)"]
    for o in OPTIONS:
        c, t = results[f"cprof:{o}"], results[f"torch:{o}"]
        print(f"{o:<10} {n1['ms_per_step']:>9.3f} {c['ms_per_step']:>9.3f} {c['ratio']:>7.2f}x "
              f"{c['minor_faults_per_step']:>8.2f} {t['ms_per_step']:>9.3f} {t['ratio']:>7.2f}x "
              f"{t['minor_faults_per_step']:>8.2f}   (torch phase none "
              f"{n2['ms_per_step']:.3f} ms, {n2['minor_faults_per_step']:.2f} flt/step)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": info, "results": results, "rounds": a.rounds,
                       "steps": a.steps}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
