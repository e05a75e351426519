#!/usr/bin/env python
"""Step-time overhead of each profiler option, cprof side by side with torch.profiler.

Workload (fixed seed, after warm-up): the launch-bound step of the CUPTI issue, 16 x
(Linear(256, 256) + ReLU) in an nn.Sequential inside a module, batch 8, torch.no_grad, on
--device (cpu or cuda).

Configurations (cprof.profile vs torch.profiler.profile with the same option). torch.profiler
always records torch's operators (aten ops through RecordFunction); cprof records them only
with record_ops=True, which the rows below pass only where they say "+ ops":

  none            no profiler
  base            activities only (CPU, + CUDA on cuda). cprof: the window and nothing else on
                  the CPU; torch.profiler: its operators
  ops             cprof: base + record_ops=True, torch's operators as torch.profiler records
                  them: cprof.profile's default (torch.profiler has no switch: its column
                  is base run again, which shows the run's noise between identical configs)
  stack           + with_stack (cprof without operators)
  modules         + with_modules (cprof without operators)
  shapes          + record_shapes (cprof: module calls with shapes, no operators)
  memory          + profile_memory (cprof: the sampled CPU memory track, and CUDA memory
                  history on cuda; torch: its allocator's [memory] events)
  defaults        ProfilerContext's defaults: with_stack + record_shapes, no operators (the
                  configuration issue 5's target is about)
  stack+ops       cprof's stack / shapes / defaults with record_ops=True too: the like-for-like
  shapes+ops      rows, each next to torch's stack / shapes / defaults blocks (the same blocks
  defaults+ops    as that row's: torch has nothing to add); --no-ops-twins leaves them out

What each side recorded: before the timed rounds of its phase, one block of each configuration
(also its warm-up) is exported and its events counted (everything but metadata and flow arrows), per
step: the "content" table, with the events that carry input shapes and the main categories.

Method: a configuration opens its profiler around a block of K steps; the block is timed from
after the profiler started to after the K steps (and a torch.cuda.synchronize() on cuda);
opening, closing and exporting are not in the step time (bench_end_to_end.py times them).
Rounds interleave the configurations (the order rotates each round); the table gives medians
over rounds and, as the ratio, the median over rounds of each block over the same round's
"none" block (paired: a VM's step time drifts between rounds) with its first and third
quartiles; the JSON has every block's time and the ratio of medians too. On the CPU all
configurations, cprof's and torch's, share one phase. On cuda torch.profiler may keep CUPTI
after its session, so cprof's configurations all run first (phase 1, with its own "none")
and torch's after (phase 2).

torch's intra-op threads: --threads, 1 by default on the CPU (set_threads in _common.py);
recorded in the header and the JSON.

    python benchmarks/bench_options.py [--device cpu|cuda] [--rounds 7] [--steps 50]
                                       [--threads N] [--no-ops-twins] [--json P]
"""
import argparse
import gc
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

clock = time.perf_counter

# cprof rows other than "ops" pass record_ops=False (cprof.profile's default records torch's
# operators, as torch.profiler does; ProfilerContext's does not), so each row adds one option
OPTIONS = {
    "base": {"record_ops": False},
    "ops": {"record_ops": True},
    "stack": {"with_stack": True, "record_ops": False},
    "modules": {"with_modules": True, "record_ops": False},
    "shapes": {"record_shapes": True, "record_ops": False},
    "memory": {"profile_memory": True, "record_ops": False},
    "defaults": {"with_stack": True, "record_shapes": True, "record_ops": False},
}
# cprof-only rows: the row named with torch's operators recorded too, set beside torch's
# blocks of that row (torch.profiler records its operators in every configuration)
OPS_TWINS = {
    "stack+ops": "stack",
    "shapes+ops": "shapes",
    "defaults+ops": "defaults",
}
for _twin, _row in OPS_TWINS.items():
    OPTIONS[_twin] = dict(OPTIONS[_row], record_ops=True)
