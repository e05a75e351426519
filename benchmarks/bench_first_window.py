"""Self time that cprof's own window start leaves on the user's frame (with_stack).

The frame holding `with cprof.profile(with_stack=True)` is recorded as running from the
window's start; any cprof work after that start shows as that frame's self time (a fake hot
spot in key_averages and flame graphs). The first window of a process used to do ~5 ms of
one-time work there (attaching to libtorch, loading cprof._torch_ops, imports); it is now
done before the window opens (cprof._glue.prewarm). Each round is a fresh process: window 1
and window 2 of the same function, the user frame's self time in each.

    python benchmarks/bench_first_window.py [--rounds 7] [--no-prewarm]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, torch, cprof
if "--no-prewarm" in sys.argv:  # A/B: the one-time work inside the first window, as before
    cprof._glue.prewarm = lambda *a, **k: None
def train():
    with cprof.profile(activities=["CPU"], with_stack=True, record_shapes=True) as p:
        x = torch.ones(10)
        for _ in range(3):
            x = x + 1
    return [r.self_cpu_time_total for r in p.key_averages() if r.key.endswith(": train")][0]
print(json.dumps([train(), train()]))
"""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-prewarm", action="store_true",
                    help="A/B: leave the one-time work inside the first window (as before)")
    args = ap.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    first, second = [], []
    for _ in range(args.rounds):
        cmd = [sys.executable, "-c", CHILD] + (["--no-prewarm"] if args.no_prewarm else [])
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300,
                           check=True)
        a, b = json.loads(r.stdout.strip().splitlines()[-1])
        first.append(a)
        second.append(b)
    import torch
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, {args.rounds} processes"
          + (", prewarm off (A/B)" if args.no_prewarm else ""))
    print(f"user frame self time, window 1: median {statistics.median(first):.1f} us "
          f"(min {min(first):.1f}, max {max(first):.1f})")
    print(f"user frame self time, window 2: median {statistics.median(second):.1f} us "
          f"(min {min(second):.1f}, max {max(second):.1f})")


if __name__ == "__main__":
    main()
