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

Step: 16 x (Linear(256, 256) + ReLU), batch 8, no_grad (the launch-bound step of issue 3).
Per mode: R interleaved rounds of a no-profiler block and a cprof block of K steps; the ratio
of the medians. Needs a CUDA GPU. `--json PATH` writes the results."""
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
from _common import write_results  # noqa: E402
MODES = {
    "default": {},
    "kinds": {"CPROF_CUPTI_API_RECORDS": "kinds"},
    "ids": {"CPROF_CUPTI_API_RECORDS": "ids"},
    "minimal": {"CPROF_CUPTI_KINDS": "minimal"},
    "cupti_clock": {"CPROF_CUPTI_TIMESTAMP": "cupti"},
}


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
    with tempfile.TemporaryDirectory() as d:
        for r in range(rounds):
            t0 = time.perf_counter()
            block()
            none.append((time.perf_counter() - t0) / steps * 1e3)
            ctx = cprof.ProfilerContext(activities=["GPU"], with_stack=False,
                                        record_shapes=False, output_dir=d,
                                        profile_name=f"r{r}", verbose=False)
            ctx.__enter__()
            t0 = time.perf_counter()
            block()
            prof.append((time.perf_counter() - t0) / steps * 1e3)
            ctx.__exit__(None, None, None)
            with open(ctx.trace_path, "rb") as f:
                raw = f.read()
            import gzip
            t = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
            gpu = t["cprof"].get("gpu", {})
            os.remove(ctx.trace_path)
    n, p = statistics.median(none), statistics.median(prof)
    print("RESULT " + json.dumps({"none_ms": n, "cprof_ms": p, "ratio": p / n,
                                  "records": gpu.get("records"),
                                  "api_records": gpu.get("api_records")}))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.rounds, args.steps)
    out = {}
    print(f"{'mode':<12} {'none ms':>9} {'cprof ms':>9} {'ratio':>7}  records")
    for mode in args.modes.split(","):
        env = dict(os.environ, **MODES[mode])
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker",
                            "--rounds", str(args.rounds), "--steps", str(args.steps)],
                           env=env, capture_output=True, text=True, timeout=300)
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
        if r.returncode or not lines:
            print(f"{mode:<12} failed: {r.stderr[-500:]}")
            continue
        res = json.loads(lines[-1][7:])
        out[mode] = res
        rec = res["records"] or {}
        print(f"{mode:<12} {res['none_ms']:>9.3f} {res['cprof_ms']:>9.3f} {res['ratio']:>6.3f}x"
              f"  kernel {rec.get('kernel')} runtime {rec.get('runtime')} "
              f"driver {rec.get('driver')} sync {rec.get('sync')}", flush=True)
    if args.json:
        write_results(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
