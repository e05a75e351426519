#!/usr/bin/env python
"""Trace writing speed and size: cprof's C writer vs torch.profiler's export_chrome_trace.

cprof: records --events ranges (default 1,000,000) in one window, nested two deep
(outer ranges with 4 distinct names, each holding 999 inner ranges with 8 distinct names),
stops the window, then times Snapshot.write() to a new file: plain JSON, gzip level 6 (what
ProfilerContext uses) and gzip level 9 (the level torch's .gz export uses), --repeats times each,
interleaved. Reported: median seconds, events/s, file bytes, bytes/event.

torch: records --torch-events record_function ranges (default 200,000, same nesting and names)
in a torch.profiler.profile(activities=[CPU]) session, then times export_chrome_trace() to
.json (plain) and to .json.gz (torch writes the plain JSON to a temp file, then gzips it with
Python's gzip.open, level 9). Kineto saves a session's trace only once, so every repeat is a new
session. The session exit (torch's event post-processing) is timed separately.

Event counts are the number of entries in the file's traceEvents (each file format loaded once
with json.load; cprof's count is also checked against what its writer reports). Files are
written under a temporary directory and deleted after each measurement.

    python benchmarks/bench_write.py [--events 1000000] [--torch-events 200000] [--repeats 3]
                                     [--json PATH] [--tmpdir DIR]
"""
import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import cprof  # noqa: E402
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

import _common  # noqa: E402

_C = cprof._C
INNER = 999  # inner ranges per outer range: 1000 ranges per outer iteration
OUTER_NAMES = [f"step{i}" for i in range(4)]
INNER_NAMES = ["forward", "backward", "optimizer", "data", "loss", "allreduce", "embed", "attn"]
CPROF_TARGET_EPS = 5e6


def machine_info():
    return _common.machine_info(torch, cprof)


