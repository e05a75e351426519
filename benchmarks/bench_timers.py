"""Cost of one bucket-timer region of the run/step Profiler, measured inside a step.

- cpu_bucket_timer (engine domain, host clock), in a step with engine_profiling on
- a disabled timer (domain off), and a timer outside any step
- with a GPU: cuda_bucket_timer (pooled CUDA events, batch resolution at step end) side by
  side with the seed's way: two new torch.cuda.Event(enable_timing=True) per region, recorded,
  resolved in Python after a sync (the issue quotes 63.9 us per region on an H100 host), and
  the driver's floor: two bare cuEventRecord calls from C per region.
  Each twice: empty regions, and regions around one small kernel (x.add_(1) on 256 floats)
  whose cost is given over the same kernels without a timer. Adjacent cprof regions share
  their boundary event (csrc/cuda_timers.c); "sharing off" (CPROF_TIMER_SHARE_NS=0) is two
  records per region. Empty regions shorter than the window share even their own start and
  end: read the kernel rows for what a real region costs.

Interleaved rounds; medians of ns per region. `--json PATH` writes the results."""
import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cprof  # noqa: E402
from _common import write_results  # noqa: E402


def per_region(fn, n):
    """ns per region: fn(n) runs n regions; a variant that times itself returns its total ns."""
    t0 = time.perf_counter_ns()
    own = fn(n)
    return (own if own is not None else time.perf_counter_ns() - t0) / n


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=20000, help="regions per step")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    torch = None
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    gpu = torch is not None and torch.cuda.is_available()
    if gpu:
        torch.ones(1, device="cuda")  # initialise CUDA
    out = tempfile.mkdtemp()
    prof = cprof.Profiler(cprof.ProfilerConfig(output_dir=out, run_name="bench", warmup_runs=0,
                                               model_profiling=True, engine_profiling=True,
                                               print_per_run=False))
    prof.begin_run(label="bench")

    def in_step(body):
        def run(n):
            with prof.step_timing_ctx():
                body(n)
        return run

    def cpu_timer(n):
        for _ in range(n):
            with cprof.cpu_bucket_timer("engine.sampling"):
                pass

    def cuda_timer(n):
        for _ in range(n):
            with cprof.cuda_bucket_timer("attn.rope"):
                pass

    def loop(n):
        for _ in range(n):
            pass

    variants = {
        "empty loop": loop,
        "cpu_bucket_timer in step": in_step(cpu_timer),
        "timer outside a step (gated)": cuda_timer,
    }
    if gpu:
        x = torch.zeros(256, device="cuda")

        def no_sharing(fn):
            def run(n):
                old = cprof._C._timers_share_ns(0)
                try:
                    return fn(n)
                finally:
                    cprof._C._timers_share_ns(old)
            return run

        def kernel_alone(n):
            for _ in range(n):
                x.add_(1)
            torch.cuda.synchronize()

        def kernel_timer(n):
            for _ in range(n):
                with cprof.cuda_bucket_timer("attn.rope"):
                    x.add_(1)

        def seed_way(body):
            def run(n):
                pairs = []
                for _ in range(n):
                    a = torch.cuda.Event(enable_timing=True)
                    b = torch.cuda.Event(enable_timing=True)
                    a.record()
                    body()
                    b.record()
                    pairs.append((a, b))
                torch.cuda.synchronize()
                for a, b in pairs:
                    a.elapsed_time(b)
            return run

        def synced(fn):
            def run(n):
                fn(n)
                torch.cuda.synchronize()
            return run

        variants["cuda_bucket_timer in step (cprof)"] = in_step(cuda_timer)
        variants["cuda_bucket_timer, sharing off"] = no_sharing(in_step(cuda_timer))
        variants["seed: 2 x torch.cuda.Event per region"] = seed_way(lambda: None)
        variants["kernel alone"] = kernel_alone
        variants["kernel in cuda_bucket_timer (cprof)"] = synced(in_step(kernel_timer))
        variants["kernel in timer, sharing off"] = no_sharing(synced(in_step(kernel_timer)))
        variants["kernel between 2 torch.cuda.Event (seed)"] = seed_way(lambda: x.add_(1))
        stream = int(torch.cuda.current_stream().cuda_stream)
        # what the driver alone costs for a region's two records (timed in C, no Python)
        variants["driver floor: 2 x cuEventRecord from C"] = (
            lambda n: cprof._C._timers_event_floor(n, stream))
    results = {k: [] for k in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            results[name].append(per_region(fn, args.n))
    prof.end_run()
    med = {k: statistics.median(v) for k, v in results.items()}
    info = {"python": sys.version.split()[0], "torch": getattr(torch, "__version__", None),
            "gpu": torch.cuda.get_device_name(0) if gpu else None, "n": args.n,
            "rounds": args.rounds, "median_ns": med,
            "min_ns": {k: min(v) for k, v in results.items()},
            "max_ns": {k: max(v) for k, v in results.items()}}
    print(f"{'variant':<42} {'median ns/region':>18} {'min':>10} {'max':>10}")
    for k in variants:
        print(f"{k:<42} {med[k]:>18.1f} {min(results[k]):>10.1f} {max(results[k]):>10.1f}")
    if gpu:
        ratio = med["seed: 2 x torch.cuda.Event per region"] / med[
            "cuda_bucket_timer in step (cprof)"]
        print(f"seed way / cprof: {ratio:.1f}x (target: cprof <= 2000 ns per region)")
        over = med["cuda_bucket_timer in step (cprof)"] - med[
            "driver floor: 2 x cuEventRecord from C"]
        print(f"cprof above the driver floor: {over:.0f} ns per region")
        k = med["kernel alone"]
        info["over_kernel_ns"] = {}
        for name in ("kernel in cuda_bucket_timer (cprof)", "kernel in timer, sharing off",
                     "kernel between 2 torch.cuda.Event (seed)"):
            info["over_kernel_ns"][name] = med[name] - k
            print(f"{name:<42} {med[name] - k:>10.0f} ns per region over the kernel alone")
        c = cprof._C.timers_counts()
        info["timer_counts"] = c
        print(f"timer events recorded {c['records']}, boundaries shared {c['shared']}")
    else:
        print("no GPU: the CUDA timer rows need a GPU machine")
    if args.json:
        write_results(args.json, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
