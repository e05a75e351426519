#!/usr/bin/env python
"""What profiling costs end to end, cprof side by side with torch.profiler: a window's enter,
steps, exit and export per step; key_averages() on a big window, with its memory; and
`import cprof`.

Three parts (--parts, all by default), each on the launch-bound step of bench_options.py (16 x
(Linear(256, 256) + ReLU), batch 8, no_grad, CPU, --threads torch threads, 1 by default):

  e2e     blocks of --steps steps, interleaved over --rounds rounds (the order rotates each
          round): no profiler, and for each configuration below the profiler constructed and
          entered, the steps, the exit, export_chrome_trace to plain .json (cprof's writer at
          its plain setting; torch's at its own), each timed and given per step; the ratio is
          the median over rounds of the block's total (enter + steps + exit + export) over the
          same round's no-profiler block, with quartiles. Configurations:
            cprof:ops           cprof.profile(record_ops=True): torch's operators
            torch:base          torch.profiler.profile(): its operators (like cprof:ops)
            cprof:defaults      ProfilerContext's defaults (with_stack + record_shapes),
                                without operators (ProfilerContext's default)
            cprof:defaults+ops  the same with torch's operators (like for like with
                                torch:defaults)
            torch:defaults      with_stack + record_shapes, with its operators
  big     one fresh process per tool, one window of --big-steps steps with with_stack +
          record_shapes (cprof, cprof + record_ops, torch.profiler), then: exit, plain export,
          key_averages(), key_averages().table(); the events in the exported trace, each
          call's time, RSS growth during the window, after exit and after key_averages, and
          the process's peak RSS (read before the trace is loaded to count its events). ~300k
          events per tool at the default 1,000 steps; torch.profiler's process peaks at ~3 GB.
  import  fresh processes, alternated, --import-rounds each: `import cprof` (cprof does not
          import torch), `import torch` after it, and `import torch` alone (torch imports
          torch.profiler itself: that is torch.profiler's import cost)

    python benchmarks/bench_end_to_end.py [--parts e2e,big,import] [--rounds 9] [--steps 50]
        [--big-steps 1000] [--import-rounds 7] [--threads N] [--json PATH]
"""
import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)

clock = time.perf_counter

# options per configuration: cprof.profile's, torch.profiler.profile's (which records its
# operators in every configuration)
E2E = {
    ("cprof", "ops"): {"record_ops": True},
    ("torch", "base"): {},
    ("cprof", "defaults"): {"with_stack": True, "record_shapes": True, "record_ops": False},
    ("cprof", "defaults+ops"): {"with_stack": True, "record_shapes": True, "record_ops": True},
    ("torch", "defaults"): {"with_stack": True, "record_shapes": True},
}
PARTS = ("enter", "steps", "exit", "export")


def launch_step(torch):
    from _common import launch_step_model
    torch.manual_seed(0)
    model, x = launch_step_model(torch).eval(), torch.randn(8, 256)

    def step():
        with torch.no_grad():
            model(x)
    return step


def e2e_block(torch, cprof, kind, cfg, step, k, tmpdir):
    """Seconds for enter, steps, exit, export of one block (all 0 but steps for "none")."""
    gc.collect()
    gc.disable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = clock()
            if kind == "none":
                t1 = clock()
                for _ in range(k):
                    step()
                t2 = clock()
                return {"enter": 0.0, "steps": t2 - t1, "exit": 0.0, "export": 0.0}
            opts = E2E[(kind, cfg)]
            if kind == "cprof":
                p = cprof.profile(activities=["CPU"], **opts)
            else:
                p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                           **opts)
            p.__enter__()
            t1 = clock()
            for _ in range(k):
                step()
            t2 = clock()
            p.__exit__(None, None, None)
            t3 = clock()
            path = os.path.join(tmpdir, "t.json")
            p.export_chrome_trace(path)
            t4 = clock()
            os.remove(path)
            del p
            return {"enter": t1 - t0, "steps": t2 - t1, "exit": t3 - t2, "export": t4 - t3}
    finally:
        gc.enable()


