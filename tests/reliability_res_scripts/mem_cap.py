"""Pushes N ranges through ProfilerContext windows with a small buffer cap, in a fresh
process, and prints one JSON line: peak RSS (VmHWM) and RSS before and after each window, push
and write times, the warnings and the trace paths; at the end the RSS after lowering the cap.
Usage: python mem_cap.py N CAP_MB OUTDIR [WINDOWS] [GZIP 0/1]"""
import json
import os
import sys
import time
import warnings

import cprof
import cprof._C as C


def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def main():
    n = int(sys.argv[1])
    cap_mb = float(sys.argv[2])
    outdir = sys.argv[3]
    windows = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    gz = (sys.argv[5] != "0") if len(sys.argv) > 5 else True
    r = cprof.range("reliability/range")
    os.makedirs(outdir, exist_ok=True)
    out = {"n": n, "cap_mb": cap_mb, "gzip": gz, "windows": [],
           "chunk_bytes": C.memory()["chunk_bytes"],
           "hwm_start_kb": status_kb("VmHWM"), "rss_start_kb": status_kb("VmRSS")}
    for i in range(windows):
        w = {"hwm_before_kb": status_kb("VmHWM"), "rss_before_kb": status_kb("VmRSS")}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            with cprof.ProfilerContext(activities=["CPU"], with_stack=False,
                                       record_shapes=False, buffer_size_mb=cap_mb,
                                       output_dir=outdir, gzip=gz, profile_name=f"cap{i}",
                                       verbose=False) as ctx:
                for _ in range(n):
                    with r:
                        pass
                t1 = time.perf_counter()
                w["hwm_in_window_kb"] = status_kb("VmHWM")
                w["store_bytes"] = C.memory()["allocated_bytes"]
            t2 = time.perf_counter()
        w["hwm_after_kb"] = status_kb("VmHWM")
        w["rss_after_kb"] = status_kb("VmRSS")
        w["push_s"] = t1 - t0
        w["write_s"] = t2 - t1
        w["trace"] = str(ctx.trace_path)
        w["trace_bytes"] = os.path.getsize(ctx.trace_path)
        w["warnings"] = [str(c.message) for c in caught if issubclass(c.category, RuntimeWarning)]
        out["windows"].append(w)
    C.set_buffer_cap(1 << 20)  # lowering the cap frees pooled chunks above it
    out["rss_after_lower_cap_kb"] = status_kb("VmRSS")
    out["store_bytes_after_lower_cap"] = C.memory()["allocated_bytes"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
