"""Run by tests/test_torchrun.py under `torchrun --nproc_per_node=2` (gloo on CPU).

Each rank: a ProfilerContext (file per rank), a cprof.profile with a schedule and a
tensorboard handler, and a ranks=[0]-gated ProfilerContext. A barrier right before the range
"after_barrier" lets the test compare the ranks' clocks."""
import os
import sys

import torch
import torch.distributed as dist

import cprof

out = sys.argv[1]


def run_profiler(sub):
    """Seed 003's Profiler on every rank with no run_name: the ranks share one run directory."""
    prof = cprof.Profiler(cprof.ProfilerConfig(output_dir=os.path.join(out, sub),
                                               collect_on_rank0_only=False, warmup_runs=0,
                                               print_per_run=False), timing="host")
    prof.begin_run()
    with prof.step_timing_ctx():
        pass
    prof.end_run()
    prof.save_config()
    prof.save_all()


run_profiler("runprof_launcher")  # before the process group: the launcher names the run
dist.init_process_group("gloo")
rank = dist.get_rank()
run_profiler("runprof_store")  # rank 0's name through the process group's store

with cprof.ProfilerContext(activities=["CPU"], output_dir=out, profile_name="dist",
                           with_stack=False, record_shapes=False, verbose=False):
    dist.barrier()
    with cprof.range("after_barrier"):
        t = torch.ones(8) * (rank + 1)
        dist.all_reduce(t)
    assert t[0].item() == 3.0

tb = os.path.join(out, "tb")
with cprof.profile(activities=["CPU"], schedule=cprof.schedule(wait=1, warmup=0, active=2,
                                                               repeat=1),
                   on_trace_ready=cprof.tensorboard_trace_handler(tb, worker_name=f"rank{rank}")
                   ) as p:
    for step in range(4):
        with cprof.range(f"train_step{step}"):
            t = torch.ones(4)
            dist.all_reduce(t)
        p.step()

with cprof.ProfilerContext(activities=["CPU"], output_dir=out, profile_name="only0", ranks=[0],
                           with_stack=False, record_shapes=False, verbose=False):
    dist.barrier()

dist.barrier()
dist.destroy_process_group()