def part_e2e(torch, cprof, a, out):
    from _common import paired_ratios
    step = launch_step(torch)
    for _ in range(20):
        step()
    tmpdir = tempfile.mkdtemp(prefix="cprof_bench_e2e_")
    configs = [("none", None)] + list(E2E)
    for kind, cfg in configs:  # warm-up: torch.profiler's first session of a process is slow
        e2e_block(torch, cprof, kind, cfg, step, 2, tmpdir)
    runs = {f"{k}:{c}" if c else k: [] for k, c in configs}
    for r in range(a.rounds):
        for kind, cfg in configs[r % len(configs):] + configs[:r % len(configs)]:
            runs[f"{kind}:{cfg}" if cfg else kind].append(
                e2e_block(torch, cprof, kind, cfg, step, a.steps, tmpdir))
    os.rmdir(tmpdir)
    none_total = [sum(b.values()) for b in runs["none"]]
    none_steps = [b["steps"] for b in runs["none"]]
    res = {}
    print(f"e2e: {a.rounds} rounds x {a.steps} steps; ms per step (each part over the block's "
          f"steps), medians over rounds; x = paired median (q1-q3) over the no-profiler block")
    print(f"{'config':<20} {'enter':>7} {'steps':>7} {'exit':>7} {'export':>7} {'total':>7} "
          f"{'steps x':>8} {'total x (q1-q3)':>20}")
    for name, blocks in runs.items():
        d = {p: statistics.median(b[p] for b in blocks) / a.steps * 1e3 for p in PARTS}
        totals = [sum(b.values()) for b in blocks]
        d["total"] = statistics.median(totals) / a.steps * 1e3
        d["steps_x"] = paired_ratios([b["steps"] for b in blocks], none_steps)
        d["total_x"] = paired_ratios(totals, none_total)
        res[name] = d
        tx = d["total_x"]
        print(f"{name:<20} " + " ".join(f"{d[p]:>7.3f}" for p in PARTS + ("total",))
              + f" {d['steps_x'][0]:>7.2f}x {tx[0]:>7.2f}x ({tx[1]:.2f}-{tx[2]:.2f})")
    out["e2e"] = {"rounds": a.rounds, "steps": a.steps, "median": res,
                  "runs_s": runs}


BIG_CHILD = r"""
import gc, json, os, resource, sys, tempfile, time, warnings
sys.path.insert(0, sys.argv[3]); sys.path.insert(0, sys.argv[4])
import cprof  # before torch: cprof records torch's operators only when imported first
import torch
from _common import set_threads, trace_content
from bench_end_to_end import launch_step
tool, n = sys.argv[1], int(sys.argv[2])
set_threads(torch, int(sys.argv[5]))
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
step = launch_step(torch)
for _ in range(20):
    step()
warnings.simplefilter("ignore")
gc.collect()
r0 = rss_mb()
clk = time.perf_counter
t0 = clk()
if tool == "torch":
    p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                               with_stack=True, record_shapes=True)
else:
    p = cprof.profile(activities=["CPU"], with_stack=True, record_shapes=True,
                      record_ops=tool == "cprof+ops")
p.__enter__()
t1 = clk()
for _ in range(n):
    step()
t2 = clk()
r_window = rss_mb()
p.__exit__(None, None, None)
t3 = clk()
r_exit = rss_mb()
d = tempfile.mkdtemp(prefix="cprof_bench_big_")
path = os.path.join(d, "t.json")
p.export_chrome_trace(path)
t4 = clk()
ka = p.key_averages()
t5 = clk()
table = ka.table(sort_by="self_cpu_time_total", row_limit=20)
t6 = clk()
r_ka = rss_mb()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
size = os.path.getsize(path)
events = trace_content(path)["events_per_step"]
os.remove(path)
os.rmdir(d)
print(json.dumps({"tool": tool, "steps": n, "events": events, "plain_mb": size / 1e6,
    "enter_s": t1 - t0, "steps_ms_per_step": (t2 - t1) / n * 1e3, "exit_s": t3 - t2,
    "export_plain_s": t4 - t3, "key_averages_s": t5 - t4, "table_s": t6 - t5,
    "rss_window_mb": r_window - r0, "rss_after_exit_mb": r_exit - r0,
    "rss_after_key_averages_mb": r_ka - r0, "peak_rss_mb": peak, "table_rows": len(ka)}))
"""