# what each row is, for the table's legend
LABELS = {
    "base": "activities only; cprof: the window alone (no operators), torch: its operators",
    "ops": "+ operators (cprof record_ops=True; torch: base run again, it has no switch)",
    "stack": "+ with_stack; cprof without operators, torch with",
    "modules": "+ with_modules; cprof without operators, torch with",
    "shapes": "+ record_shapes; cprof: module calls with shapes, no operators; torch: every "
              "operator with shapes",
    "memory": "+ profile_memory; cprof without operators, torch with",
    "defaults": "ProfilerContext's defaults (stack + shapes, no operators): issue 5's target; "
                "torch with its operators",
    "stack+ops": "with_stack + operators: like for like with torch's stack",
    "shapes+ops": "record_shapes + operators: like for like with torch's shapes (cprof's "
                  "shapes on module calls only)",
    "defaults+ops": "ProfilerContext's defaults + operators: like for like with torch's "
                    "defaults",
}


def build(torch, device):
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            layers = []
            for _ in range(16):
                layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
            self.body = torch.nn.Sequential(*layers)

        def forward(self, x):
            return self.body(x)

    net = Net().to(device).eval()
    x = torch.randn(8, 256, device=device)

    def step():
        with torch.no_grad():
            net(x)

    return step


def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def run_block(torch, cprof, kind, option, step, k, device, tmpdir, faults, content=None):
    """Seconds the block's k steps took; appends the minor page faults they took to faults
    (first touches of new memory: on a VM whose memory the host has not yet backed, each one
    also costs the host a fault, which would make a profiler's new buffers dearer there).
    With a content dict, the block's trace is counted into it (_common.trace_content)."""
    def steps():
        for _ in range(k):
            step()
        if device == "cuda":
            torch.cuda.synchronize()

    gc.collect()
    gc.disable()
    try:
        if kind == "none":
            f0 = minor_faults()
            t0 = clock()
            steps()
            t1 = clock()
            faults.append(minor_faults() - f0)
            return t1 - t0
        opts = OPTIONS[option]
        if kind == "cprof":
            acts = ["CPU", "CUDA"] if device == "cuda" else ["CPU"]
            prof = cprof.profile(activities=acts, **opts)
        else:
            tp = torch.profiler
            acts = [tp.ProfilerActivity.CPU]
            if device == "cuda":
                acts.append(tp.ProfilerActivity.CUDA)
            opts = {k: v for k, v in opts.items() if k != "record_ops"}
            prof = tp.profile(activities=acts, **opts)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prof.__enter__()
            f0 = minor_faults()
            t0 = clock()
            try:
                steps()
                t1 = clock()
                faults.append(minor_faults() - f0)
            finally:
                prof.__exit__(None, None, None)
            path = os.path.join(tmpdir, "t.json")
            prof.export_chrome_trace(path)
            if content is not None:
                from _common import trace_content
                content.update(trace_content(path, k))
            os.remove(path)
        return t1 - t0
    finally:
        gc.enable()


def fmt_ratio(r):
    return f"{r['ratio']:.2f}x ({r['ratio_q1']:.2f}-{r['ratio_q3']:.2f})"


