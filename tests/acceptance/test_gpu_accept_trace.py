"""Black-box acceptance tests of cprof's GPU trace content, written from issue 3 / issue 5,
TRACE_FORMAT.md and Kineto's writer (libkineto/src/CuptiActivity.h, output_json.cpp,
DeviceProperties.cpp, CuptiActivityProfiler.cpp), driven through tests/fake_cupti.
Kept from a black-box audit (2026-11-25); five of its tests are left out, where cprof differs
from Kineto on purpose: "External id": 0 on unlinked GPU work (TRACE_FORMAT.md lists the key),
one flow per CUDA graph node, CUPTI overhead names, GPU records that end after the window kept
rather than dropped, and timestamps as CUPTI gives them."""
import json
import os
import shutil
import sys

import pytest

pytest.importorskip("torch")  # the scenarios import it (the suite's Python 3.12 pass has none)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fakegpu import X, load, meta, run  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _fake_library_built(fake_so):
    """tests/conftest.py builds the fake CUPTI library (a fresh clone has none yet)."""


BASIC = '''
import torch
prof = cprof.profile(activities=["CPU", "CUDA"])
with prof:
    with torch.profiler.record_function("outer"):
        t0 = C.now_ns() + 1000
        fake.fake_cupti_script_basic(t0, TID)
        time.sleep(0.002)
p = OUT + "/basic.pt.trace.json"
prof.export_chrome_trace(p)
RESULT.update(trace=p, t0=t0, pid=os.getpid(), tid=TID)
ka = prof.key_averages()
RESULT["ka"] = {k.key: [k.device_time_total, k.self_device_time_total, k.count] for k in ka}
'''


@pytest.fixture(scope="module")
def basic(tmp_path_factory):
    res, _ = run(BASIC, str(tmp_path_factory.mktemp("basic")))
    return res, load(res["trace"])


# ---------------------------------------------------------------- each kind, Kineto's args

KERNEL_ARGS = ("queued", "device", "context", "stream", "correlation", "registers per thread",
               "shared memory", "blocks per SM", "warps per SM", "grid", "block",
               "est. achieved occupancy %")  # CuptiActivity.h GpuActivity<Kernel>::metadataJson


def test_kernels_have_kinetos_args(basic):
    res, t = basic
    ks = X(t, "kernel")
    assert len(ks) == 7  # 4 launches, 2 graph nodes, 1 Triton (cuLaunchKernel)
    for k in ks:
        for key in KERNEL_ARGS:
            assert key in k["args"], (k["name"], key)
        assert (k["pid"], k["tid"]) == (k["args"]["device"], k["args"]["stream"])
        assert len(k["args"]["grid"]) == 3 and len(k["args"]["block"]) == 3
    names = {k["name"] for k in ks}
    assert "triton_poi_fused_add_0" in names
    assert "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_cublas" in names
    assert any(n.startswith("void at::native::reduce_kernel<512") for n in names)  # demangled
    gemm = [k for k in ks if k["name"].startswith("sm90") and "graph id" not in k["args"]][0]
    assert gemm["args"]["shared memory"] == 1024 and gemm["args"]["registers per thread"] == 40
    assert gemm["args"]["grid"] == [256, 1, 1] and gemm["dur"] == pytest.approx(45.0)


def test_graph_replayed_kernels_carry_graph_ids(basic):
    _, t = basic
    g = [k for k in X(t, "kernel") if k["args"].get("graph id")]
    assert sorted(k["args"]["graph node id"] for k in g) == [100, 101]
    assert all(k["args"]["correlation"] == 9 for k in g)


def test_memcpy_names_and_args(basic):
    _, t = basic
    cs = {c["name"]: c for c in X(t, "gpu_memcpy")}
    assert set(cs) == {"Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)"}
    for c in cs.values():
        for key in ("device", "context", "stream", "correlation", "bytes",
                    "memory bandwidth (GB/s)"):
            assert key in c["args"], key
        # Kineto: bytes / duration in ns == GB/s
        assert c["args"]["memory bandwidth (GB/s)"] == pytest.approx(
            c["args"]["bytes"] / (c["dur"] * 1000), rel=1e-3)
    assert cs["Memcpy HtoD (Pageable -> Device)"]["args"]["bytes"] == 4 << 20


