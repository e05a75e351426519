#!/usr/bin/env python
"""GPU step-time overhead: no profiler vs cprof vs torch.profiler, on a CUDA GPU.

Workloads (fixed seed, after warm-up):

  launch   launch-bound: 16 x (Linear(256, 256) + ReLU), batch 8, torch.no_grad
  compute  compute-bound: 4 bf16 matmuls of 8192 x 8192 per step
  train    a training step of a small CNN: 4 x (conv3x3-bn-relu) + linear, batch 64,
           3x64x64 inputs, SGD with momentum

Configurations:

  none           no profiler
  cprof_gpu      cprof.ProfilerContext(activities=["GPU"], with_stack=False,
                 record_shapes=False): GPU activity and the program's own ranges, no extra CPU
                 options (the same collection as the torch configuration below)
  cprof_default  cprof.ProfilerContext() with its defaults (CPU + GPU)
  torch          torch.profiler.profile(activities=[CPU, CUDA]), then export_chrome_trace

Method: a configuration opens its profiler around a block of K steps; the block is timed from
after the profiler has started to after the K steps and a torch.cuda.synchronize() (steady
state: opening, closing and writing the trace are timed separately and reported on their own);
ms/step = block time / K. Rounds interleave the configurations (the order rotates each round)
and the table gives the median ms/step over rounds and, as the ratio, the median over rounds of
each round's block over the "none" block of the same round (paired: on a VM the step time drifts
by tens of percent between rounds; the JSON also has the quartiles and the ratio of medians).

torch.profiler (Kineto) may keep CUPTI subscribed after its session, and cprof cannot open a GPU
window while another CUPTI client holds it; so the process runs two phases: phase 1 interleaves
none / cprof_gpu / cprof_default, phase 2 interleaves none / torch, and each profiler's ratio is
against the "none" of its own phase. After phase 2 one more cprof window is tried and the result
(works, or CuptiBusyError) is reported. Traces go to a temporary directory and are deleted.

    python benchmarks/bench_gpu_overhead.py [--rounds 7] [--steps 50] [--compute-steps 20]
                                            [--workloads launch,compute,train] [--json PATH]

Without a CUDA GPU it prints why and exits 0.
"""
import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import paired_ratios  # noqa: E402

clock = time.perf_counter

CONFIG_LABELS = {
    "none": "no profiler",
    "cprof_gpu": "cprof GPU-only",
    "cprof_default": "cprof defaults",
    "torch": "torch.profiler",
}
PHASES = (("none", "cprof_gpu", "cprof_default"), ("none", "torch"))


# -------------------------------------------------------------------------------------------------
# workloads: each returns step() (launches one step's GPU work, no synchronisation)
# -------------------------------------------------------------------------------------------------
def workload_launch(torch):
    nn = torch.nn
    layers = []
    for _ in range(16):
        layers += [nn.Linear(256, 256), nn.ReLU()]
    model = nn.Sequential(*layers).cuda().eval()
    x = torch.randn(8, 256, device="cuda")

    def step():
        with torch.no_grad():
            model(x)

    return step


def workload_compute(torch):
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)

    def step():
        for _ in range(4):
            torch.matmul(a, b, out=c)

    return step


def workload_train(torch):
    nn = torch.nn

    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    model = nn.Sequential(
        *block(3, 32), *block(32, 64), nn.MaxPool2d(2), *block(64, 128), nn.MaxPool2d(2),
        *block(128, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10),
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 3, 64, 64, device="cuda")
    y = torch.randint(0, 10, (64,), device="cuda")
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    return step


WORKLOADS = {
    "launch": ("launch: 16x(Linear256+ReLU) b8 no_grad", workload_launch),
    "compute": ("compute: 4x bf16 matmul 8192^2", workload_compute),
    "train": ("train: CNN b64 3x64x64 SGD step", workload_train),
}


# -------------------------------------------------------------------------------------------------
# one block of K steps under a configuration
# -------------------------------------------------------------------------------------------------
class Runner:
    def __init__(self, torch, cprof, tmpdir):
        self.torch = torch
        self.cprof = cprof
        self.tmpdir = tmpdir
        self.n = 0

    def _steps(self, step, k):
        for _ in range(k):
            step()
        self.torch.cuda.synchronize()

    def block(self, config, step, k):
        """Returns (seconds for the K steps, seconds to open + close + write the profiler)."""
        torch = self.torch
        torch.cuda.synchronize()
        gc.collect()
        gc.disable()
        self.n += 1
        try:
            if config == "none":
                t0 = clock()
                self._steps(step, k)
                return clock() - t0, 0.0
            if config in ("cprof_gpu", "cprof_default"):
                kw = {"activities": ["GPU"], "with_stack": False,
                      "record_shapes": False} if config == "cprof_gpu" else {}
                ctx = self.cprof.ProfilerContext(output_dir=self.tmpdir, verbose=False,
                                                 profile_name=f"b{self.n}", **kw)
                o0 = clock()
                ctx.__enter__()
                t0 = clock()
                try:
                    self._steps(step, k)
                    t1 = clock()
                finally:
                    ctx.__exit__(None, None, None)
                o1 = clock()
                if ctx.trace_path is not None and os.path.exists(ctx.trace_path):
                    os.remove(ctx.trace_path)
                return t1 - t0, (o1 - o0) - (t1 - t0)
            if config == "torch":
                from torch.profiler import ProfilerActivity, profile
                prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
                o0 = clock()
                prof.__enter__()
                t0 = clock()
                try:
                    self._steps(step, k)
                    t1 = clock()
                finally:
                    prof.__exit__(None, None, None)
                path = os.path.join(self.tmpdir, f"b{self.n}.pt.trace.json")
                prof.export_chrome_trace(path)
                o1 = clock()
                os.remove(path)
                return t1 - t0, (o1 - o0) - (t1 - t0)
            raise ValueError(config)
        finally:
            gc.enable()


