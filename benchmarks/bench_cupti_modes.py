"""Where cprof's GPU-only overhead on a launch-bound step comes from: the same step with no
profiler and with a cprof GPU-only window, per CUPTI collection mode, each mode in its own
process (the timestamp callback cannot be taken back once registered).

Modes (diagnostic switches read by csrc/cupti_collect.c at window start):
  default      RUNTIME + DRIVER kinds whole, ids cprof does not show switched off; kernels,
               copies, sets, syncs, CUPTI overhead; CUPTI stamps with cprof's clock
  kinds        the same without switching ids off (every runtime / driver call recorded)
  ids          the per-id switch alone (records no call on CUPTI 13.0.1): CUPTI's cost
               without API records
  minimal      kernels, copies and sets only (no API calls, syncs or overhead records)
  cupti_clock  default, but CUPTI's own timestamps (offset applied at decode)
  bare_kernel  no cprof window: benchmarks/bare_cupti.c, a collector with no cprof code,
               kernels only (CONCURRENT_KERNEL), records counted and dropped
  bare_rt      bare, kernels and every runtime call (KIND_RUNTIME whole)
  bare_launch  bare, kernels and the runtime's launch / copy / sync calls only (KIND_RUNTIME
               whole, the other runtime ids switched off)
  bare_driver  bare, kernels and every driver call (KIND_DRIVER whole, no KIND_RUNTIME)
  bare_kernel_z  bare kernels only, buffers handed out zero-filled and CUPTI told so
  driver       cprof with KIND_DRIVER alone (filtered), no KIND_RUNTIME: launches seen as the
               driver calls the runtime makes (CPROF_CUPTI_API_RECORDS=driver)
  vdso_clock   default, with cprof's clock read through clock_gettime instead of the TSC
               (CPROF_CLOCK=monotonic: what cprof did before decision 69)
  unzeroed     default, but CUPTI zeroes each buffer itself on the thread that asks for it
               (CPROF_CUPTI_ZEROED=0: what cprof did before it pre-zeroed its buffers)
  per_thread   default, but CUPTI's own default of a buffer per thread that makes records
               (CPROF_CUPTI_PER_THREAD_BUFFERS=1: what cprof did before decision 167)
  no_events    default without CUDA_EVENT records (CPROF_CUPTI_CUDA_EVENTS=0: event waits
               then carry no wait_on_stream; what cprof did before decision 89)
The bare modes say what CUPTI alone costs here: cprof's modes can be no cheaper.

Step: 16 x (Linear(256, 256) + ReLU), batch 8, no_grad (the launch-bound step of issue 3).
Per mode: R rounds of a no-profiler block and a profiled block of K steps (which goes first
alternates); the ratio is the median over rounds of each round's profiled / no-profiler time
(paired: this VM's step time drifts by tens of percent within seconds, so a round's two
blocks are compared with each other, not with medians over the whole run). "linked" counts the
kernels whose launch (an API record of the same correlation id) was recorded. `--repeat N` runs the whole list of modes N times (a new process each
time, the order reversed every other pass) and reports each mode's median ratio: processes
differ more than modes do on a VM. Needs a CUDA GPU and gcc (for the bare collector).
`--json PATH` writes the results."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import import_torch, paired_ratios, write_results  # noqa: E402
MODES = {
    "default": {},
    "kinds": {"CPROF_CUPTI_API_RECORDS": "kinds"},
    "ids": {"CPROF_CUPTI_API_RECORDS": "ids"},
    "minimal": {"CPROF_CUPTI_KINDS": "minimal"},
    "cupti_clock": {"CPROF_CUPTI_TIMESTAMP": "cupti"},
    "vdso_clock": {"CPROF_CLOCK": "monotonic"},
    "bare_kernel": {"BENCH_BARE": "0"},
    "bare_rt": {"BENCH_BARE": "1"},
    "bare_launch": {"BENCH_BARE": "2"},
    "bare_driver": {"BENCH_BARE": "3"},
    "bare_kernel_z": {"BENCH_BARE": "4"},
    "driver": {"CPROF_CUPTI_API_RECORDS": "driver"},
    "unzeroed": {"CPROF_CUPTI_ZEROED": "0"},
    "no_events": {"CPROF_CUPTI_CUDA_EVENTS": "0"},
    "per_thread": {"CPROF_CUPTI_PER_THREAD_BUFFERS": "1"},
}


def build_bare(tmpdir):
    """Compiles benchmarks/bare_cupti.c; returns the .so path or None with a message."""
    so = os.path.join(tmpdir, "bare_cupti.so")
    r = subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-I", os.path.join(ROOT, "csrc"),
                        os.path.join(ROOT, "benchmarks", "bare_cupti.c"), "-ldl", "-o", so],
                       capture_output=True, text=True)
    if r.returncode:
        print(f"cannot build the bare collector: {r.stderr[-400:]}")
        return None
    return so


class Bare:
    """A profiler-like window over benchmarks/bare_cupti.c."""

    def __init__(self, so, mode):
        import ctypes
        from cprof._features import _gpu_status
        self.path = _gpu_status()[2]["cupti_path"]
        if not self.path:
            raise RuntimeError("no libcupti found for the bare collector")
        self.lib = ctypes.CDLL(so)
        self.lib.bare_start.argtypes = [ctypes.c_char_p, ctypes.c_int]
        self.lib.bare_stop.argtypes = [ctypes.POINTER(ctypes.c_ulong)]
        self.lib.bare_stop.restype = ctypes.c_long
        self.lib.bare_linked.restype = ctypes.c_long
        self.mode = mode
        self.kernels = ctypes.c_ulong(0)
        self.records = None

    def __enter__(self):
        rc = self.lib.bare_start(self.path.encode(), self.mode)
        if rc:
            raise RuntimeError(f"bare_start failed: {rc}")
        return self

    def __exit__(self, *exc):
        self.records = self.lib.bare_stop(self.kernels)
        self.linked = self.lib.bare_linked()


def worker(rounds, steps):
    sys.path.insert(0, ROOT)
    import cprof
    import torch
    torch.manual_seed(0)
    layers = []
    for _ in range(16):
        layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).cuda()
    x = torch.randn(8, 256, device="cuda")

    def block():
        with torch.no_grad():
            for _ in range(steps):
                model(x)
        torch.cuda.synchronize()

    for _ in range(20):
        block()
    none, prof = [], []
    bare = os.environ.get("BENCH_BARE")
    gpu = {}
    linked = None

    def timed_none():
        t0 = time.perf_counter()
        block()
        none.append((time.perf_counter() - t0) / steps * 1e3)

    with tempfile.TemporaryDirectory() as d:
        for r in range(rounds):
            if r % 2 == 0:
                timed_none()
            if bare is not None:
                ctx = Bare(os.environ["BENCH_BARE_SO"], int(bare))
            else:
                ctx = cprof.ProfilerContext(activities=["GPU"], with_stack=False,
                                            record_shapes=False, output_dir=d,
                                            profile_name=f"r{r}", verbose=False)
            ctx.__enter__()
            t0 = time.perf_counter()
            block()
            prof.append((time.perf_counter() - t0) / steps * 1e3)
            ctx.__exit__(None, None, None)
            if r % 2 == 1:
                timed_none()
            if bare is not None:
                gpu = {"records": {"kernel": ctx.kernels.value, "all": ctx.records}}
                linked = ctx.linked
                continue
            with open(ctx.trace_path, "rb") as f:
                raw = f.read()
            import gzip
            t = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
            gpu = t["cprof"].get("gpu", {})
            linked = sum(1 for e in t["traceEvents"] if e.get("ph") == "f")
            os.remove(ctx.trace_path)
    n, p = statistics.median(none), statistics.median(prof)
    ratio, q1, q3 = paired_ratios(prof, none)
    print("RESULT " + json.dumps({"none_ms": n, "cprof_ms": p, "ratio": ratio,
                                  "ratio_of_medians": p / n,
                                  "ratio_q1": q1, "ratio_q3": q3,
                                  "linked": linked, "records": gpu.get("records"),
                                  "api_records": gpu.get("api_records")}))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.rounds, args.steps)
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        ap.error(f"--modes: unknown {', '.join(bad) or 'empty list'}; modes are "
                 f"{', '.join(MODES)}")
    # every mode is a worker process on the GPU: say once why nothing runs without one
    if import_torch("bench_cupti_modes", cuda=True) is None:
        return 0
    out = {}
    failed = []
    tmp = tempfile.mkdtemp()
    so = build_bare(tmp) if any(m.startswith("bare") for m in modes) else None
    print(f"{'mode':<13} {'none ms':>9} {'prof ms':>9} {'ratio':>7} {'q1-q3':>13} {'linked':>6}"
          "  records")
    for rep in range(args.repeat):
        for mode in (modes if rep % 2 == 0 else modes[::-1]):
            if mode.startswith("bare") and so is None:
                failed.append(mode)
                continue
            env = dict(os.environ, **MODES[mode])
            if so:
                env["BENCH_BARE_SO"] = so
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker",
                                "--rounds", str(args.rounds), "--steps", str(args.steps)],
                               env=env, capture_output=True, text=True, timeout=300)
            lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
            if r.returncode or not lines:
                print(f"{mode:<12} failed: {r.stderr[-500:]}")
                failed.append(mode)
                continue
            res = json.loads(lines[-1][7:])
            out.setdefault(mode, []).append(res)
            rec = res["records"] or {}
            print(f"{mode:<13} {res['none_ms']:>9.3f} {res['cprof_ms']:>9.3f} "
                  f"{res['ratio']:>6.3f}x {res['ratio_q1']:>6.3f}-{res['ratio_q3']:<6.3f} "
                  f"{res['linked'] if res['linked'] is not None else '-':>6}  "
                  + " ".join(f"{k} {v}" for k, v in rec.items()), flush=True)
    if args.repeat > 1:
        print(f"\n{'mode':<13} {'median ratio':>12} {'min':>7} {'max':>7}  over {args.repeat} "
              "processes (each a median of paired ratios)")
        for mode in modes:
            rs = [x["ratio"] for x in out.get(mode, [])]
            if rs:
                print(f"{mode:<13} {statistics.median(rs):>11.3f}x {min(rs):>6.3f}x "
                      f"{max(rs):>6.3f}x")
    if args.json:
        write_results(args.json, out)
    if failed:
        print(f"bench_cupti_modes: {len(failed)} run(s) failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