def test_memset_name_and_args(basic):
    _, t = basic
    (m,) = X(t, "gpu_memset")
    assert m["name"] == "Memset (Device)"
    assert m["args"]["bytes"] == 1 << 20 and m["args"]["stream"] == 7 == m["tid"]
    assert "memory bandwidth (GB/s)" in m["args"]


def test_runtime_and_driver_calls(basic):
    res, t = basic
    rt = X(t, "cuda_runtime")
    assert sorted(e["name"] for e in rt) == sorted(
        ["cudaLaunchKernel"] * 4 + ["cudaMemcpyAsync"] * 2 +
        ["cudaMemsetAsync", "cudaStreamSynchronize", "cudaGraphLaunch"])
    (dr,) = X(t, "cuda_driver")
    assert dr["name"] == "cuLaunchKernel" and dr["args"]["cbid"] == 307
    for e in rt + [dr]:
        assert (e["pid"], e["tid"]) == (res["pid"], res["tid"])
        assert {"cbid", "correlation", "External id"} <= set(e["args"])


def test_stream_sync(basic):
    _, t = basic
    (s,) = X(t, "cuda_sync")
    assert s["name"] == "Stream Sync" and s["args"]["cuda_sync_kind"] == "Stream Sync"
    assert s["args"]["stream"] == 13 and s["args"]["correlation"] == 8
    assert (s["pid"], s["tid"]) == (0, 13)


# ---------------------------------------------------------------- tracks, device properties

def test_gpu_process_and_stream_tracks_are_named(basic):
    _, t = basic
    labels = {e["pid"]: e["args"]["labels"] for e in meta(t, "process_labels")}
    assert labels.get(0) == "GPU 0"
    tn = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta(t, "thread_name")}
    assert tn[(0, 7)].strip() == "stream 7" and tn[(0, 13)].strip() == "stream 13"
    sort = {e["pid"]: e["args"]["sort_index"] for e in meta(t, "process_sort_index")}
    assert sort[0] > max(v for p, v in sort.items() if p != 0)  # GPU tracks below the CPU


def test_device_properties_have_kinetos_fields(basic):
    """DeviceProperties.cpp createDevicePropertiesJson: id, name, totalGlobalMem, computeMajor,
    computeMinor, maxThreadsPerBlock, maxThreadsPerMultiprocessor, regsPerBlock, warpSize,
    sharedMemPerBlock, numSms, regsPerMultiprocessor, sharedMemPerBlockOptin,
    sharedMemPerMultiprocessor.  KNOWN_DIFF: sharedMemPerBlockOptin missing."""
    _, t = basic
    (d,) = t["deviceProperties"]
    want = {"id", "name", "totalGlobalMem", "computeMajor", "computeMinor", "maxThreadsPerBlock",
            "maxThreadsPerMultiprocessor", "regsPerBlock", "warpSize", "sharedMemPerBlock",
            "numSms", "regsPerMultiprocessor", "sharedMemPerBlockOptin",
            "sharedMemPerMultiprocessor"}
    assert want <= set(d), want - set(d)


# ---------------------------------------------------------------- linking

def test_every_gpu_op_has_a_flow_from_its_launch(basic):
    _, t = basic
    s = [e for e in t["traceEvents"] if e.get("ph") == "s" and e.get("cat") == "ac2g"]
    f = [e for e in t["traceEvents"] if e.get("ph") == "f" and e.get("cat") == "ac2g"]
    s_by_id = {e["id"]: e for e in s}
    launches = {e["args"]["correlation"]: e for e in X(t, "cuda_runtime") + X(t, "cuda_driver")}
    f_at = {(e["pid"], e["tid"], e["ts"]): e for e in f}
    for g in X(t, "kernel") + X(t, "gpu_memcpy") + X(t, "gpu_memset"):
        fe = f_at[(g["pid"], g["tid"], g["ts"])]
        assert fe["bp"] == "e"
        start = s_by_id[fe["id"]]
        launch = launches[g["args"]["correlation"]]
        assert (start["pid"], start["tid"], start["ts"]) == (launch["pid"], launch["tid"],
                                                              launch["ts"])


