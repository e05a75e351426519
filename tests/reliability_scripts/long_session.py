"""Many consecutive windows in one process, for tests/test_reliability_process.py.

    python long_session.py N OUTDIR [same-name] [torch] [cuda]

Runs N ProfilerContext windows (CPU, with_stack and record_shapes as by default, 5 ranges
each, gzip off) and prints JSON: RSS (from /proc/self/statm) after window 100 and after the
last, the open file descriptors before the first window and after the last, the time per
window. "same-name" gives every window the same profile_name (files -1, -2, ...); "torch"
imports torch first and calls a module in each window (the module capture then installs);
"cuda" (GPU machine) collects CUDA too and launches 3 kernels per window, and adds what the
traces of windows 1, 100 and N say: kernels, CUPTI buffers used, records dropped."""
import gc
import json
import os
import sys
import time

import cprof

N, OUT = int(sys.argv[1]), sys.argv[2]
SAME = "same-name" in sys.argv[3:]
TORCH = "torch" in sys.argv[3:]
CUDA = "cuda" in sys.argv[3:]
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def fds():
    return len(os.listdir("/proc/self/fd"))


model = None
if TORCH:
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    x = torch.ones(1, 4)


xg = None
if CUDA:
    import torch
    xg = torch.zeros(1 << 12, device="cuda")
paths = {}


def window(i):
    name = "w" if SAME else f"w{i:05d}"
    with cprof.ProfilerContext(output_dir=OUT, profile_name=name,
                               activities=["CPU", "CUDA"] if CUDA else ["CPU"],
                               gzip=False, verbose=False) as ctx:
        for j in range(5):
            with cprof.range(f"r{j}"):
                pass
        if model is not None:
            model(x)
        if xg is not None:
            for _ in range(3):
                xg.add_(1.0)
            torch.cuda.synchronize()
    if i in (0, 99, N - 1):
        paths[i] = ctx.trace_path


window(-1)  # warm-up: imports, the output directory, first-use allocations
gc.collect()
fd0 = fds()
rss_samples = []
times = []
for i in range(N):
    t = time.perf_counter()
    window(i)
    times.append(time.perf_counter() - t)
    if i in (99, 199) or i == N - 1:
        rss_samples.append((i + 1, rss()))
gc.collect()
fd1 = fds()
gpu = []
for i, path in sorted(paths.items()) if CUDA else ():
    with open(path) as f:
        meta = json.load(f)["cprof"]
    g = meta.get("gpu", {})
    gpu.append({"window": i + 1, "kernels": g.get("records", {}).get("kernel"),
                "buffers": g.get("buffers"), "dropped": meta.get("dropped")})
first, last = times[:100], times[-100:]
times.sort()
print(json.dumps({
    "windows": N, "rss": rss_samples, "fd_before": fd0, "fd_after": fd1,
    "files": len(os.listdir(OUT)),
    "ms_mean": 1000 * sum(times) / N, "ms_median": 1000 * times[N // 2],
    "ms_p99": 1000 * times[int(N * 0.99) - 1],
    "ms_first100": 1000 * sum(first) / len(first), "ms_last100": 1000 * sum(last) / len(last),
    "total_s": sum(times), "gpu": gpu,
}))
