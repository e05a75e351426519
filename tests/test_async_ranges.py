"""torch's async ranges (csrc/events.c async_open / async_close, csrc/torch_ops.cpp add_async):
the user-scope RecordFunctions torch.distributed's process groups open around collectives,
begun on one thread and ended on any, as user_annotation ranges of the opening thread.

The store's side is driven here through the C functions cprof._C lends the observer (op_api.h),
with ctypes, so the cross-thread and window-boundary cases are exact; the torch side with a
one-rank gloo group in a fresh interpreter."""
import ctypes
import threading

import pytest

import cprof
from cprof import _C
from tests.conftest import load_trace, ranges_of, run_ops_snippet

E_EMPTY = -4  # CPROF_E_EMPTY


class _Api(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("name_id", ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_char_p)),
        ("intern", ctypes.c_void_p),
        ("text", ctypes.c_void_p),
        ("push_op", ctypes.c_void_p),
        ("pop_op", ctypes.c_void_p),
        ("cpu_on", ctypes.CFUNCTYPE(ctypes.c_int)),
        ("push_op_seq", ctypes.c_void_p),
        ("async_open", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint32,
                                        ctypes.POINTER(ctypes.c_uint64))),
        ("async_close", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64)),
        ("mem_event", ctypes.c_void_p),
    ]


@pytest.fixture(scope="module")
def api():
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    a = ctypes.cast(get(_C._op_api, b"cprof._C._op_api"), ctypes.POINTER(_Api)).contents
    assert a.version == 4 and a.size == ctypes.sizeof(_Api)
    return a


def _open(api, name):
    h = ctypes.c_uint64(0)
    assert api.async_open(api.name_id(name.encode()), ctypes.byref(h)) == 0
    return h.value


def _on_thread(fn):
    out = {}

    def run():
        out["tid"] = threading.get_native_id()
        out["value"] = fn()

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out


def test_a_range_ended_on_another_thread_belongs_to_the_opening_thread(api, tmp_path):
    with cprof.profile(activities=["CPU"]) as p:
        with cprof.range("outer"):
            h = _open(api, "test:async")
            assert h != 0
        closer = _on_thread(lambda: api.async_close(h))
        assert closer["value"] == 0
        assert api.async_close(h) == E_EMPTY  # closed once
    path = tmp_path / "t.json"
    p.export_chrome_trace(str(path))
    t = load_trace(path)
    ev = {e["name"]: e for e in ranges_of(t)}
    r, outer = ev["test:async"], ev["outer"]
    assert r["cat"] == "user_annotation" and r["tid"] == outer["tid"] == threading.get_native_id()
    # it began inside "outer" and ended after it, on the other thread's close
    assert outer["ts"] <= r["ts"] <= outer["ts"] + outer["dur"]
    assert r["ts"] + r["dur"] > outer["ts"] + outer["dur"]
    assert "cprof truncated" not in r.get("args", {})
    assert closer["tid"] not in {e["tid"] for e in ranges_of(t)}


def test_a_range_still_open_at_stop_ends_with_the_window(api, tmp_path):
    with cprof.profile(activities=["CPU"]) as p:
        opened = _on_thread(lambda: _open(api, "test:late"))
        h = opened["value"]
        assert h != 0
    # the collective completes after the window: nothing to close, no snapshot touched
    assert api.async_close(h) == E_EMPTY
    path = tmp_path / "t.json"
    p.export_chrome_trace(str(path))
    t = load_trace(path)
    (r,) = [e for e in ranges_of(t) if e["name"] == "test:late"]
    assert r["tid"] == opened["tid"]
    assert r["args"].get("cprof truncated") == 1
    # torch's mark of an unfinished collective, which tools skip them by (multiproc audit M3)
    assert r["args"].get("finished") is False
    (win,) = [e for e in t["traceEvents"] if e.get("cat") == "Trace"]
    assert abs((r["ts"] + r["dur"]) - (win["ts"] + win["dur"])) < 50  # us


def test_nothing_is_recorded_outside_a_window(api):
    h = ctypes.c_uint64(7)
    assert api.async_open(api.name_id(b"test:outside"), ctypes.byref(h)) == 0
    assert h.value == 0
    assert api.async_close(0) == E_EMPTY