def record_nested(rng, n_events):
    """n_events ranges (a multiple of 1000): n_events/1000 outer ranges of 999 inner each."""
    inner_names = [INNER_NAMES[j % len(INNER_NAMES)] for j in range(INNER)]
    for i in range(n_events // (INNER + 1)):
        with rng(OUTER_NAMES[i % len(OUTER_NAMES)]):
            for name in inner_names:
                with rng(name):
                    pass


def count_events(path):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return len(events), sum(1 for e in events if e.get("ph") == "X")


def fsize(path):
    return os.path.getsize(path)


def bench_cprof(n_events, repeats, tmp):
    _C.set_buffer_cap(max(256 << 20, n_events * 64 * 2))
    _C.start()
    gc.disable()
    t0 = time.perf_counter()
    record_nested(cprof.range, n_events)
    t1 = time.perf_counter()
    gc.enable()
    snap = _C.stop()
    t2 = time.perf_counter()
    if snap.ranges != n_events or snap.dropped:
        raise SystemExit(f"bench_write: cprof recorded {snap.ranges} ranges ({snap.dropped} "
                         f"dropped), expected {n_events}")
    modes = [("plain", 0, ".trace.json"), ("gzip6", 6, ".trace.json.gz"),
             ("gzip9", 9, ".trace.json.gz")]
    runs = {m: [] for m, _, _ in modes}
    file_events = None
    for rep in range(repeats):
        for mode, level, suffix in modes:
            stem = os.path.join(tmp, f"cprof-{mode}-{rep}")
            w0 = time.perf_counter()
            path, events, nbytes, c_seconds, _ = snap.write(stem, suffix, gzip=level)
            wall = time.perf_counter() - w0
            size = fsize(path)
            if mode == "plain" and file_events is None:
                file_events, x_events = count_events(path)
                if file_events != events:
                    raise SystemExit(f"bench_write: cprof writer reported {events} events, the "
                                     f"file holds {file_events}")
            os.unlink(path)
            runs[mode].append({"seconds": wall, "c_seconds": c_seconds, "bytes": size,
                               "writer_events": events})
    snap.close()
    return {
        "ranges": n_events,
        "file_events": file_events,
        "x_events": x_events,
        "record_s": t1 - t0,
        "record_ns_per_range": (t1 - t0) / n_events * 1e9,
        "stop_s": t2 - t1,
        "modes": runs,
    }


def bench_torch(n_events, repeats, tmp):
    runs = {"plain": [], "gzip9": []}
    exits = []
    file_events = x_events = None
    record_s = []
    for rep in range(repeats):
        for mode in ("plain", "gzip9"):
            suffix = ".pt.trace.json" if mode == "plain" else ".pt.trace.json.gz"
            path = os.path.join(tmp, f"torch-{mode}-{rep}{suffix}")
            prof = profile(activities=[ProfilerActivity.CPU])
            prof.__enter__()
            gc.disable()
            t0 = time.perf_counter()
            record_nested(record_function, n_events)
            t1 = time.perf_counter()
            gc.enable()
            prof.__exit__(None, None, None)
            t2 = time.perf_counter()
            prof.export_chrome_trace(path)
            t3 = time.perf_counter()
            size = fsize(path)
            if mode == "plain" and file_events is None:
                file_events, x_events = count_events(path)
            os.unlink(path)
            del prof
            record_s.append(t1 - t0)
            exits.append(t2 - t1)
            runs[mode].append({"seconds": t3 - t2, "bytes": size})
    return {
        "ranges": n_events,
        "file_events": file_events,
        "x_events": x_events,
        "record_s_median": statistics.median(record_s),
        "record_ns_per_range": statistics.median(record_s) / n_events * 1e9,
        "exit_s_median": statistics.median(exits),
        "exit_s": exits,
        "modes": runs,
    }


def summarize(tool, label, res, mode, note):
    runs = res["modes"][mode]
    secs = statistics.median(r["seconds"] for r in runs)
    nbytes = statistics.median(r["bytes"] for r in runs)
    ev = res["file_events"]
    return {
        "tool": tool,
        "label": label,
        "mode": mode,
        "note": note,
        "events": ev,
        "median_s": secs,
        "min_s": min(r["seconds"] for r in runs),
        "max_s": max(r["seconds"] for r in runs),
        "events_per_s": ev / secs,
        "bytes": nbytes,
        "bytes_per_event": nbytes / ev,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="cprof ranges (x1000)")
    ap.add_argument("--torch-events", type=int, default=200_000, help="torch ranges (x1000)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--tmpdir", help="where the traces are written (default: system temp dir)")
    args = ap.parse_args(argv)
    for opt in ("events", "torch_events"):
        v = getattr(args, opt)
        if v <= 0 or v % (INNER + 1):
            ap.error(f"--{opt.replace('_', '-')} must be a positive multiple of {INNER + 1}")

    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cprof-bench-write-", dir=args.tmpdir) as tmp:
        c = bench_cprof(args.events, args.repeats, tmp)
        t = bench_torch(args.torch_events, args.repeats, tmp)
    elapsed = time.perf_counter() - t_start

    rows = [
        summarize("cprof", "cprof Snapshot.write", c, "plain", "gzip=0"),
        summarize("cprof", "cprof Snapshot.write", c, "gzip6", "gzip=6 (ProfilerContext)"),
        summarize("cprof", "cprof Snapshot.write", c, "gzip9", "gzip=9"),
        summarize("torch", "torch export_chrome_trace", t, "plain", ".json"),
        summarize("torch", "torch export_chrome_trace", t, "gzip9", ".json.gz (gzip 9)"),
    ]
    plain_c = rows[0]["events_per_s"]
    plain_t = rows[3]["events_per_s"]

    info = machine_info()
    print(f"bench_write: {info['cpu_model']}, {info['nproc']} cpus, kernel {info['kernel']}, "
          f"Python {info['python']}, torch {info['torch']}, cprof {info['cprof']}")
    print(f"median of {args.repeats} writes each; events = entries in the file's traceEvents")
    print()
    print(f"{'writer':<26} {'mode':<26} {'events':>9} {'median s':>9} {'Mev/s':>7} "
          f"{'MB':>8} {'B/event':>8}")
    print("-" * 99)
    for r in rows:
        print(f"{r['label']:<26} {r['note']:<26} {r['events']:>9} {r['median_s']:>9.3f} "
              f"{r['events_per_s'] / 1e6:>7.2f} {r['bytes'] / 1e6:>8.1f} "
              f"{r['bytes_per_event']:>8.1f}")
    print()
    print(f"plain events/s, cprof / torch: {plain_c / plain_t:.1f}x")
    print(f"recording (ns/range): cprof.range {c['record_ns_per_range']:.0f}, "
          f"torch record_function {t['record_ns_per_range']:.0f}")
    print(f"closing the window: cprof _C.stop() {c['stop_s'] * 1e6:.0f} us for {c['ranges']} "
          f"ranges; torch profile exit {t['exit_s_median']:.2f} s for {t['ranges']} ranges "
          f"(median; before export)")
    verdict = "met" if plain_c >= CPROF_TARGET_EPS else "MISSED"
    print(f"target >= {CPROF_TARGET_EPS / 1e6:.0f}M events/s plain for cprof: "
          f"{plain_c / 1e6:.2f}M ({verdict})")
    print(f"total time {elapsed:.1f} s")

    if args.json:
        out = {
            "benchmark": "bench_write",
            "machine": info,
            "repeats": args.repeats,
            "cprof": c,
            "torch": t,
            "rows": rows,
            "ratio_plain_events_per_s": plain_c / plain_t,
            "target_events_per_s": CPROF_TARGET_EPS,
            "target_met": plain_c >= CPROF_TARGET_EPS,
            "elapsed_s": elapsed,
        }
        _common.write_results(args.json, out)


if __name__ == "__main__":
    main()
