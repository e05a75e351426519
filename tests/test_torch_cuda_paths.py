"""cprof's Python branches that run only where torch has CUDA, exercised on a CPU build.

torch's own Python code runs wherever it can; what needs CUDA is replaced by stand-ins that
behave as torch 2.11's C++ does (each says where that behaviour is from), and every call cprof
makes is bound to the installed torch's signature, so a keyword torch does not take fails here
and not first on the GPU machine. The same paths on a real GPU: tests/test_gpu_profile.py."""
import inspect
import pickle

import pytest

import cprof

torch = pytest.importorskip("torch")


class FakeHistory:
    """The CUDA caching allocator's memory history (c10/cuda/CUDACachingAllocator.cpp,
    recordHistory): on while `enabled` is not None; turning it off clears what was recorded,
    turning it on keeps it (unless clear_history). `_cuda_isHistoryEnabled` says whether it
    is on (torch/csrc/cuda/Module.cpp). calls: the keyword arguments of every
    _record_memory_history call, bound to torch's signature."""

    def __init__(self, monkeypatch):
        self.enabled = None
        self.settings = None
        self.entries = []
        self.calls = []
        real = torch.cuda.memory._record_memory_history
        sig = inspect.signature(real)

        def record(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)  # a keyword torch does not take raises here
            bound.apply_defaults()
            a = dict(bound.arguments)
            self.calls.append({k: v for k, v in kwargs.items()})
            assert a["enabled"] in (None, "state", "all"), a
            assert a["stacks"] in ("python", "all") and a["context"] in (None, "state",
                                                                           "alloc", "all")
            self.enabled = a["enabled"]
            if a["enabled"] is None or a["clear_history"]:
                self.entries = []
            self.settings = None if a["enabled"] is None else (a["context"], a["stacks"],
                                                               a["max_entries"])

        def checked(name, result):
            real_fn = getattr(torch.cuda.memory, name)
            sig_fn = inspect.signature(real_fn)

            def fn(*args, **kwargs):
                sig_fn.bind(*args, **kwargs)
                return result()
            return fn

        def snapshot():
            return {"segments": [], "device_traces": [list(self.entries)]}

        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch._C, "_cuda_isHistoryEnabled",
                            lambda: self.enabled is not None, raising=False)
        monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", record)
        monkeypatch.setattr(torch.cuda.memory, "_snapshot", checked("_snapshot", snapshot))
        for name, value in (("reset_peak_memory_stats", None), ("max_memory_allocated", 4096),
                            ("max_memory_reserved", 8192), ("memory_summary", "fake summary")):
            fn = checked(name, lambda v=value: v)
            monkeypatch.setattr(torch.cuda, name, fn)
            monkeypatch.setattr(torch.cuda.memory, name, fn)
        import cprof._profile
        monkeypatch.setattr(cprof._profile, "gpu_unavailable_reason", lambda: "test: CPU only")

    def alloc(self, size):
        if self.enabled is not None:
            self.entries.append({"action": "alloc", "size": size})


def mem_window(tmp_path, history, name="m"):
    ctx = cprof.ProfilerContext(activities=["CPU", "MEM"], output_dir=tmp_path,
                                profile_name=name, with_stack=False, verbose=False)
    with ctx:
        history.alloc(512)
        during = (history.enabled, history.settings)
    (path,) = ctx.memory_paths
    with open(path, "rb") as f:
        return ctx, during, pickle.load(f)


def test_cuda_memory_history_is_the_windows_and_ends_with_it(tmp_path, monkeypatch):
    """A program that records no memory history itself: the window turns it on (torch's
    keywords, max_entries 100000) and off at its end; the snapshot holds the window's
    allocations, the peaks come from torch."""
    history = FakeHistory(monkeypatch)
    ctx, during, snap = mem_window(tmp_path, history)
    assert during == ("all", ("all", "all", 100000))
    assert history.calls == [{"max_entries": 100000}, {"enabled": None}]
    assert history.enabled is None and history.entries == []
    assert snap["device_traces"] == [[{"action": "alloc", "size": 512}]]
    s = ctx.memory_summary
    assert (s["cuda_peak_allocated_bytes"], s["cuda_peak_reserved_bytes"]) == (4096, 8192)
    assert "cuda_history" not in s
    ctx2, during2, snap2 = mem_window(tmp_path, history, "again")  # a second window: its own
    assert snap2["device_traces"] == [[{"action": "alloc", "size": 512}]]