def fmt_cats(c):
    top = [f"{cat} {n:.0f}" for cat, n in c["by_cat_per_step"].items() if n >= 1][:3]
    return ", ".join(top) or "-"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--ops-twins", action=argparse.BooleanOptionalAction, default=True,
                    help="the cprof rows stack+ops, shapes+ops, defaults+ops (default: on)")
    ap.add_argument("--json", default=None)
    from _common import add_threads_arg, import_torch, machine_info, paired_ratios, set_threads
    add_threads_arg(ap)
    a = ap.parse_args(argv)
    import cprof  # before torch: cprof records torch's operators only when imported first
    torch = import_torch("bench_options" + (" (or run with --device cpu)" if a.device == "cuda"
                                            else ""), cuda=a.device == "cuda")
    if torch is None:
        return 0
    set_threads(torch, a.threads, a.device)
    rows = [o for o in OPTIONS if a.ops_twins or o not in OPS_TWINS]
    torch_rows = [o for o in rows if o not in OPS_TWINS]
    step = build(torch, a.device)
    for _ in range(20):
        step()
    tmpdir = tempfile.mkdtemp(prefix="cprof_bench_opts_")
    cprof_cfgs = [("cprof", o) for o in rows]
    torch_cfgs = [("torch", o) for o in torch_rows]
    if a.device == "cuda":  # torch.profiler may keep CUPTI after its session: cprof first
        phases = [[("none", None)] + cprof_cfgs, [("none", None)] + torch_cfgs]
    else:  # one phase: every configuration paired with the same rounds' no-profiler block
        phases = [[("none", None)] + cprof_cfgs + torch_cfgs]
    content, results, per_round = {}, {}, {}
    for pi, phase in enumerate(phases):
        # what each configuration records: one block each, exported and counted, at the start
        # of its own phase (no torch session before cprof's phase on cuda); also the warm-up:
        # torch.profiler's first session of a process is slow
        for kind, opt in phase[1:]:
            content[f"{kind}:{opt}"] = c = {}
            run_block(torch, cprof, kind, opt, step, a.steps, a.device, tmpdir, [], c)
        times = {c: [] for c in phase}
        faults = {c: [] for c in phase}
        for r in range(a.rounds):
            order = phase[r % len(phase):] + phase[: r % len(phase)]
            for kind, opt in order:
                s = run_block(torch, cprof, kind, opt, step, a.steps, a.device, tmpdir,
                              faults[(kind, opt)])
                times[(kind, opt)].append(s / a.steps * 1e3)
        base = statistics.median(times[("none", None)])
        for (kind, opt), v in times.items():
            key = f"{kind}:{opt}" if opt else f"none(phase{pi + 1})"
            # paired: each round's block over the same round's no-profiler block
            ratio, q1, q3 = paired_ratios(v, times[("none", None)])
            results[key] = {"ms_per_step": statistics.median(v),
                            "ratio": ratio, "ratio_q1": q1, "ratio_q3": q3,
                            "ratio_of_medians": statistics.median(v) / base,
                            "minor_faults_per_step":
                                statistics.median(faults[(kind, opt)]) / a.steps}
            per_round[key] = v
    info = machine_info(torch, cprof)
    info["device"] = a.device
    if a.device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    print(f"machine: {info}")
    print(f"{a.rounds} rounds x {a.steps} steps, {info['torch_threads']} torch thread(s); "
          "medians; ratio = median over rounds of the block / the same round's no-profiler "
          "block, (q1-q3) its quartiles; "
          + ("cprof's and torch's configurations interleaved in one phase" if len(phases) == 1
             else "cprof's phase first, torch's second, each with its own no-profiler block"))
    print("rows:")
    for o in rows:
        print(f"  {o:<13} {LABELS[o]}")
    n1 = results["none(phase1)"]
    n2 = results.get("none(phase2)", n1)
    print(f"{'row':<13} {'none ms':>8} {'cprof ms':>9} {'cprof x (q1-q3)':>19} "
          f"{'torch ms':>9} {'torch x (q1-q3)':>19}")
    for o in rows:
        c = results[f"cprof:{o}"]
        t = results[f"torch:{OPS_TWINS.get(o, o)}"]
        print(f"{o:<13} {n1['ms_per_step']:>8.3f} {c['ms_per_step']:>9.3f} {fmt_ratio(c):>19} "
              f"{t['ms_per_step']:>9.3f} {fmt_ratio(t):>19}"
              + (f"  (= torch's {OPS_TWINS[o]} row)" if o in OPS_TWINS else ""))
    if len(phases) == 2:
        print(f"(torch's phase: no-profiler block {n2['ms_per_step']:.3f} ms per step)")
    print("content: events per step in one exported block of each (shapes: events with input "
          "shapes; categories with 1 or more per step); flt: minor page faults per step in "
          "the timed blocks")
    print(f"{'row':<13} {'cprof ev':>9} {'shapes':>7} {'flt':>5}  {'categories':<52} "
          f"{'torch ev':>9} {'shapes':>7} {'flt':>5}  categories")
    for o in rows:
        kc, kt = f"cprof:{o}", f"torch:{OPS_TWINS.get(o, o)}"
        c, t = content[kc], content[kt]
        print(f"{o:<13} {c['events_per_step']:>9.1f} {c['shaped_per_step']:>7.1f} "
              f"{results[kc]['minor_faults_per_step']:>5.2f}  {fmt_cats(c):<52} "
              f"{t['events_per_step']:>9.1f} {t['shaped_per_step']:>7.1f} "
              f"{results[kt]['minor_faults_per_step']:>5.2f}  {fmt_cats(t)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": info, "results": results, "content": content,
                       "per_round_ms_per_step": per_round, "rounds": a.rounds,
                       "steps": a.steps, "phases": len(phases), "rows": rows,
                       "ops_twins": {o: OPS_TWINS[o] for o in rows if o in OPS_TWINS}},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
