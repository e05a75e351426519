#!/usr/bin/env python
"""Runs the launch-bound step of the CUPTI issue (16 x (Linear(256, 256) + ReLU), batch 8,
no_grad) for a fixed time under one profiler configuration, to be sampled by `perf record`: where
does a configuration's per-step cost go on this machine (CPython, cprof, the CUDA driver,
CUPTI, the clock)?

    perf record -g -o P python benchmarks/perf_step.py --config defaults --seconds 5
    perf report -i P --no-children --sort dso,symbol

Configurations: none, gpu (cprof GPU-only), defaults (ProfilerContext's defaults: CPU + GPU +
with_stack + record_shapes), stack, stack_noc (with_stack without C calls), shapes, modules.
Prints steps per second. --device cpu runs the same step on the CPU (no CUDA needed), with
torch's intra-op threads pinned to --threads (1 by default there)."""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CONFIGS = {
    "none": None,
    "gpu": {"activities": ["GPU"]},
    "defaults": {"with_stack": True, "record_shapes": True},
    "stack": {"with_stack": True},
    "stack_noc": {"with_stack": True, "c_calls": False},
    "shapes": {"record_shapes": True},
    "modules": {"with_modules": True},
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=CONFIGS, default="defaults")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    from _common import add_threads_arg, import_torch, set_threads
    add_threads_arg(ap)
    a = ap.parse_args(argv)
    import cprof
    torch = import_torch("perf_step" + (" (or use --device cpu)" if a.device == "cuda" else ""),
                         cuda=a.device == "cuda")
    if torch is None:
        return 0
    threads = set_threads(torch, a.threads, a.device)
    layers = []
    for _ in range(16):
        layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(a.device).eval()
    x = torch.randn(8, 256, device=a.device)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)

    def step():
        with torch.no_grad():
            model(x)

    for _ in range(50):
        step()
    sync()
    kw = CONFIGS[a.config]
    prof = None
    if kw is not None:
        kw = dict(kw)
        acts = kw.pop("activities", ["CPU", "GPU"] if a.device == "cuda" else ["CPU"])
        # a schedule-less window; a large buffer so that nothing is dropped over the run
        kw.setdefault("record_ops", False)  # one option at a time (ops: CONFIGS says so)
        prof = cprof.profile(activities=acts, buffer_size_mb=2048, **kw)
        prof.start()
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < a.seconds:
        for _ in range(20):
            step()
        n += 20
        sync()
    dt = time.perf_counter() - t0
    if prof is not None:
        prof.stop()
    print(f"perf_step: {a.config} on {a.device} ({threads} torch threads): {n / dt:.1f} steps/s, "
          f"{dt / n * 1e6:.1f} us/step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
