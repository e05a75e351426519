#!/usr/bin/env python
"""Memory kept for good by distinct names: the RSS a process keeps after windows that
recorded many distinct range names (one window, N names made beforehand) and after a
schedule recorded many ProfilerStep#N steps. Each measurement in its own process.

    python benchmarks/bench_names_memory.py [--names 1000000] [--steps 100000]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NAMES = """
import gc, json, cprof
from cprof import _C
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
names = [f"name {i:034d}" for i in range({n})]  # 40 bytes each
r0 = rss()
_C.set_buffer_cap(1 << 20)
_C.start()
for name in names:
    with cprof.range(name):
        pass
_C.stop().close()
gc.collect()
print(json.dumps(rss() - r0))
"""

STEPS = """
import gc, json, warnings, cprof
warnings.simplefilter("ignore")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
r0 = rss()
with cprof.profile(activities=["CPU"],
                   schedule=cprof.schedule(wait=0, warmup=1, active=1, repeat=0)) as p:
    for _ in range({n}):
        p.step()
del p
gc.collect()
print(json.dumps(rss() - r0))
"""


def run(code):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", type=int, default=1000000)
    ap.add_argument("--steps", type=int, default=100000)
    a = ap.parse_args()
    names = run(NAMES.replace("{n}", str(a.names)))
    steps = run(STEPS.replace("{n}", str(a.steps)))
    print(f"{a.names:,} distinct 40-byte range names: +{names:.1f} MiB RSS kept")
    print(f"{a.steps:,} schedule steps ({a.steps // 2:,} recorded): +{steps:.1f} MiB RSS kept")


if __name__ == "__main__":
    main()
