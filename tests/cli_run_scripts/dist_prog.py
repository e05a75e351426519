"""Run by tests/test_cli_run.py as `torchrun --nproc_per_node=2 -m cprof run dist_prog.py`."""
import torch
import torch.distributed as dist

import cprof

dist.init_process_group("gloo")
with cprof.range(f"on_rank{dist.get_rank()}"):
    t = torch.ones(4)
    dist.all_reduce(t)
assert t[0].item() == 2.0
dist.barrier()
dist.destroy_process_group()
print("rank done")