# -------------------------------------------------------------------------------------------------
# machine information
# -------------------------------------------------------------------------------------------------
def nvidia_smi():
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        r = subprocess.run([exe, "--query-gpu=name,driver_version,clocks.max.sm,power.limit",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        return r.stdout.strip() or r.stderr.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"nvidia-smi failed: {exc}"


def machine_info(torch, cprof):
    gpu = cprof.features()["gpu_activity"]
    props = torch.cuda.get_device_properties(0)
    drv = gpu.get("driver_version")
    return {
        "device": torch.cuda.get_device_name(0),
        "sm_count": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2 ** 30, 1),
        "capability": f"{props.major}.{props.minor}",
        "cuda_driver_api": f"{drv // 1000}.{drv % 1000 // 10}" if isinstance(drv, int) else drv,
        "nvidia_smi": nvidia_smi(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "cupti_path": gpu.get("cupti_path"),
        "cupti_version": gpu.get("cupti_version"),
        "cprof": cprof.__version__,
        "python": platform.python_version(),
        "host_kernel": platform.release(),
        "cpu_count": os.cpu_count(),
    }


# -------------------------------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=50, help="K: steps per block (launch, train)")
    ap.add_argument("--compute-steps", type=int, default=20, help="K for the compute workload")
    ap.add_argument("--warmup", type=int, default=10, help="unprofiled warm-up steps")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = ap.parse_args(argv)
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workloads {unknown}; choose from {list(WORKLOADS)}")

    try:
        import torch
    except ImportError as exc:
        print(f"bench_gpu_overhead: torch is not importable ({exc}); nothing to measure")
        return 0
    if not torch.cuda.is_available():
        print("bench_gpu_overhead: no CUDA GPU here (torch.cuda.is_available() is False); "
              "this benchmark needs one. Nothing measured.")
        return 0
    torch.cuda.init()
    import cprof
    gpu = cprof.features()["gpu_activity"]
    if not gpu["available"]:
        print(f"bench_gpu_overhead: a GPU is present but cprof cannot collect GPU activity: "
              f"{gpu['reason']}", file=sys.stderr)
        return 2
    warnings.simplefilter("default")
    torch.manual_seed(0)
    t_start = clock()
    info = machine_info(torch, cprof)
    print(f"device: {info['device']} (sm {info['capability']}, {info['sm_count']} SMs, "
          f"{info['memory_gib']} GiB)")
    print(f"nvidia-smi: {info['nvidia_smi'] or 'not found'}")
    print(f"CUDA driver API {info['cuda_driver_api']}, torch {info['torch']} (CUDA "
          f"{info['torch_cuda']}, cuDNN {info['cudnn']}), CUPTI {info['cupti_version']} at "
          f"{info['cupti_path']}, cprof {info['cprof']}, Python {info['python']}", flush=True)

    tmpdir = tempfile.mkdtemp(prefix="cprof_bench_gpu_")
    runner = Runner(torch, cprof, tmpdir)
    results = {}
    findings = []
    try:
        steps = {}
        for name in names:
            steps[name] = WORKLOADS[name][1](torch)
            for _ in range(args.warmup):
                steps[name]()
            torch.cuda.synchronize()
        k_of = {n: (args.compute_steps if n == "compute" else args.steps) for n in names}
        samples = {n: {c: [] for c in CONFIG_LABELS} for n in names}
        overhead = {n: {c: [] for c in CONFIG_LABELS} for n in names}
        baseline = {n: [] for n in names}

        # none before any profiler touched CUPTI in this process (does CUPTI linger after?)
        for name in names:
            for _ in range(3):
                baseline[name].append(runner.block("none", steps[name], k_of[name])[0] / k_of[name])

        for phase, configs in enumerate(PHASES, 1):
            for name in names:  # warm-up: first CUPTI / Kineto session, caches
                for config in configs:
                    runner.block(config, steps[name], k_of[name])
            print(f"phase {phase}: {args.rounds} rounds of {', '.join(configs)}", flush=True)
            for r in range(args.rounds):
                order = configs[r % len(configs):] + configs[: r % len(configs)]
                for name in names:
                    for config in order:
                        dt, oh = runner.block(config, steps[name], k_of[name])
                        key = config if config != "none" else f"none{phase}"
                        samples[name].setdefault(key, []).append(dt / k_of[name])
                        if config != "none":
                            overhead[name][config].append(oh)
        # the finding: can cprof open a GPU window after torch.profiler ran in this process?
        try:
            with cprof.ProfilerContext(output_dir=tmpdir, profile_name="after_torch",
                                       verbose=False) as p:
                steps[names[0]]()
                torch.cuda.synchronize()
            os.remove(p.trace_path)
            findings.append("cprof opens a GPU window after torch.profiler sessions in the same "
                            "process: works")
        except cprof.CuptiBusyError as exc:
            findings.append("cprof after torch.profiler in the same process raises "
                            f"CuptiBusyError (Kineto keeps CUPTI): {str(exc)[:300]}")
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)

    med = {}
    for name in names:
        s = samples[name]
        base1, base2 = statistics.median(s["none1"]), statistics.median(s["none2"])
        med[name] = {"none": base1}
        row = {
            "label": WORKLOADS[name][0],
            "steps_per_block": k_of[name],
            "none_before_any_profiler_ms": statistics.median(baseline[name]) * 1e3,
            "configs": {},
        }
        for config in CONFIG_LABELS:
            key = {"none": "none1"}.get(config, config)
            base = base2 if config == "torch" else base1
            m = statistics.median(s[key])
            med[name][config] = m
            # paired: each round's block over the no-profiler block of the same round and phase
            # (the step time drifts by tens of percent between rounds on a VM)
            nkey = "none2" if config == "torch" else "none1"
            ratio, q1, q3 = paired_ratios(s[key], s[nkey])
            row["configs"][config] = {
                "label": CONFIG_LABELS[config],
                "ms_per_step_median": m * 1e3,
                "ms_per_step_min": min(s[key]) * 1e3,
                "ms_per_step_max": max(s[key]) * 1e3,
                "ratio_vs_none": ratio,
                "ratio_q1": q1,
                "ratio_q3": q3,
                "ratio_of_medians": m / base,
                "baseline": "none of phase 2" if config == "torch" else "none of phase 1",
                "open_close_write_s_median": (statistics.median(overhead[name][config])
                                              if overhead[name][config] else 0.0),
                "samples_ms": [v * 1e3 for v in s[key]],
            }
        row["none_phase2_ms"] = base2 * 1e3
        row["none_phase2_samples_ms"] = [v * 1e3 for v in s["none2"]]
        results[name] = row
    elapsed = clock() - t_start

    print()
    print("open + close + write of the profiler, median seconds per block (outside the timing):")
    for name in names:
        cfg = results[name]["configs"]
        cells = ", ".join(f"{CONFIG_LABELS[c]} {cfg[c]['open_close_write_s_median']:.3f}"
                          for c in CONFIG_LABELS if c != "none")
        print(f"  {name}: {cells}")
    print("no profiler, ms/step: before any profiler / phase 1 / phase 2 (after torch.profiler):")
    for name in names:
        r = results[name]
        print(f"  {name}: {r['none_before_any_profiler_ms']:.4f} / "
              f"{r['configs']['none']['ms_per_step_median']:.4f} / {r['none_phase2_ms']:.4f}")
    for f in findings:
        print(f"finding: {f}")
    print(f"total time {elapsed:.1f} s")
    if args.json:
        out = {
            "benchmark": "bench_gpu_overhead",
            "machine": info,
            "rounds": args.rounds,
            "steps": args.steps,
            "compute_steps": args.compute_steps,
            "warmup": args.warmup,
            "method": "per config: profiler opened around K steps; block timed after open, to "
                      "after K steps + synchronize; ms/step = block/K; median over interleaved "
                      "rounds; phase 1 none/cprof_gpu/cprof_default, phase 2 none/torch; "
                      "ratio_vs_none: median over rounds of the block / the no-profiler block "
                      "of the same round (q1, q3 beside it), ratio_of_medians: medians over "
                      "all rounds divided",
            "workloads": results,
            "findings": findings,
            "elapsed_s": elapsed,
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(f"results written to {args.json}")
    print()
    print(f"median ms/step over {args.rounds} interleaved rounds (x = median of each round's "
          f"ratio to its no-profiler block; torch.profiler's from its own phase)")
    head = f"{'workload':<36} {'K':>3} " + " ".join(f"{CONFIG_LABELS[c]:>20}"
                                                     for c in CONFIG_LABELS)
    print(head)
    print("-" * len(head))
    for name in names:
        r = results[name]
        cells = []
        for c in CONFIG_LABELS:
            v = r["configs"][c]
            cell = f"{v['ms_per_step_median']:.4f}"
            if c != "none":
                cell += f" ({v['ratio_vs_none']:.3f}x)"
            cells.append(f"{cell:>20}")
        print(f"{r['label']:<36} {r['steps_per_block']:>3} " + " ".join(cells))

    return 0


if __name__ == "__main__":
    sys.exit(main())