def test_many_open_at_once_from_many_threads(api, tmp_path):
    """More open at once than the table's first size, closed out of order from other threads."""
    n = 40
    with cprof.profile(activities=["CPU"]) as p:
        handles = [_open(api, f"test:many{i}") for i in range(n)]
        assert len(set(handles)) == n and 0 not in handles
        rcs = _on_thread(lambda: [api.async_close(h) for h in reversed(handles[::2])])
        rcs2 = _on_thread(lambda: [api.async_close(h) for h in handles[1::2]])
        assert rcs["value"] == [0] * (n // 2) and rcs2["value"] == [0] * (n // 2)
    path = tmp_path / "t.json"
    p.export_chrome_trace(str(path))
    t = load_trace(path)
    got = [e for e in ranges_of(t) if e["name"].startswith("test:many")]
    assert len(got) == n
    assert not any("cprof truncated" in e.get("args", {}) for e in got)


GLOO_ONE_RANK = """
import json, os, tempfile
import torch, torch.distributed as dist
import cprof
store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
x = torch.ones(16)
res = []
for window in range(2):
    with cprof.profile(activities=["CPU"], record_shapes={shapes}) as p:
        with torch.profiler.record_function("user_rf"):
            dist.all_reduce(x)
        w = dist.all_reduce(x, async_op=True)
        w.wait()
        dist.barrier()
    path = os.path.join(tempfile.mkdtemp(), "t.json")
    p.export_chrome_trace(path)
    t = json.load(open(path))
    ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
    res.append({{"names": sorted(e["name"] for e in ev
                                if e["name"].startswith("gloo:") or e["name"] == "user_rf"),
                "cats": sorted({{e["cat"] for e in ev if e["name"].startswith("gloo:")}}),
                "ops": t["cprof"].get("ops")}})
# outside a window: recorded nowhere, and no error
dist.all_reduce(x)
dist.destroy_process_group()
print(json.dumps(res))
"""


@pytest.mark.parametrize("shapes", [False, True], ids=["names", "shapes"])
def test_gloo_collectives_in_each_window_once(tmp_path, shapes):
    pytest.importorskip("torch.distributed")
    try:
        from cprof import _torch_ops  # noqa: F401
    except ImportError as err:
        pytest.skip(f"cprof._torch_ops is not built: {err}")
    res, _ = run_ops_snippet(GLOO_ONE_RANK.format(shapes=shapes), cwd=tmp_path)
    for r in res:  # the second window proves the first one's callback was removed
        assert r["names"] == ["gloo:all_reduce", "gloo:all_reduce", "gloo:barrier", "user_rf"]
        assert r["cats"] == ["user_annotation"]
        assert r["ops"]["async_ranges"] is True


NCCL_ONE_RANK = """
import json, os, tempfile
import torch, torch.distributed as dist
import cprof
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29533")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)  # NCCL's communicator is made outside the window
torch.cuda.synchronize()
with cprof.profile(activities=["CPU", "CUDA"]) as p:
    for _ in range(3):
        dist.all_reduce(x)
    torch.cuda.synchronize()
path = os.path.join(tempfile.mkdtemp(), "t.json")
p.export_chrome_trace(path)
t = json.load(open(path))
ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
coll = [e for e in ev if e["name"].startswith("nccl:")]
print(json.dumps({"coll": [[e["name"], e["cat"], e["dur"], e.get("args", {})] for e in coll],
                  "kernels": sum(1 for e in ev if e.get("cat") == "kernel"
                                 and "nccl" in e["name"].lower()),
                  "ops": t["cprof"].get("ops")}))
dist.destroy_process_group()
"""


@pytest.mark.gpu
def test_nccl_collectives_on_a_gpu(tmp_path):
    """One-rank NCCL on the GPU machine: each all_reduce is an nccl:all_reduce range (torch
    begins it on the calling thread and ends it from the work's completion), and its kernel."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or not cprof.features()["gpu_activity"]["available"]:
        pytest.skip("needs a CUDA GPU and CUPTI")
    import torch.distributed as dist
    if not dist.is_nccl_available():
        pytest.skip("torch has no NCCL")
    try:
        from cprof import _torch_ops  # noqa: F401
    except ImportError as err:
        pytest.skip(f"cprof._torch_ops is not built: {err}")
    res, _ = run_ops_snippet(NCCL_ONE_RANK, cwd=tmp_path)
    assert res["ops"]["async_ranges"] is True
    names = [c[0] for c in res["coll"]]
    assert names == ["nccl:all_reduce"] * 3, res
    assert all(c[1] == "user_annotation" and c[2] > 0 for c in res["coll"]), res
    assert res["kernels"] >= 3, res


# ---- events(): a range that ends on another thread is async, as torch.profiler's ----

def _async_of(events, name):
    (ev,) = [e for e in events if e.name == name]
    return ev


def test_async_ranges_are_out_of_the_cpu_tree_in_events(api):
    """torch's is_async ranges (start and end threads differ, or a torch async RecordFunction):
    no self CPU time, no parent, no children; what runs meanwhile on the opening thread nests
    in what encloses the async range, and its time is self time there."""
    import time
    with cprof.profile(activities=["CPU"]) as p:
        with cprof.range("outer"):
            h = _open(api, "test:async")
            token = _C.open_range("future_region")  # record_function's, ended by a future
            ident = threading.get_ident()
            with cprof.range("meanwhile"):
                time.sleep(0.01)
            same = _C.open_range("ended_here")
            _C.close_range(same, ident)  # the opening thread: an ordinary range
            assert _on_thread(lambda: api.async_close(h))["value"] == 0
            _on_thread(lambda: _C.close_range(token, ident))
    ev = p.events()
    outer, meanwhile = _async_of(ev, "outer"), _async_of(ev, "meanwhile")
    for name in ("test:async", "future_region"):
        a = _async_of(ev, name)
        assert a.is_async is True, name
        assert a.self_cpu_time_total == 0 and a.cpu_children == [] and a.cpu_parent is None
        assert a.cpu_time_total >= 10_000  # its wall time stays its total
        assert a not in outer.cpu_children
    assert _async_of(ev, "ended_here").is_async is False
    assert meanwhile.cpu_parent is outer
    assert outer.self_cpu_time_total == pytest.approx(
        outer.cpu_time_total - sum(c.cpu_time_total for c in outer.cpu_children))
    assert ev.self_cpu_time_total == pytest.approx(
        sum(e.self_cpu_time_total for e in ev if not e.is_async))
    rows = {r.key: r for r in p.key_averages()}
    assert rows["future_region"].is_async and rows["future_region"].self_cpu_time_total == 0
    assert not rows["outer"].is_async
    top = p.key_averages().table(top_level_events_only=True, row_limit=-1)
    assert "future_region" in top and "meanwhile" not in top


def _rf_future_work(torch, other_thread):
    import time
    from torch.futures import Future
    fut = Future()
    if not other_thread:
        fut.set_result(1)  # done already: its callbacks run here, on the opening thread
    with torch.profiler.record_function("async_region_name_long") as rf:
        out = rf._call_end_callbacks_on_future(fut)
    t = threading.Thread(target=lambda: (time.sleep(0.03), fut.done() or fut.set_result(1)))
    t.start()
    x = torch.randn(64, 64)
    x @ x  # on the opening thread while the range is open
    t.join()
    out.wait()


@pytest.mark.parametrize("other_thread", [True, False], ids=["other_thread", "same_thread"])
def test_record_function_ended_by_a_future_is_async_as_torchs(other_thread):
    """DDP's and RPC's pattern: torch marks the range is_async when the future completes on
    another thread (no self time, out of the CPU tree), and not when it was done already."""
    torch = pytest.importorskip("torch")
    got = {}
    for label, prof in (("torch", torch.profiler.profile), ("cprof", cprof.profile)):
        with prof(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
            _rf_future_work(torch, other_thread)
        ev = p.events()
        a = _async_of(ev, "async_region_name_long")
        mm = [e for e in ev if e.name == "aten::matmul"][0]
        top = p.key_averages().table(top_level_events_only=True, row_limit=-1)
        got[label] = {
            "is_async": a.is_async, "self_zero": a.self_cpu_time_total == 0,
            "children": sorted(c.name for c in a.cpu_children),
            "matmul_parent": mm.cpu_parent and mm.cpu_parent.name,
            "top_has_matmul": " aten::matmul " in top,
            "avg_async": {r.key: r for r in p.key_averages()}["async_region_name_long"].is_async,
        }
    assert got["cprof"] == got["torch"]
    assert got["cprof"]["is_async"] is other_thread


GLOO_ASYNC_EVENTS = """
import json, os, tempfile
import torch, torch.distributed as dist
import cprof
store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
x = torch.randn(1 << 16)
out = {}
for label, prof in (("torch", torch.profiler.profile), ("cprof", cprof.profile)):
    with prof(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        for _ in range(3):
            w = dist.all_reduce(x, async_op=True)
            (x * 2).sum()
            w.wait()
    g = [e for e in p.events() if e.name.startswith("gloo:")]
    row = [r for r in p.key_averages() if r.key == "gloo:all_reduce"][0]
    out[label] = {"n": len(g), "async": sorted({e.is_async for e in g}),
                  "self": sorted({e.self_cpu_time_total for e in g}),
                  "children": sum(len(e.cpu_children) for e in g),
                  "parents": sum(e.cpu_parent is not None for e in g),
                  "row": [row.is_async, row.self_cpu_time_total]}
dist.destroy_process_group()
print(json.dumps(out))
"""


def test_gloo_collective_ranges_are_async_in_events_as_torchs(tmp_path):
    """torch marks its async RecordFunctions is_async whatever thread ends them: their wall
    time (the wait for the other ranks) is no self CPU time of theirs."""
    pytest.importorskip("torch.distributed")
    try:
        from cprof import _torch_ops  # noqa: F401
    except ImportError as err:
        pytest.skip(f"cprof._torch_ops is not built: {err}")
    res, _ = run_ops_snippet(GLOO_ASYNC_EVENTS, cwd=tmp_path)
    assert res["cprof"] == res["torch"]
    assert res["cprof"]["async"] == [True] and res["cprof"]["self"] == [0]
