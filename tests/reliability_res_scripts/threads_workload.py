"""Threads that start and end inside cprof windows, for a race detector (Helgrind: see
scripts/reliability_helgrind.sh). Self-checking; exits 1 on a wrong result.
Scenarios: threads that exit before stop, threads inside a range at stop that record into the
next window, short-lived threads, and pushes racing windows being opened and closed.
Usage: python threads_workload.py OUTDIR [SHORT_THREADS]"""
import json
import os
import sys
import threading
import warnings

import cprof
import cprof._C as C


def ctx(outdir, name):
    return cprof.ProfilerContext(activities=["CPU"], with_stack=False, record_shapes=False,
                                 output_dir=outdir, profile_name=name, gzip=False,
                                 verbose=False, buffer_size_mb=16)


def fill(n, name):
    r = cprof.range(name)
    for _ in range(n):
        with r:
            pass


def load(path):
    with open(path) as f:
        t = json.load(f)
    return [e for e in t["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"], t


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def exit_inside(outdir):
    with ctx(outdir, "exit_inside") as c:
        ts = [threading.Thread(target=fill, args=(20, f"exit/{i}")) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    evs, _ = load(c.trace_path)
    check(len(evs) == 80, f"exit_inside: {len(evs)} ranges")


def running_at_stop(outdir):
    k = 3
    started, done = threading.Barrier(k + 1), threading.Barrier(k + 1)
    stopped, reopened = threading.Event(), threading.Event()

    def runner(i):
        with cprof.range("outer"):
            fill(5, "before")
            started.wait()
            stopped.wait()
        reopened.wait()
        fill(3, "after")
        done.wait()

    ts = [threading.Thread(target=runner, args=(i,)) for i in range(k)]
    with ctx(outdir, "stop1") as c1:
        for t in ts:
            t.start()
        started.wait()
    stopped.set()
    with ctx(outdir, "stop2") as c2:
        reopened.set()
        done.wait()
    for t in ts:
        t.join()
    e1, t1 = load(c1.trace_path)
    e2, _ = load(c2.trace_path)
    check(t1["cprof"]["counts"]["cpu_ranges_truncated"] == k, "running_at_stop: truncated")
    check(len(e1) == k * 6 and len(e2) == k * 3, f"running_at_stop: {len(e1)}, {len(e2)}")


def short_lived(outdir, n):
    with ctx(outdir, "short") as c:
        for base in range(0, n, 4):
            ts = [threading.Thread(target=fill, args=(3, "short")) for _ in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
    evs, t = load(c.trace_path)
    check(len(evs) == 3 * n and t["cprof"]["counts"]["threads"] == n, "short_lived")


def racing_windows(outdir):
    """Threads push without pause while the main thread opens and closes windows."""
    stop = threading.Event()

    def pusher():
        r = cprof.range("race")
        while not stop.is_set():
            with r:
                pass

    ts = [threading.Thread(target=pusher) for _ in range(3)]
    for t in ts:
        t.start()
    total = 0
    for i in range(4):
        C.start()
        fill(50, "main")
        snap = C.stop()
        total += snap.ranges
        snap.close()
    stop.set()
    for t in ts:
        t.join()
    check(total >= 200, "racing_windows")


def main():
    outdir = sys.argv[1]
    short = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    os.makedirs(outdir, exist_ok=True)
    warnings.simplefilter("ignore")
    exit_inside(outdir)
    running_at_stop(outdir)
    short_lived(outdir, short)
    racing_windows(outdir)
    print("threads_workload: ok", flush=True)


if __name__ == "__main__":
    main()