def part_big(a, out, threads):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    res = {}
    print(f"big window: {a.big_steps} steps, with_stack + record_shapes, one fresh process per "
          "tool; s, and MB of RSS over the process's before the window")
    print(f"{'tool':<10} {'events':>8} {'ms/step':>8} {'exit s':>7} {'export s':>8} "
          f"{'k_avg s':>8} {'table s':>8} {'RSS window':>10} {'RSS k_avg':>9} {'B/event':>8} "
          f"{'peak MB':>8}")
    for tool in ("cprof", "cprof+ops", "torch"):
        r = subprocess.run([sys.executable, "-c", BIG_CHILD, tool, str(a.big_steps), REPO, HERE,
                            str(threads)], capture_output=True, text=True, env=env,
                           timeout=1800)
        if r.returncode != 0:
            raise SystemExit(f"bench_end_to_end: the big window's {tool} process failed:\n"
                             + r.stderr[-3000:])
        d = json.loads(r.stdout.strip().splitlines()[-1])
        res[tool] = d
        print(f"{tool:<10} {d['events']:>8.0f} {d['steps_ms_per_step']:>8.3f} "
              f"{d['exit_s']:>7.3f} {d['export_plain_s']:>8.3f} {d['key_averages_s']:>8.2f} "
              f"{d['table_s']:>8.2f} {d['rss_window_mb']:>10.1f} "
              f"{d['rss_after_key_averages_mb']:>9.1f} "
              f"{d['rss_after_key_averages_mb'] * 2**20 / d['events']:>8.0f} "
              f"{d['peak_rss_mb']:>8.0f}")
    out["big"] = res


IMPORT_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[2])
t = {}
t0 = time.perf_counter()
if sys.argv[1] == "cprof":
    import cprof
    t["import_cprof_s"] = time.perf_counter() - t0
    t["torch_loaded_by_cprof"] = "torch" in sys.modules
t1 = time.perf_counter()
import torch
t["import_torch_s"] = time.perf_counter() - t1
t["torch_profiler_loaded_by_torch"] = "torch.profiler" in sys.modules
print(json.dumps(t))
"""


def part_import(a, out):
    res = {"cprof": [], "torch": []}
    for r in range(a.import_rounds):
        for who in (("cprof", "torch") if r % 2 == 0 else ("torch", "cprof")):
            p = subprocess.run([sys.executable, "-c", IMPORT_CHILD, who, REPO],
                               capture_output=True, text=True, check=True, timeout=600)
            res[who].append(json.loads(p.stdout.strip().splitlines()[-1]))

    def med(who, key):
        return statistics.median(d[key] for d in res[who]) * 1e3

    print(f"import: {a.import_rounds} fresh processes each, alternated, medians in ms")
    print(f"  import cprof: {med('cprof', 'import_cprof_s'):.1f} (torch loaded by it: "
          f"{any(d['torch_loaded_by_cprof'] for d in res['cprof'])}); import torch after it: "
          f"{med('cprof', 'import_torch_s'):.1f}; import torch alone: "
          f"{med('torch', 'import_torch_s'):.1f} (torch.profiler imported with it: "
          f"{all(d['torch_profiler_loaded_by_torch'] for d in res['torch'])})")
    out["import"] = {"rounds": a.import_rounds, "runs": res,
                     "median_ms": {"import_cprof": med("cprof", "import_cprof_s"),
                                   "import_torch_after_cprof": med("cprof", "import_torch_s"),
                                   "import_torch_alone": med("torch", "import_torch_s")}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="e2e,big,import")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--big-steps", type=int, default=1000)
    ap.add_argument("--import-rounds", type=int, default=7)
    ap.add_argument("--json", default=None)
    from _common import add_threads_arg, machine_info, set_threads, write_results
    add_threads_arg(ap)
    a = ap.parse_args(argv)
    parts = [p for p in a.parts.split(",") if p]
    bad = [p for p in parts if p not in ("e2e", "big", "import")]
    if bad or not parts:
        ap.error(f"--parts: give some of e2e,big,import (not {','.join(bad) or 'nothing'})")
    import cprof  # before torch: cprof records torch's operators only when imported first
    import torch
    threads = set_threads(torch, a.threads)
    info = machine_info(torch, cprof)
    print(f"machine: {info}")
    out = {"machine": info, "args": vars(a)}
    if "e2e" in parts:
        part_e2e(torch, cprof, a, out)
    if "big" in parts:
        part_big(a, out, threads)
    if "import" in parts:
        part_import(a, out)
    out["loadavg_end"] = round(os.getloadavg()[0], 2)
    print(f"load average at the end: {out['loadavg_end']}")
    if a.json:
        write_results(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
