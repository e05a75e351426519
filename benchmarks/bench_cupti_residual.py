"""Does CUPTI keep costing after the profiling window closed? The launch-bound step with no
profiler, in a process where no profiler ever ran ("cold") and in processes where one profiler
window ran and closed first:

  cprof        one cprof window (cprof unsubscribes at stop, never calls cuptiFinalize:
               CUPTI stays attached to the process)
  cprof_teardown  the same with CPROF_CUPTI_TEARDOWN=1 (cprof finalizes CUPTI at the next
               CUDA API exit after the window)
  torch        one torch.profiler session (Kineto, default settings: CUPTI stays attached)
  torch_teardown  the same with TEARDOWN_CUPTI=1 (Kineto finalizes CUPTI at the next CUDA call
               after the session: its switch against this very cost)

Every role runs in its own process (attaching cannot be undone in-process without
cuptiFinalize), roles alternate process by process, P passes, the order rotated each pass; each
process warms up, runs its one window if its role has one, then times B blocks of K steps with
no profiler and reports the median ms/step. The result per role is the median over passes of
(role's process / the cold process of the same pass): paired by pass, as the VM drifts.

Why: bench_gpu_overhead's three no-profiler blocks taken before any profiler ran in that
process measured 0.42-0.65 ms/step on the H200 VM against 0.67-0.79 after (a unit bug had
hidden that until now): either drift, or CUPTI's residual cost on every later step of the
user's program, which paired in-process ratios cannot see.

    python benchmarks/bench_cupti_residual.py [--passes 6] [--blocks 9] [--steps 50]
        [--roles cold,cprof,cprof_teardown,torch,torch_teardown] [--json PATH]
Needs a CUDA GPU; exits 0 with a message without one."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ROLES = ("cold", "cprof", "cprof_teardown", "torch", "torch_teardown")


def child(role, blocks, steps):
    """One process: warm up, the role's window, then B no-profiler blocks. Prints JSON."""
    import cprof  # before torch: the same import order in every role
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(16):
        layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers).cuda().eval()
    x = torch.randn(8, 256, device="cuda")

    def step():
        with torch.no_grad():
            net(x)

    for _ in range(30):
        step()
    torch.cuda.synchronize()
    if role in ("cprof", "cprof_teardown"):
        import tempfile
        d = tempfile.mkdtemp()
        with cprof.ProfilerContext(activities=["CPU", "GPU"], output_dir=d, profile_name="w",
                                   with_stack=False, record_shapes=False, verbose=False):
            for _ in range(5):
                step()
            torch.cuda.synchronize()
    elif role in ("torch", "torch_teardown"):
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            for _ in range(5):
                step()
            torch.cuda.synchronize()
    for _ in range(10):  # the first CUDA calls after the window (Kineto's teardown runs here)
        step()
    torch.cuda.synchronize()
    time.sleep(0.2)
    per_step = []
    for _ in range(blocks):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        per_step.append((time.perf_counter() - t0) / steps * 1e3)
    print(json.dumps({"role": role, "ms_per_step": statistics.median(per_step),
                      "blocks_ms": per_step}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--blocks", type=int, default=9)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--roles", default=",".join(ROLES))
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.blocks, args.steps)
        return 0
    roles = [r for r in args.roles.split(",") if r]
    bad = [r for r in roles if r not in ROLES]
    if bad or "cold" not in roles:
        ap.error(f"roles are {', '.join(ROLES)} and must include cold; got {args.roles}")
    try:
        import torch
        if not torch.cuda.is_available():
            print("bench_cupti_residual: no CUDA GPU here; nothing measured")
            return 0
    except ImportError:
        print("bench_cupti_residual: torch is not installed; nothing measured")
        return 0
    results = {r: [] for r in roles}
    for p in range(args.passes):
        order = roles[p % len(roles):] + roles[: p % len(roles)]
        for role in order:
            env = dict(os.environ)
            env.pop("TEARDOWN_CUPTI", None)
            env.pop("CPROF_CUPTI_TEARDOWN", None)
            if role == "torch_teardown":
                env["TEARDOWN_CUPTI"] = "1"
            if role == "cprof_teardown":
                env["CPROF_CUPTI_TEARDOWN"] = "1"
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", role,
                                "--blocks", str(args.blocks), "--steps", str(args.steps)],
                               capture_output=True, text=True, env=env, timeout=600)
            line = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
            if r.returncode or not line:
                print(f"pass {p} role {role}: failed (rc {r.returncode}): {r.stderr[-500:]}")
                results[role].append(None)
                continue
            results[role].append(json.loads(line[-1])["ms_per_step"])
        print(f"pass {p}: " + ", ".join(f"{r} {results[r][-1]:.4f}" if results[r][-1] else
                                        f"{r} -" for r in roles), flush=True)
    table = {}
    for role in roles:
        pairs = [(v, c) for v, c in zip(results[role], results["cold"]) if v and c]
        ratios = sorted(v / c for v, c in pairs)
        table[role] = {
            "ms_per_step_median": statistics.median(v for v, _ in pairs) if pairs else None,
            "ratio_to_cold": statistics.median(ratios) if ratios else None,
            "ratios": ratios,
            "per_pass_ms": results[role],
        }
    print("\nno-profiler step after a window closed, paired with the cold process of the pass:")
    print(f"{'role':<16} {'ms/step':>9} {'x cold':>8}")
    for role in roles:
        t = table[role]
        ms = f"{t['ms_per_step_median']:.4f}" if t["ms_per_step_median"] else "-"
        rx = f"{t['ratio_to_cold']:.3f}" if t["ratio_to_cold"] else "-"
        print(f"{role:<16} {ms:>9} {rx:>8}")
    if args.json:
        from _common import write_results
        import cprof
        write_results(args.json, {"benchmark": "bench_cupti_residual", "passes": args.passes,
                                  "blocks": args.blocks, "steps": args.steps,
                                  "torch": torch.__version__, "cprof": cprof.__version__,
                                  "gpu": torch.cuda.get_device_name(0), "results": table})
    failed = sum(v is None for vs in results.values() for v in vs)
    if failed:
        print(f"bench_cupti_residual: {failed} process(es) failed (above)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
