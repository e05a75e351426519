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
