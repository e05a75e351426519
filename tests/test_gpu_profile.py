"""cprof.profile on a real GPU: CUDA activity under a schedule, key_averages CUDA columns,
kernels linked to module ranges, memory snapshots. Marked ``gpu``; skips without a CUDA GPU
and working CUPTI (run by scripts/gpu_check.sh on the GPU machine). Only cprof windows are
opened in this process (torch.profiler comparisons live in test_gpu_real.py subprocesses)."""
import os
import pickle
import re

import pytest

from tests.conftest import load_trace, ranges_of
from tests.test_gpu_real import GPU_OK, GPU_REASON

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not GPU_OK, reason=str(GPU_REASON))]


def _model(torch):
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = torch.nn.Linear(256, 256)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                           torch.nn.Linear(512, 256))

        def forward(self, x):
            return self.mlp(self.attn(x))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([Block() for _ in range(3)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    return Net().cuda(), torch.randn(64, 256, device="cuda")


def _events(t, cat):
    return [e for e in t["traceEvents"] if e.get("ph") == "X" and e.get("cat") == cat]


def test_schedule_with_cuda_writes_kernels_per_cycle(tmp_path):
    import torch

    import cprof
    net, x = _model(torch)
    d = tmp_path / "tb"
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU, cprof.ProfilerActivity.CUDA],
                       schedule=cprof.schedule(wait=1, warmup=1, active=2, repeat=2),
                       on_trace_ready=cprof.tensorboard_trace_handler(d)) as p:
        for _ in range(8):
            with torch.no_grad():
                net(x)
            p.step()
    files = sorted(os.listdir(d))
    assert len(files) == 2
    for f in files:
        t = load_trace(d / f)
        kernels = _events(t, "kernel")
        # the CPU-side step ranges (Kineto also shows each on the GPU, gpu_user_annotation)
        steps = [e for e in ranges_of(t, "user_annotation") if e["name"].startswith("ProfilerStep#")]
        assert len(steps) == 2
        assert len(kernels) >= 2 * 9  # 9 Linear layers per step at least
        t0 = min(s["ts"] for s in steps)
        assert all(k["ts"] >= t0 for k in kernels)


def cpu_ranges_by_ext(t):
    """CPU ranges by External id (GPU-side events such as CUPTI overhead carry none)."""
    return {e["args"]["External id"]: e for e in ranges_of(t)
            if e.get("cat") in ("cpu_op", "user_annotation", "python_function")
            and "External id" in e.get("args", {})}


def test_kernels_link_to_innermost_module(tmp_path):
    import torch

    import cprof
    net, x = _model(torch)
    with torch.no_grad():
        net(x)
    torch.cuda.synchronize()
    with cprof.profile(activities=["CPU", "CUDA"], with_modules=True, record_shapes=True) as p:
        with torch.no_grad():
            net(x)
    out = p.export_chrome_trace(str(tmp_path / "m.json"))
    t = load_trace(out)
    by_ext = cpu_ranges_by_ext(t)
    names = {e["name"] for e in ranges_of(t, "user_annotation")}
    assert {"Net", "layers.0", "layers.0.attn", "layers.2.mlp.2"} <= names
    linked = [by_ext.get(k["args"].get("External id")) for k in _events(t, "kernel")]
    assert linked and all(e is not None for e in linked)
    leaf = [e["name"] for e in linked]
    assert any(re.fullmatch(r"layers\.\d\.(attn|mlp\.[02])", n) for n in leaf), leaf
    attn = next(e for e in ranges_of(t) if e["name"] == "layers.0.attn")
    assert attn["args"]["Input Dims"] == [[64, 256]]


def test_key_averages_have_cuda_times(tmp_path):
    import torch

    import cprof
    net, x = _model(torch)
    with cprof.profile(activities=["CPU", "CUDA"], with_modules=True) as p:
        with torch.no_grad():
            net(x)
    ka = p.key_averages()
    rows = {r.key: r for r in ka}
    assert rows["Net"].device_time_total > 0
    assert rows["Net"].device_time_total >= rows["layers.0"].device_time_total
    table = ka.table(sort_by="cuda_time_total", row_limit=10)
    assert "Self CUDA" in table and "CUDA total" in table


def test_with_stack_links_launches_to_ops(tmp_path):
    import torch

    import cprof
    net, x = _model(torch)
    with cprof.profile(activities=["CPU", "CUDA"], with_stack=True) as p:
        with torch.no_grad():
            net(x)
    t = load_trace(p.export_chrome_trace(str(tmp_path / "s.json")))
    by_ext = cpu_ranges_by_ext(t)
    cats = {by_ext[k["args"]["External id"]]["cat"] for k in _events(t, "kernel")
            if k["args"].get("External id") in by_ext}
    assert cats and "python_function" not in cats
    assert any(e["name"].endswith("linear") for e in ranges_of(t, "cpu_op"))


