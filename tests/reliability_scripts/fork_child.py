"""Fork inside a cprof window, for tests/test_reliability_process.py.

    python fork_child.py MODE OUTDIR

dataloader_fork / dataloader_spawn: a torch DataLoader (2 workers, that start method) iterated
inside a ProfilerContext with with_stack and record_shapes on; each sample reports what the
worker saw (window open, tracer running, nn.Module.__call__ replaced, its pid), printed as JSON.
os_fork / os_fork_profile: os.fork() inside a ProfilerContext / cprof.profile window; the child
runs the rest of the block normally and exits 0 (atexit handlers run); the parent prints the
child's exit status as JSON."""
import json
import os
import signal
import sys

import cprof
from cprof import _C

MODE, OUT = sys.argv[1], sys.argv[2]


class Probe:
    """A dataset whose items say whether cprof records in the process that made them."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        import torch
        with cprof.range("getitem"):  # recorded only if the worker's collector ran
            lin = torch.nn.Linear(2, 2)
            lin(torch.ones(1, 2))
        wrapped = type(torch.nn.Module.__dict__["__call__"]).__name__ == "ModuleCall"
        return torch.tensor([os.getpid(), int(_C.active()), int(_C.tracer_active()),
                             int(wrapped)])


def dataloader(method):
    import torch
    from torch.utils.data import DataLoader
    seen = []
    with cprof.ProfilerContext(output_dir=OUT, profile_name="dl", activities=["CPU"],
                               with_stack=True, record_shapes=True, verbose=False,
                               gzip=False) as ctx:
        with cprof.range("epoch"):
            loader = DataLoader(Probe(), batch_size=2, num_workers=2,
                                multiprocessing_context=method)
            for batch in loader:
                seen.extend(batch.tolist())
        torch.nn.Linear(2, 2)(torch.ones(1, 2))  # the parent's module capture still works
    print(json.dumps({"parent": os.getpid(), "trace": str(ctx.trace_path), "items": seen}),
          flush=True)


def os_fork(use_profile):
    if use_profile:
        p = cprof.profile(activities=["CPU"],
                          on_trace_ready=cprof.tensorboard_trace_handler(OUT, worker_name="pf"))
        win = p
    else:
        win = cprof.ProfilerContext(output_dir=OUT, profile_name="pf", activities=["CPU"],
                                    with_stack=True, verbose=True)
    parent = os.getpid()
    with win:
        with cprof.range("before fork"):
            pass
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        with cprof.range("after fork"):
            pass
        if pid == 0:
            state = {"active": _C.active(), "tracer": _C.tracer_active()}
            if use_profile:
                p.step()  # no-ops in the child, never raise
    if pid == 0:
        if use_profile:
            p.stop()
        state["written"] = getattr(win, "trace_written", None)
        state["handler_default"] = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        _C.start()  # the child's own window works: the store was reset, not broken
        with cprof.range("child's own"):
            pass
        snap = _C.stop()
        state["own_window_ranges"] = snap.ranges
        snap.close()
        with open(os.path.join(os.path.dirname(OUT), "child.json"), "w") as f:
            json.dump(state, f)
        sys.exit(0)  # a normal exit: atexit handlers run in the child too
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"parent": parent, "child": pid,
                      "child_exit": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    if MODE.startswith("dataloader_"):
        dataloader(MODE.split("_", 1)[1])
    elif MODE == "os_fork":
        os_fork(False)
    elif MODE == "os_fork_profile":
        os_fork(True)
    else:
        raise SystemExit(f"unknown mode {MODE}")
