#!/usr/bin/env python
"""What profile_memory's CPU memory track costs: CPU time per sample of the sampler thread
(csrc/mem_sampler.c: one pread of /proc/self/statm and one mallinfo2), so its load at the
default 1 ms interval is cost / 1 ms of one core, taken from the program's cores.

Method: torch imported and its intra-op threads started (their malloc arenas are what
mallinfo2 walks), N MiB of live tensors; the main thread sleeps while the sampler runs at
--interval-us for --seconds; process CPU time over that span / samples taken. Rounds
interleave with an idle span of the same length (no sampler), whose CPU time is subtracted.

    python benchmarks/bench_memory.py [--rounds 7] [--seconds 1] [--interval-us 100]
"""
import argparse
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--interval-us", type=float, default=100.0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    import cprof
    import torch
    from cprof import _C
    from _common import machine_info, write_results

    live = [torch.randn(1 << 18) for _ in range(64)]  # 64 MiB in 64 tensors
    torch.mm(torch.randn(256, 256), torch.randn(256, 256))  # start the intra-op pool
    per_sample, idle_cpu = [], []
    for _ in range(a.rounds):
        c0 = time.process_time()
        time.sleep(a.seconds)
        idle = time.process_time() - c0
        c0 = time.process_time()
        _C.mem_sampler_start(a.interval_us, 1 << 20)
        time.sleep(a.seconds)
        _, info = _C.mem_sampler_stop()
        busy = time.process_time() - c0
        idle_cpu.append(idle)
        per_sample.append(max(busy - idle, 0.0) / info["samples"] * 1e9)
    med = statistics.median(per_sample)
    out = {"machine": machine_info(torch, cprof), "ns_per_sample": per_sample,
           "median_ns_per_sample": med, "interval_us": a.interval_us,
           "threads": torch.get_num_threads(), "live_tensors_mib": 64}
    print(f"machine: {out['machine']}")
    print(f"{a.rounds} rounds x {a.seconds} s at {a.interval_us} us; torch threads "
          f"{torch.get_num_threads()}, 64 MiB live")
    print(f"sampler CPU per sample: median {med:,.0f} ns (rounds: "
          f"{', '.join(f'{x:,.0f}' for x in per_sample)})")
    print(f"at the default 1 ms interval: {med / 1e6 * 100:.2f}% of one core")
    del live
    if a.json:
        write_results(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