def test_gpu_work_links_to_the_innermost_range(basic):
    _, t = basic
    (outer,) = [e for e in X(t, "user_annotation") if e["name"] == "outer"]
    ext = outer["args"]["External id"]
    for g in X(t, "kernel") + X(t, "gpu_memcpy") + X(t, "gpu_memset") + X(t, "cuda_runtime"):
        assert g["args"]["External id"] == ext
    ann = X(t, "gpu_user_annotation")
    assert {(a["pid"], a["tid"]) for a in ann} == {(0, 7), (0, 13)}
    for a in ann:  # the span covers every GPU op of its stream linked to the range
        ops = [g for g in X(t, "kernel") + X(t, "gpu_memcpy") + X(t, "gpu_memset")
               if g["tid"] == a["tid"]]
        assert a["ts"] <= min(o["ts"] for o in ops) + 1e-3
        assert a["ts"] + a["dur"] >= max(o["ts"] + o["dur"] for o in ops) - 1e-3


def test_kernels_link_to_the_cpu_op_that_launched_them(tmp_path):
    res, _ = run('''
import torch
@torch.library.custom_op("gpuaccept::launch", mutates_args=())
def launch(x: torch.Tensor) -> torch.Tensor:
    t0 = C.now_ns() + 1000
    fake.fake_cupti_add_api(0, 211, us(t0,1), us(t0,2), TID, 77)
    fake.fake_cupti_add_kernel(b"k_in_op", us(t0,3), us(t0,4), 7, 77)
    time.sleep(0.0005)
    return x.clone()
prof = cprof.profile(activities=["CPU", "CUDA"])
with prof:
    with torch.profiler.record_function("outer"):
        torch.ops.gpuaccept.launch(torch.ones(3))
p = OUT + "/t.json"; prof.export_chrome_trace(p); RESULT["trace"] = p
RESULT["ka"] = {k.key: [k.device_time_total, k.self_device_time_total] for k in prof.key_averages()}
''', str(tmp_path))
    t = load(res["trace"])
    (op,) = [e for e in X(t, "cpu_op") if e["name"] == "gpuaccept::launch"]
    (k,) = X(t, "kernel")
    (launch,) = X(t, "cuda_runtime")
    assert k["args"]["External id"] == launch["args"]["External id"] == op["args"]["External id"]
    assert op["ts"] <= launch["ts"] <= op["ts"] + op["dur"]
    assert res["ka"]["gpuaccept::launch"] == [1.0, 1.0]
    assert res["ka"]["outer"] == [1.0, 0.0]


def test_peer_copy_names_both_devices(tmp_path):
    """CuptiActivity.h GpuActivity<CUpti_ActivityMemcpyPtoP>::metadataJson writes fromDevice,
    inDevice, toDevice, fromContext, inContext, toContext.  KNOWN_DIFF: cprof writes only
    device/context (the source), the destination device is nowhere in the trace."""
    res, _ = run('''
prof = cprof.profile(activities=["CPU", "CUDA"])
with prof:
    t0 = C.now_ns() + 1000
    fake.fake_cupti_add_api(0, 161, us(t0,1), us(t0,2), TID, 105)   # cudaMemcpyPeerAsync
    fake.fake_cupti_add_memcpy_p2p(1 << 20, us(t0,3), us(t0,5), 0, 1, 7, 105)
    time.sleep(0.001)
p = OUT + "/t.json"; prof.export_chrome_trace(p); RESULT["trace"] = p
''', str(tmp_path))
    (c,) = X(load(res["trace"]), "gpu_memcpy")
    assert c["name"] == "Memcpy PtoP (Device -> Device)"
    a = c["args"]
    assert (a.get("fromDevice"), a.get("toDevice")) == (0, 1), a


