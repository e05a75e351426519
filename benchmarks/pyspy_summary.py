#!/usr/bin/env python
"""Summarises a `py-spy record --native -f raw` profile of benchmarks/perf_step.py: where the
samples taken inside the timed step go, by leaf function and by library / source file. The GPU
machine has no `perf`; py-spy is one static binary (scripts/fetch_build_deps.sh carries its
wheel), and its native frames show CPython, cprof's extension, torch, CUPTI and the driver.

    py-spy record --native -r 499 -f raw -o P.txt -- python benchmarks/perf_step.py ...
    python benchmarks/pyspy_summary.py P.txt [--top 30] [--within 'step (perf_step.py']

Only samples whose stack holds a frame containing --within count (so imports and start-up do
not); the first line says how many that was of all samples."""
import argparse
import collections
import re
import sys

_WHERE = re.compile(r"^(.*) \(([^()]*)\)$")


def _split(frame):
    m = _WHERE.match(frame)
    if not m:
        return frame, "?"
    name, where = m.group(1), m.group(2)
    # python frames and native frames with debug info carry "file:line": group by the file
    return name, re.sub(r":\d+$", "", where)


def summarise(lines, within, top):
    leaf, lib, total, kept = collections.Counter(), collections.Counter(), 0, 0
    for line in lines:
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if not stack or not n.isdigit():
            continue
        n = int(n)
        total += n
        frames = stack.split(";")
        if within and not any(within in f for f in frames):
            continue
        kept += n
        name, where = _split(frames[-1])
        leaf[f"{name} ({where})"] += n
        lib[where] += n
    out = [f"samples in the step: {kept} of {total}"]
    if kept:
        out.append("by library or file (self):")
        out += [f"  {100.0 * v / kept:5.1f}%  {k}" for k, v in lib.most_common(top)]
        out.append("by function (self):")
        out += [f"  {100.0 * v / kept:5.1f}%  {k}" for k, v in leaf.most_common(top)]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw", help="py-spy's -f raw output (collapsed stacks)")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--within", default="step (perf_step.py",
                    help="count only samples with a frame containing this ('' = all)")
    a = ap.parse_args(argv)
    with open(a.raw, errors="replace") as f:
        print("\n".join(summarise(f, a.within, a.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