def test_memory_snapshot_for_memory_viz(tmp_path):
    import torch

    import cprof
    ctx = cprof.ProfilerContext(activities=["CPU", "GPU", "MEM"], output_dir=tmp_path,
                                profile_name="mem", verbose=False)
    # the trace's memory counters are CUPTI's driver-level allocations: with the caching
    # allocator's blocks of earlier tests handed back, the window's tensor is a new cudaMalloc
    torch.cuda.empty_cache()
    with ctx:
        a = torch.empty(1 << 20, device="cuda")
        b = a * 2
        del a, b
    (pk,) = ctx.memory_paths
    assert re.fullmatch(r"mem-rank0-memory-\d+\.pickle", os.path.basename(pk))
    with open(pk, "rb") as f:
        snap = pickle.load(f)
    assert "segments" in snap and "device_traces" in snap
    assert any(ev.get("action") == "alloc" for tr in snap["device_traces"] for ev in tr)
    assert os.path.exists(pk[: -len(".pickle")] + ".txt")
    assert ctx.memory_summary["cuda_peak_allocated_bytes"] >= 4 << 20
    t = load_trace(ctx.trace_path)
    assert any(e.get("ph") == "C" or e.get("cat") == "gpu_memory" for e in t["traceEvents"])


def test_programs_own_memory_history_survives_a_mem_window(tmp_path):
    """Decision 180 on the real allocator: history the program turned on before a MEM window
    stays on after it, with what it recorded before the window (turning it off would have
    cleared it), and the window's snapshot holds the window's allocation too. The same with
    torch's behaviour modelled: tests/test_torch_cuda_paths.py."""
    import torch

    import cprof
    torch.cuda.memory._record_memory_history(max_entries=10000, stacks="python")
    try:
        before = torch.empty(1 << 18, device="cuda")  # 1 MiB, the program's own
        ctx = cprof.ProfilerContext(activities=["CPU", "GPU", "MEM"], output_dir=tmp_path,
                                    profile_name="own", verbose=False)
        with ctx:
            during = torch.empty(3 << 18, device="cuda")  # 3 MiB
            del during
        assert torch._C._cuda_isHistoryEnabled()
        assert "the program's own" in ctx.memory_summary["cuda_history"]

        def allocs(snap):
            return {ev["size"] for tr in snap["device_traces"] for ev in tr
                    if ev["action"] == "alloc"}
        with open(ctx.memory_paths[0], "rb") as f:
            window = allocs(pickle.load(f))
        assert {1 << 20, 3 << 20} <= window, sorted(window)
        assert 1 << 20 in allocs(torch.cuda.memory._snapshot())  # kept after the window
        del before
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)


def test_operator_observer_is_built_for_this_torch():
    """cprof._torch_ops (operators with shapes, profile_memory's allocation reports) is built
    by setup.py against the torch it finds, and a failed build is optional: cprof then runs
    without operator shapes and allocation events, and test_op_shapes.py skips. On the GPU
    machine (torch 2.11+cu130, not the torch cprof is developed against) that must be loud."""
    pytest.importorskip("torch")
    from cprof import _ops
    mod, why = _ops.observer()
    assert mod is not None, (f"{why} -- on this machine: is g++ installed? see the build "
                             "log of `python setup.py build_ext --inplace` (gpu_check.sh: "
                             "build.log)")


def test_profile_memory_reports_cuda_allocations_per_operator(tmp_path):
    """profile_memory with CUDA: the caching allocator's reports of each tensor allocation and
    release are "[memory]" events on device 0 (Device Type 1), the ops that allocated carry
    them as CUDA Mem / Self CUDA Mem, and the table has torch's CUDA memory columns.
    The allocator reports the size of the block it hands out: 4 MiB when it splits a larger
    cached block or makes a new one, up to 1 MiB more when an earlier test left a free block
    of 4-5 MiB it takes whole (it splits large-pool blocks only past 1 MiB to spare)."""
    import torch

    import cprof
    torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    lo, hi = 4 << 20, 5 << 20
    with cprof.profile(activities=["CPU", "CUDA"], profile_memory=True) as p:
        a = torch.empty(1 << 20, device="cuda")  # 4 MiB
        b = a * 2
        del a, b
        torch.cuda.synchronize()
    empties = [e for e in p.events() if e.name == "aten::empty"]
    got = [e.device_memory_usage for e in empties if lo <= e.device_memory_usage <= hi]
    assert len(got) == 1, [(e.name, e.device_memory_usage) for e in empties]
    mul = [e for e in p.events() if e.name == "aten::mul"]
    assert mul and lo <= mul[0].device_memory_usage <= hi
    assert mul[0].cuda_memory_usage == mul[0].device_memory_usage
    table = p.key_averages().table(sort_by="self_cuda_memory_usage", row_limit=5)
    assert "CUDA Mem" in table and "Self CUDA Mem" in table
    assert re.search(r"\b4\.\d\d MB\b", table), table
    t = load_trace(p.export_chrome_trace(str(tmp_path / "m.json")))
    cuda = [e for e in t["traceEvents"] if e.get("name") == "[memory]"
            and e["args"]["Device Type"] == 1]
    sizes = sorted(e["args"]["Bytes"] for e in cuda if abs(e["args"]["Bytes"]) >= lo)
    # each tensor's allocation and its release, the same block size
    assert sorted(-s for s in sizes if s < 0) == sorted(s for s in sizes if s > 0), sizes
    assert sorted(s for s in sizes if s > 0) == sorted([got[0], mul[0].device_memory_usage])
    assert all(e["args"]["Device Id"] == 0 and e["args"]["Total Reserved"] > 0 for e in cuda)
    assert t["cprof"]["memory"]["cuda0_peak_allocated_bytes_reported"] >= 8 << 20