def test_copy_and_set_kind_names(tmp_path):
    res, _ = run('''
prof = cprof.profile(activities=["CPU", "CUDA"])
with prof:
    t0 = C.now_ns() + 1000
    fake.fake_cupti_add_memcpy(8, 3, 3, 4096, us(t0,1), us(t0,2), 7, 1, 1)   # DtoD
    fake.fake_cupti_add_memcpy(9, 2, 1, 4096, us(t0,3), us(t0,4), 7, 2, 0)   # HtoH
    fake.fake_cupti_add_memcpy(1, 2, 3, 4096, us(t0,5), us(t0,6), 7, 3, 1)   # HtoD pinned
    fake.fake_cupti_add_memset(0, 64, us(t0,7), us(t0,8), 7, 4, 5)          # managed
    time.sleep(0.001)
p = OUT + "/t.json"; prof.export_chrome_trace(p); RESULT["trace"] = p
''', str(tmp_path))
    t = load(res["trace"])
    assert sorted(c["name"] for c in X(t, "gpu_memcpy")) == [
        "Memcpy DtoD (Device -> Device)", "Memcpy HtoD (Pinned -> Device)",
        "Memcpy HtoH (Pinned -> Pageable)"]
    assert [m["name"] for m in X(t, "gpu_memset")] == ["Memset (Managed)"]


def test_launch_variants_and_context_sync(tmp_path):
    res, _ = run('''
prof = cprof.profile(activities=["CPU", "CUDA"])
with prof:
    t0 = C.now_ns() + 1000
    for n, (drv, cbid) in enumerate([(0, 430), (1, 652), (0, 269)]):
        fake.fake_cupti_add_api(drv, cbid, us(t0,10*n), us(t0,10*n+1), TID, 10+n)
        fake.fake_cupti_add_kernel(b"k%d" % n, us(t0,10*n+2), us(t0,10*n+3), 7, 10+n)
    fake.fake_cupti_add_api(0, 165, us(t0,40), us(t0,50), TID, 20)   # cudaDeviceSynchronize
    fake.fake_cupti_add_sync(4, us(t0,41), us(t0,49), 0, 20, 0xffffffff)
    time.sleep(0.001)
p = OUT + "/t.json"; prof.export_chrome_trace(p); RESULT["trace"] = p
''', str(tmp_path))
    t = load(res["trace"])
    names = {e["name"] for e in X(t, "cuda_runtime") + X(t, "cuda_driver")}
    assert {"cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaLaunchCooperativeKernel",
            "cudaDeviceSynchronize"} <= names
    assert len([e for e in t["traceEvents"] if e.get("ph") == "f"]) == 3
    (s,) = X(t, "cuda_sync")
    assert s["name"] == "Context Sync" and s["args"]["stream"] == -1


def test_nvtx_ranges_appear_and_link(tmp_path):
    # torch here is a CPU build: give torch.cuda.nvtx a working backend, as a CUDA build has
    res, _ = run('''
import torch, itertools
class _Stub:
    d = [0]
    @staticmethod
    def rangePushA(m): _Stub.d[0] += 1; return _Stub.d[0] - 1
    @staticmethod
    def rangePop(): _Stub.d[0] -= 1; return _Stub.d[0]
    @staticmethod
    def markA(m): pass
torch.cuda.nvtx._nvtx = _Stub()
prof = cprof.profile(activities=["CPU", "CUDA"])
with prof:
    torch.cuda.nvtx.range_push("pushed")
    t0 = C.now_ns() + 1000
    fake.fake_cupti_add_api(0, 211, us(t0,1), us(t0,2), TID, 5)
    fake.fake_cupti_add_kernel(b"k", us(t0,3), us(t0,4), 7, 5)
    time.sleep(0.001)
    torch.cuda.nvtx.range_pop()
    with torch.cuda.nvtx.range("ctx"):
        time.sleep(0.0005)
p = OUT + "/t.json"; prof.export_chrome_trace(p); RESULT["trace"] = p
''', str(tmp_path))
    t = load(res["trace"])
    ua = {e["name"]: e for e in X(t, "user_annotation")}
    assert {"pushed", "ctx"} <= set(ua)
    (k,) = X(t, "kernel")
    assert k["args"]["External id"] == ua["pushed"]["args"]["External id"]


# ---------------------------------------------------------------- time base, windows