def test_programs_own_cuda_memory_history_survives_a_mem_window(tmp_path, monkeypatch):
    """A program recording CUDA memory history itself (to _dump_snapshot on an OOM, say): a
    MEM window turned it off at its end, which clears what the allocator had recorded, and
    replaced the program's settings with its own. The window now leaves it alone: the
    snapshot is taken from it, it stays on with the program's settings and its history."""
    history = FakeHistory(monkeypatch)
    torch.cuda.memory._record_memory_history(context="alloc", stacks="python", max_entries=500)
    history.alloc(64)  # the program's, before the window
    history.calls.clear()
    ctx, during, snap = mem_window(tmp_path, history)
    assert history.calls == []
    assert during == ("all", ("alloc", "python", 500))
    assert (history.enabled, history.settings) == ("all", ("alloc", "python", 500))
    assert history.entries == [{"action": "alloc", "size": 64}, {"action": "alloc", "size": 512}]
    assert snap["device_traces"] == [history.entries]
    assert "the program's own" in ctx.memory_summary["cuda_history"]


class OnCuda(torch.Tensor):
    """A CPU tensor that says it is on cuda:0 (its arithmetic runs on the CPU, results stay
    OnCuda): what decides the branch in Profiler.set_step_seq_len is `.device.type`."""

    @property
    def device(self):
        return torch.device("cuda", 0)


def test_kv_lengths_given_as_cuda_tensors_are_resolved_at_end_run(tmp_path):
    """set_step_seq_len with a CUDA tensor reduces it on the device and copies the lengths once
    per run (Profiler._reduce / _resolve_kv), a path no CPU test ran: each reduction gives the
    same KV length as the same lengths as a list, set before the step or inside it; a negative
    length leaves that step without one, warned at end_run."""
    import json
    lengths = [[100, 300, 200], [10, 30, 20, 40], [600, 900]]
    for how in ("mean", "max", "sum", "p50", "p90"):
        got = {}
        for kind in ("list", "cuda"):
            prof = cprof.Profiler(cprof.ProfilerConfig(
                output_dir=str(tmp_path), run_name=f"{how}-{kind}", warmup_runs=0,
                print_per_run=False, kv_len_reduce=how, kv_bins=[0, 100, 250, 500, 1000]),
                timing="host")
            prof.begin_run(bsz=1)
            for i, kv in enumerate(lengths):
                x = torch.tensor(kv).as_subclass(OnCuda) if kind == "cuda" else kv
                if i == 0:
                    prof.set_step_seq_len(x)  # before the step: the next step's
                with prof.step_timing_ctx():
                    if i:
                        prof.set_step_seq_len(x)
            prof.end_run()
            got[kind] = [b["steps"] for b in prof.summary()["runs"][0]["decode_length_buckets"]]
        assert got["cuda"] == got["list"] and sum(got["list"]) == 3, (how, got)
    prof = cprof.Profiler(cprof.ProfilerConfig(output_dir=str(tmp_path), run_name="neg",
                                               warmup_runs=0, print_per_run=False),
                          timing="host")
    prof.begin_run(bsz=1)
    for kv in ([5, -1], [7, 9]):
        with prof.step_timing_ctx():
            prof.set_step_seq_len(torch.tensor(kv).as_subclass(OnCuda))
    with pytest.warns(RuntimeWarning, match="1 step.* negative"):
        prof.end_run()
    buckets = prof.summary()["runs"][0]["decode_length_buckets"]
    assert sum(b["steps"] for b in buckets) == 1, json.dumps(buckets)


