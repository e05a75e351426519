"""Helpers shared by the benchmarks."""
import collections
import json
import os
import platform
import statistics


def cpu_model():
    """The CPU's model name from /proc/cpuinfo (platform.processor() elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def import_torch(who, cuda=False):
    """torch, or None after one line saying why `who` measures nothing: torch is not installed
    (the benchmarks need it; CI's 3.10 / 3.12 jobs have none), or, with cuda, no CUDA GPU is
    visible. The caller then exits 0, as without a GPU: nothing measured, no JSON written."""
    try:
        import torch
    except ImportError as exc:
        print(f"{who}: torch is not importable ({exc}); install torch to run it. "
              "Nothing measured.")
        return None
    if cuda and not torch.cuda.is_available():
        print(f"{who}: no CUDA GPU here (torch.cuda.is_available() is False); it needs one. "
              "Nothing measured.")
        return None
    return torch


def machine_info(torch, cprof):
    """CPU model, cores, kernel, versions, torch's intra-op threads and the cprof package
    measured (an editable install elsewhere can shadow the checkout), for the results table.
    torch may be a stand-in with only __version__ (a Python without torch): threads None."""
    threads = getattr(torch, "get_num_threads", None)
    return {
        "cpu_model": cpu_model(),
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": threads() if threads else None,
        "cprof": cprof.__version__,
        "cprof_file": cprof.__file__,
        "loadavg": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def add_threads_arg(ap):
    """--threads N: torch's intra-op threads for a step benchmark (see set_threads)."""
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads (torch.set_num_threads); default 1 on the "
                         "CPU, torch's own default on cuda")


def set_threads(torch, threads, device="cpu"):
    """Pins torch's intra-op threads and returns the number in use. Default (threads None):
    1 on the CPU, where torch's OpenMP workers wait at barriers, so a step's time
    collapses whenever a neighbour takes one of a small VM's cores (the launch-bound step on
    the 2-core dev VM with the other core busy: 1,266 us with 2 threads, 521 us with 1; see
    README.md); on cuda torch's default stays (the host side only launches)."""
    if threads is None and device == "cpu":
        threads = 1
    if threads is not None:
        if threads < 1:
            raise SystemExit(f"--threads {threads}: give 1 or more")
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def paired_ratios(profiled, baseline):
    """Median, first and third quartile of profiled[i] / baseline[i]: each round's block over
    the no-profiler block of the same round (a VM's step time drifts between rounds, so blocks
    are compared with their own round, not with medians over the run)."""
    r = sorted(p / b for p, b in zip(profiled, baseline))
    q = len(r) // 4
    return statistics.median(r), r[q], r[-1 - q]


def trace_content(path, k=1):
    """What an exported trace holds, per step of k: the events (not metadata, not flow
    arrows), those with input shapes, and the categories (a window's own span counts 1 / k)."""
    with open(path) as f:
        tr = json.load(f)
    evs = tr["traceEvents"] if isinstance(tr, dict) else tr
    cats = collections.Counter()
    shaped = 0
    for e in evs:
        if e.get("ph") in ("M", "s", "f", "t"):
            continue
        cats[e.get("cat", "ph " + str(e.get("ph")))] += 1
        if "Input Dims" in (e.get("args") or {}):
            shaped += 1
    return {"events_per_step": sum(cats.values()) / k, "shaped_per_step": shaped / k,
            "by_cat_per_step": {c: n / k for c, n in cats.most_common()}}


def write_results(path, out):
    """Writes a benchmark's results (machine, versions, samples) as JSON and says where."""
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print(f"results written to {path}")


def launch_step_model(torch):
    """The launch-bound step of the CUPTI issue, as a module: 16 x (Linear(256, 256) + ReLU)
    in an nn.Sequential (`body`) inside it; feed it torch.randn(8, 256)."""
    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(*[m for _ in range(16) for m in
                                              (torch.nn.Linear(256, 256), torch.nn.ReLU())])

        def forward(self, x):
            return self.body(x)

    return Step()