def test_gpu_events_on_the_cpu_clock_inside_the_window(basic):
    res, t = basic
    (span,) = [e for e in X(t, "Trace")]
    lo, hi = span["ts"], span["ts"] + span["dur"]
    for g in X(t, "kernel") + X(t, "gpu_memcpy") + X(t, "gpu_memset") + X(t, "cuda_sync"):
        assert lo <= g["ts"] and g["ts"] + g["dur"] <= hi
    # the scripted times: the first launch at t0 + 10 µs (CPROF clock) -> ts
    (first,) = [e for e in X(t, "cuda_runtime") if e["args"]["correlation"] == 1]
    (k1,) = [e for e in X(t, "kernel") if e["args"]["correlation"] == 1]
    assert k1["ts"] - first["ts"] == pytest.approx(10.0, abs=1e-3)
    w = t["cprof"]["window"]
    assert t["baseTimeNanoseconds"] + span["ts"] * 1000 == pytest.approx(w["start_unix_ns"],
                                                                         abs=1000)


def test_schedule_windows_keep_their_own_gpu_records(tmp_path):
    res, _ = run('''
traces = []
def ready(p):
    path = OUT + "/w%d.json" % len(traces); p.export_chrome_trace(path); traces.append(path)
prof = cprof.profile(activities=["CPU", "CUDA"],
                     schedule=cprof.schedule(wait=1, warmup=1, active=1, repeat=2),
                     on_trace_ready=ready)
with prof:
    for step in range(6):
        t0 = C.now_ns() + 1000
        fake.fake_cupti_add_api(0, 211, us(t0,1), us(t0,2), TID, 100 + step)
        fake.fake_cupti_add_kernel(b"k_step%d" % step, us(t0,3), us(t0,4), 7, 100 + step)
        time.sleep(0.001)
        prof.step()
RESULT["traces"] = traces
''', str(tmp_path))
    got = [sorted(k["name"] for k in X(load(p), "kernel")) for p in res["traces"]]
    assert got == [["k_step2"], ["k_step5"]]
    for p in res["traces"]:
        t = load(p)
        steps = [e for e in X(t, "gpu_user_annotation") if e["name"].startswith("ProfilerStep#")]
        assert len(steps) == 1


def test_dropped_records_are_counted_and_warned(tmp_path):
    res, err = run('''
import warnings
prof = cprof.profile(activities=["CPU", "CUDA"])
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    with prof:
        t0 = C.now_ns() + 1000
        fake.fake_cupti_add_kernel(b"k", us(t0,1), us(t0,2), 7, 1)  # a buffer to complete
        fake.fake_cupti_set_dropped(5)
        time.sleep(0.001)
    RESULT["warnings"] = [str(x.message) for x in w]
p = OUT + "/t.json"; prof.export_chrome_trace(p); RESULT["trace"] = p
''', str(tmp_path))
    t = load(res["trace"])
    assert t["cprof"]["dropped"]["gpu_cupti"] == 5
    assert any("5 GPU activity records were dropped" in m for m in res["warnings"])


# ---------------------------------------------------------------- key_averages, HTA

def test_key_averages_cuda_columns(basic):
    res, _ = basic
    ka = res["ka"]
    assert ka["outer"][0] == pytest.approx(166.0)  # every kernel, copy and set it launched
    assert ka["triton_poi_fused_add_0"] == [5.0, 5.0, 1]
    gemm = ka["sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_cublas"]
    assert gemm == [64.0, 64.0, 2]
    assert ka["cudaLaunchKernel"][2] == 4


def test_hta_reads_the_gpu_trace(basic, tmp_path):
    pytest.importorskip("hta")
    import warnings
    warnings.filterwarnings("ignore")
    res, t = basic
    d = tmp_path / "hta"
    d.mkdir()
    shutil.copy(res["trace"], d / "rank0.pt.trace.json")
    from hta.trace_analysis import TraceAnalysis
    a = TraceAnalysis(trace_dir=str(d))
    kb = a.get_gpu_kernel_breakdown(visualize=False)[1]
    assert "triton_poi_fused_add_0" in set(kb["name"])
    ls = a.get_cuda_kernel_launch_stats(visualize=False)[0]
    assert len(ls) >= 7
    tb = a.get_temporal_breakdown(visualize=False)
    assert tb["compute_time(us)"].iloc[0] > 0