def test_capture_range_cuda_profiler_api_calls_torchs_with_cuda(monkeypatch):
    """cprof run --capture-range cudaProfilerApi with CUDA: torch.cuda.profiler.start() opens
    the window and then runs torch's own start (cudaProfilerStart, for other tools listening);
    stop() closes it and runs torch's stop; profile() goes through both. On CPU torch the CUDA
    call is skipped (tests/test_cli_run.py); here torch's real start / stop / profile run with
    only the CUDA runtime (cudart) standing in, returning cudaSuccess."""
    from cprof import _cli_run
    prof = torch.cuda.profiler
    for name in ("start", "stop"):
        monkeypatch.setattr(prof, name, getattr(prof, name))  # put back after the test
    monkeypatch.setattr(prof, "_cprof_run_patched", False, raising=False)
    order = []

    class Cudart:
        class cudaError:
            success = 0

        @staticmethod
        def cudaProfilerStart():
            order.append("cudaProfilerStart")
            return 0

        @staticmethod
        def cudaProfilerStop():
            order.append("cudaProfilerStop")
            return 0

    class Session:  # as cprof run's: a second open / close of the window does nothing
        state = "waiting"

        def open(self, why, trigger=None):
            if self.state != "open":
                order.append(f"open: {why}")
                self.state = "open"

        def close(self, why, exc_type=None):
            if self.state == "open":
                order.append(f"close: {why}")
                self.state = "closed"

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "_cudart", Cudart, raising=False)  # check_error's
    monkeypatch.setattr(prof, "cudart", lambda: Cudart)
    session = Session()
    _cli_run._install_cuda_profiler_api(session, torch)
    assert torch.cuda.profiler.start() is None
    torch.cuda.profiler.stop()
    session.state = "waiting"
    with torch.cuda.profiler.profile():
        order.append("body")
    opened = ["open: torch.cuda.profiler.start()", "cudaProfilerStart"]
    closed = ["close: torch.cuda.profiler.stop()", "cudaProfilerStop"]
    assert order == opened + closed + opened + ["body"] + closed
    # the runtime module's own calls, as Megatron-LM makes them
    # (torch.cuda.cudart().cudaProfilerStart()), open and close the window as well
    del order[:]
    session.state = "waiting"
    assert torch.cuda._cudart.cudaProfilerStart() == 0
    order.append("body")
    assert torch.cuda._cudart.cudaProfilerStop() == 0
    assert order == ["open: cudaProfilerStart()", "cudaProfilerStart", "body",
                     "close: cudaProfilerStop()", "cudaProfilerStop"]


def test_cuda_memory_snapshot_time_is_not_in_the_windows_span(tmp_path, monkeypatch):
    """The CUDA memory snapshot at a MEM window's end takes seconds where it symbolises
    stacks; the window's span (the trace's "PyTorch Profiler (0)" span, what utilisation and
    the report's window divide by) ends before it: that time is cprof's, not the program's."""
    import json
    import time as _time

    FakeHistory(monkeypatch)
    fake_snapshot = torch.cuda.memory._snapshot
    began = []

    def slow_snapshot(*args, **kwargs):
        began.append(True)
        with cprof.range("cprof snapshot"):  # the store still records: marks when it began
            _time.sleep(0.05)
        return fake_snapshot(*args, **kwargs)

    monkeypatch.setattr(torch.cuda.memory, "_snapshot", slow_snapshot)
    ctx = cprof.ProfilerContext(activities=["CPU", "MEM"], output_dir=tmp_path,
                                profile_name="span", with_stack=False, verbose=False)
    with ctx:
        with cprof.range("work"):
            pass
    assert began, "the window took no CUDA memory snapshot"
    import gzip
    with gzip.open(ctx.trace_path, "rt") as f:
        t = json.load(f)
    (span,) = [e for e in t["traceEvents"] if e.get("name") == "PyTorch Profiler (0)"]
    (snap,) = [e for e in t["traceEvents"] if e.get("name") == "cprof snapshot"]
    # on the trace's one clock: the span ends before the snapshot began (1 us: rounding)
    assert span["ts"] + span["dur"] <= snap["ts"] + 1, (span, snap)
