"""Black-box tests of issue 3's GPU collection through the fake CUPTI / libcuda library.

Written from the issue and TRACE_FORMAT.md only: every scenario runs in a fresh interpreter
(the loader resolves once per process) that loads tests/fake_cupti/libfake_cupti.so through
CPROF_CUPTI_PATH / CPROF_LIBCUDA_PATH, scripts records with the fake's controls (ctypes on the
same mapped library), opens a cprof window and reports back what the test reads.
"""
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAKE_DIR = ROOT / "tests" / "fake_cupti"
FAKE = FAKE_DIR / "libfake_cupti.so"

MANGLED_FILL = ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayI"
                "PcLm1EEEEviT0_T1_")

PRELUDE = r'''
import ctypes, json, os, sys, threading, time, warnings
# the fake's controls, on the library cprof maps too (absent when a test gives cprof another)
fake = ctypes.CDLL(os.environ["BB_FAKE"]) if os.environ.get("BB_FAKE") else None
U64, U32, I32, U16, CP = (ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint16,
                          ctypes.c_char_p)
_sig = {
    "fake_cupti_add_kernel": [CP, U64, U64, U32, U32],
    "fake_cupti_add_kernel_ex": [CP, U64, U64, U32, U32, U32, U32, I32, I32, I32, I32, I32,
                                 I32, U16, I32, I32, U32, U64],
    "fake_cupti_add_graph_kernel": [CP, U64, U64, U32, U32, U32, U64],
    "fake_cupti_add_memcpy": [I32, I32, I32, U64, U64, U64, U32, U32, I32],
    "fake_cupti_add_memcpy_p2p": [U64, U64, U64, U32, U32, U32, U32],
    "fake_cupti_add_memset": [U32, U64, U64, U64, U32, U32, I32],
    "fake_cupti_add_api": [I32, I32, U64, U64, U32, U32],
    "fake_cupti_add_sync": [I32, U64, U64, U32, U32, U32],
    "fake_cupti_add_marker": [CP, CP, U32, U64, U64, U32],
    "fake_cupti_add_overhead": [I32, U64, U64, U32],
    "fake_cupti_add_memory": [I32, I32, U64, U64, U64, U32, U32],
    "fake_cupti_script_basic": [U64, U32],
    "fake_cupti_set_dropped": [U64],
    "fake_cupti_set_error": [CP, I32],
    "fake_cupti_set_other_subscriber": [CP],
    "fake_cupti_calls": [CP],
    "fake_cupti_api_enabled": [I32, U32],
}
if fake is not None:
    for _n, _a in _sig.items():
        getattr(fake, _n).argtypes = _a
    fake.fake_cupti_calls.restype = ctypes.c_int64
    fake.fake_cupti_enabled_kinds_mask.restype = U64
RESULT = {}
def kernel(name, start, end, stream=7, corr=0):
    return fake.fake_cupti_add_kernel(name.encode(), start, end, stream, corr)
def api(cbid, start, end, corr, driver=0, tid=None):
    return fake.fake_cupti_add_api(driver, cbid, start, end,
                                   threading.get_native_id() if tid is None else tid, corr)
'''

PRELUDE_CPROF = r'''
import cprof
from cprof import ProfilerActivity as A
now = cprof._C.now_ns
TID = threading.get_native_id()
OUT = os.environ["BB_OUT"]
US = 1000
def window(**kw):
    opts = dict(activities=[A.CPU, A.CUDA], output_dir=OUT, gzip=False, with_stack=False,
                record_shapes=False, verbose=False)
    opts.update(kw)
    return cprof.ProfilerContext(**opts)
def settle(t):
    """waits until cprof's clock has passed t (so a window closing now covers it)"""
    while now() <= t:
        time.sleep(0.0005)
'''

EPILOGUE = r'''
print("BB_RESULT " + json.dumps(RESULT, default=str))
'''


@pytest.fixture(scope="module")
def fake_lib():
    if sys.platform != "linux":
        pytest.skip("the fake CUPTI library is built for Linux")
    r = subprocess.run(["bash", str(FAKE_DIR / "build.sh")], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot build the fake CUPTI library: " + r.stderr[-500:])
    return str(FAKE)


def run_scenario(tmp_path, body, env=None, cupti=None, libcuda=None, cprof_first=False,
                 pre="", expect_rc=0):
    """Runs body in a fresh interpreter; returns (RESULT dict, completed process)."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    script = PRELUDE + textwrap.dedent(pre) + PRELUDE_CPROF + textwrap.dedent(body) + EPILOGUE
    path = tmp_path / "scenario.py"
    path.write_text(script)
    e = dict(os.environ)
    for k in list(e):
        if k.startswith(("CPROF_", "FAKE_CUPTI", "FAKE_CUDA")):
            del e[k]
    e["CPROF_CUPTI_PATH"] = cupti if cupti is not None else str(FAKE)
    e["CPROF_LIBCUDA_PATH"] = libcuda if libcuda is not None else str(FAKE)
    e["BB_OUT"] = str(out)
    if cupti is None:
        e["BB_FAKE"] = str(FAKE)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    p = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=e,
                       timeout=60, cwd=str(tmp_path))
    if expect_rc is not None:
        assert p.returncode == expect_rc, p.stdout[-3000:] + p.stderr[-3000:]
    res = {}
    for line in p.stdout.splitlines():
        if line.startswith("BB_RESULT "):
            res = json.loads(line[len("BB_RESULT "):])
    return res, p


def load(path):
    with open(path) as f:
        return json.load(f)


def events(trace, cat=None, ph="X", name=None):
    return [e for e in trace["traceEvents"]
            if (ph is None or e.get("ph") == ph) and (cat is None or e.get("cat") == cat)
            and (name is None or e.get("name") == name)]


def one(evs):
    assert len(evs) == 1, evs
    return evs[0]


def meta_names(trace, kind):
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == kind}


# ------------------------------------------------------------------------------ loading


def test_features_give_the_librarys_own_version(fake_lib, tmp_path):
    res, _ = run_scenario(tmp_path, 'RESULT["f"] = cprof.features()["gpu_activity"]',
                          env={"FAKE_CUPTI_API_VERSION": "130100"})
    f = res["f"]
    assert f["available"] is True, f
    assert os.path.realpath(f["cupti_path"]) == os.path.realpath(fake_lib)
    assert f["cupti_source"] == "CPROF_CUPTI_PATH"
    # what cuptiGetVersion says, not a compiled-in constant
    assert f["cupti_version"] == 130100


# A GPU that cannot be used is a clear message: a GpuUnavailableWarning naming it and a
# CPU-only trace with the reason in its metadata (docs/design.md decision 14).
UNAVAILABLE = r"""
f = cprof.features()["gpu_activity"]
RESULT["available"] = f["available"]
RESULT["reason"] = f["reason"]
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    with window() as p:
        with cprof.range("cpu_work"):
            pass
RESULT["warnings"] = [(x.category.__name__, str(x.message)) for x in w]
RESULT["trace"] = str(p.trace_path)
"""


@pytest.fixture(scope="module")
def stub_cupti(tmp_path_factory, fake_lib):
    """A library exporting only cuptiGetVersion: a CUPTI missing most of its symbols."""
    d = tmp_path_factory.mktemp("stub")
    src = d / "stub.c"
    src.write_text("#include <stdint.h>\n"
                   "int cuptiGetVersion(uint32_t *v) { *v = 130001; return 0; }\n")
    so = d / "libcupti_stub.so"
    r = subprocess.run([os.environ.get("CC", "gcc"), "-shared", "-fPIC", str(src), "-o", str(so)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("no C compiler: " + r.stderr[-300:])
    return str(so)


def test_library_missing_symbols_is_refused_by_name(stub_cupti, tmp_path):
    """CPROF_CUPTI_PATH naming a library that is not a whole CUPTI: refused, naming a function
    it lacks, with one warning and the CPU trace."""
    res, _ = run_scenario(tmp_path, UNAVAILABLE, cupti=stub_cupti)
    assert res["available"] is False
    missing = set(re.findall(r"cupti[A-Z]\w+", res["reason"])) - {"cuptiGetVersion"}
    assert missing and stub_cupti in res["reason"], res["reason"]
    warned = [m for c, m in res["warnings"] if c == "GpuUnavailableWarning"]
    assert len(warned) == 1 and missing.pop() in warned[0], res["warnings"]
    tr = load(res["trace"])
    assert stub_cupti in tr["cprof"]["gpu_unavailable"]
    assert one(events(tr, "user_annotation", name="cpu_work"))


# ------------------------------------------------------------------------------ lifecycle


def test_kinds_enabled_only_inside_the_window(fake_lib, tmp_path):
    """CONCURRENT_KERNEL (never the serialising KERNEL), MEMORY2 / MEMORY_POOL only with MEM,
    the timestamp callback in place while a window is open, and nothing held after it."""
    body = r'''
    RESULT["before"] = [fake.fake_cupti_subscribers(), fake.fake_cupti_enabled_kinds_mask()]
    with window():
        RESULT["plain"] = fake.fake_cupti_enabled_kinds_mask()
        RESULT["ts_cb"] = fake.fake_cupti_has_timestamp_callback()
    RESULT["after"] = [fake.fake_cupti_subscribers(), fake.fake_cupti_enabled_kinds_mask()]
    with window(activities=[A.CPU, A.CUDA, A.MEM]):
        RESULT["mem"] = fake.fake_cupti_enabled_kinds_mask()
    RESULT["after_mem"] = [fake.fake_cupti_subscribers(), fake.fake_cupti_enabled_kinds_mask()]
    '''
    res, _ = run_scenario(tmp_path, body)
    assert res["before"] == res["after"] == res["after_mem"] == [0, 0]
    assert res["ts_cb"] == 1
    plain, mem = res["plain"], res["mem"]
    for kind in (10, 1, 2, 38, 22):  # CONCURRENT_KERNEL, MEMCPY, MEMSET, SYNCHRONIZATION, MEMCPY2
        assert plain >> kind & 1 and mem >> kind & 1, kind
    assert not plain >> 3 & 1 and not mem >> 3 & 1, "KERNEL (serialising) enabled"
    assert not plain >> 49 & 1 and not plain >> 50 & 1
    assert mem >> 49 & 1 and mem >> 50 & 1


def test_api_records_only_for_ids_that_matter(fake_lib, tmp_path):
    body = r'''
    with window():
        on = fake.fake_cupti_api_enabled
        RESULT["wanted"] = {
            "cudaLaunchKernel": on(0, 211), "cudaLaunchKernelExC": on(0, 430),
            "cudaLaunchCooperativeKernel": on(0, 269), "cudaMemcpyAsync": on(0, 41),
            "cudaMemsetAsync": on(0, 51), "cudaStreamSynchronize": on(0, 131),
            "cudaDeviceSynchronize": on(0, 165), "cudaEventSynchronize": on(0, 137),
            "cudaStreamWaitEvent": on(0, 147), "cudaGraphLaunch": on(0, 311),
            "cudaMalloc": on(0, 20), "cudaFree": on(0, 22),
            "cuLaunchKernel": on(1, 307), "cuLaunchKernelEx": on(1, 652)}
        RESULT["unwanted"] = {"cudaGetDevice": on(0, 17), "cudaGetLastError": on(0, 10),
                              "cuDeviceGetAttribute": on(1, 9)}
    '''
    res, _ = run_scenario(tmp_path, body)
    assert all(res["wanted"].values()), res["wanted"]
    assert not any(res["unwanted"].values()), res["unwanted"]


# ------------------------------------------------------------------------------ trace content


def test_every_launch_variant_is_named_and_linked(fake_lib, tmp_path):
    """The issue's launch calls past cudaLaunchKernel (ExC, cooperative, the driver's Ex that
    Triton uses) each give a named API event with a flow to its kernel; malloc / free are
    recorded, with no flow (no GPU work)."""
    body = r'''
    with window() as p:
        t = now()
        for i, (driver, cbid) in enumerate(((0, 430), (0, 269), (1, 652))):
            api(cbid, t + (10 * i) * US, t + (10 * i + 1) * US, 200 + i, driver=driver)
            kernel("k%d" % i, t + (10 * i + 3) * US, t + (10 * i + 4) * US, 7, 200 + i)
        api(20, t + 40 * US, t + 41 * US, 210)
        api(22, t + 42 * US, t + 43 * US, 211)
        settle(t + 50 * US)
    RESULT["trace"] = str(p.trace_path)
    '''
    res, _ = run_scenario(tmp_path, body)
    tr = load(res["trace"])
    calls = {e["args"]["correlation"]: (e["cat"], e["name"])
             for e in events(tr, "cuda_runtime") + events(tr, "cuda_driver")}
    assert calls[200] == ("cuda_runtime", "cudaLaunchKernelExC")
    assert calls[201] == ("cuda_runtime", "cudaLaunchCooperativeKernel")
    assert calls[202] == ("cuda_driver", "cuLaunchKernelEx")
    assert calls[210] == ("cuda_runtime", "cudaMalloc")
    assert calls[211] == ("cuda_runtime", "cudaFree")
    starts = {e["id"] for e in events(tr, "ac2g", ph="s")}
    finishes = {e["id"] for e in events(tr, "ac2g", ph="f")}
    assert starts == finishes == {200, 201, 202}


def test_kernel_fields(fake_lib, tmp_path):
    body = r'''
    with window() as p:
        t = now()
        api(211, t + 1 * US, t + 3 * US, 41)
        fake.fake_cupti_add_kernel_ex(b"my_kernel", t + 10 * US, t + 25 * US, 0, 1, 21, 41,
                                      3, 2, 1, 64, 2, 2, 77, 1000, 24, 0, 0)
        settle(t + 30 * US)
    RESULT["trace"] = str(p.trace_path)
    '''
    res, _ = run_scenario(tmp_path, body)
    tr = load(res["trace"])
    k = one(events(tr, "kernel", name="my_kernel"))
    a = k["args"]
    assert (k["pid"], k["tid"]) == (0, 21)
    assert a["grid"] == [3, 2, 1] and a["block"] == [64, 2, 2]
    assert a["registers per thread"] == 77
    assert a["shared memory"] == 1024  # static + dynamic
    assert a["stream"] == 21 and a["device"] == 0 and a["correlation"] == 41
    assert "context" in a and "queued" in a
    assert k["dur"] == pytest.approx(15.0, abs=1e-3)


def test_copy_set_and_sync_names_past_the_basic_script(fake_lib, tmp_path):
    """Kineto's names for the kinds the canonical script does not make: the issue's own
    example "Memcpy HtoD (Pinned -> Device)", DtoD, HtoH, a peer copy, a set of managed
    memory, a context synchronize; a zero-length copy has a finite bandwidth (strict JSON)."""
    body = r'''
    with window() as p:
        t = now()
        fake.fake_cupti_add_memcpy(1, 2, 3, 1000, t + 10 * US, t + 11 * US, 7, 0, 1)
        fake.fake_cupti_add_memcpy(8, 3, 3, 2000, t + 12 * US, t + 13 * US, 7, 0, 1)
        fake.fake_cupti_add_memcpy(9, 2, 2, 3000, t + 14 * US, t + 15 * US, 7, 0, 0)
        fake.fake_cupti_add_memcpy_p2p(4000, t + 16 * US, t + 17 * US, 0, 1, 7, 0)
        fake.fake_cupti_add_memcpy(1, 1, 3, 5000, t + 18 * US, t + 18 * US, 7, 0, 0)
        fake.fake_cupti_add_memset(0, 6000, t + 20 * US, t + 21 * US, 7, 0, 5)
        fake.fake_cupti_add_sync(4, t + 30 * US, t + 40 * US, 7, 51, 0xffffffff)
        settle(t + 50 * US)
    RESULT["trace"] = str(p.trace_path)
    '''
    res, _ = run_scenario(tmp_path, body)
    with open(res["trace"]) as f:
        text = f.read()

    def no_constants(c):
        raise AssertionError("not JSON: " + c)
    tr = json.loads(text, parse_constant=no_constants)
    copies = {e["args"]["bytes"]: e["name"] for e in events(tr, "gpu_memcpy")}
    assert copies[1000] == "Memcpy HtoD (Pinned -> Device)"
    assert copies[2000] == "Memcpy DtoD (Device -> Device)"
    assert copies[3000] == "Memcpy HtoH (Pinned -> Pinned)"
    assert "PtoP" in copies[4000]
    assert copies[5000] == "Memcpy HtoD (Pageable -> Device)"
    (zero,) = [e for e in events(tr, "gpu_memcpy") if e["args"]["bytes"] == 5000]
    assert zero["args"]["memory bandwidth (GB/s)"] == 0
    assert one(events(tr, "gpu_memset"))["name"] == "Memset (Managed)"
    assert one(events(tr, "cuda_sync"))["name"] == "Context Sync"


def test_one_process_per_gpu_thread_per_stream_named(fake_lib, tmp_path):
    body = r'''
    with window() as p:
        t = now()
        for dev, stream in ((0, 7), (0, 13), (1, 22)):
            fake.fake_cupti_add_kernel_ex(b"k%d_%d" % (dev, stream), t + 10 * US, t + 20 * US,
                                          dev, 1, stream, 0, 1, 1, 1, 32, 1, 1, 16, 0, 0, 0, 0)
        settle(t + 30 * US)
    RESULT["trace"] = str(p.trace_path)
    '''
    res, _ = run_scenario(tmp_path, body)
    tr = load(res["trace"])
    ks = {e["name"]: (e["pid"], e["tid"]) for e in events(tr, "kernel")}
    assert ks == {"k0_7": (0, 7), "k0_13": (0, 13), "k1_22": (1, 22)}
    pn = meta_names(tr, "process_name")
    assert "0" in pn.get((0, 0), "") and "GPU" in pn.get((0, 0), ""), pn
    assert "1" in pn.get((1, 0), "") and "GPU" in pn.get((1, 0), ""), pn
    tn = meta_names(tr, "thread_name")
    for pid, tid in ks.values():
        assert str(tid) in tn.get((pid, tid), ""), (pid, tid, tn)


def test_weird_kernel_name_stays_valid_json(fake_lib, tmp_path):
    body = r'''
    with window() as p:
        t = now()
        kernel('we"ird\\ker\nnel\t\x01é', t + 10 * US, t + 20 * US)
        settle(t + 30 * US)
    RESULT["trace"] = str(p.trace_path)
    '''
    res, _ = run_scenario(tmp_path, body)
    tr = load(res["trace"])
    assert [e["name"] for e in events(tr, "kernel")] == ['we"ird\\ker\nnel\t\x01é']


# ------------------------------------------------------------------------------ linking


def test_external_id_is_the_range_open_at_launch_not_at_execution(fake_lib, tmp_path):
    """Work takes the innermost range open on the launching thread when the launch call ran,
    whenever it executes: inner / outer / none for launches made there, and none for work
    launched before a range that runs while it is open."""
    body = r'''
    with window() as p:
        z = now(); api(211, z, z + 1000, 60)
        with cprof.range("later"):
            kernel("k60", now() + 1 * US, now() + 2 * US, 7, 60)
            settle(now() + 5 * US)
        with cprof.range("outer"):
            with cprof.range("inner"):
                a = now(); api(211, a, a + 1000, 61)
            b = now(); api(211, b, b + 1000, 62)
        c = now(); api(211, c, c + 1000, 63)
        for i, corr in enumerate((61, 62, 63)):
            kernel("k%d" % corr, c + (10 + 10 * i) * US, c + (15 + 10 * i) * US, 7, corr)
        settle(c + 60 * US)
    RESULT["trace"] = str(p.trace_path)
    '''
    res, _ = run_scenario(tmp_path, body)
    tr = load(res["trace"])
    ua = {e["name"]: e["args"]["External id"] for e in events(tr, "user_annotation")}
    assert ua["inner"] != ua["outer"]
    ext = {e["name"]: e["args"].get("External id") for e in events(tr, "kernel")}
    assert ext["k61"] == ua["inner"]
    assert ext["k62"] == ua["outer"]
    assert ext["k63"] not in ua.values()
    assert ext["k60"] not in ua.values()
    rt = {e["args"]["correlation"]: e["args"].get("External id")
          for e in events(tr, "cuda_runtime")}
    assert rt[61] == ua["inner"] and rt[62] == ua["outer"]
    spans = {e["name"] for e in events(tr, "gpu_user_annotation")}
    assert "later" not in spans and "inner" in spans


# ------------------------------------------------------------------------------ drops, windows


def test_many_windows_nothing_leaks_into_the_next(fake_lib, tmp_path):
    body = r'''
    traces = []
    for i in range(3):
        with window(profile_name="w%d" % i) as p:
            t = now()
            with cprof.range("r%d" % i):
                a = now(); api(211, a, a + 1000, 100 + i)
            kernel("k%d" % i, t + 10 * US, t + 20 * US, 7, 100 + i)
            # launched in this window, runs after it ends: never the next window's
            kernel("late%d" % i, now() + 200000 * US, now() + 200001 * US, 7, 0)
            settle(t + 30 * US)
        traces.append(str(p.trace_path))
        # made between windows: CUPTI is off, nothing may be created or kept
        RESULT.setdefault("between", []).append(kernel("between%d" % i, now(), now() + 1000))
        time.sleep(0.05)
    RESULT["traces"] = traces
    '''
    res, _ = run_scenario(tmp_path, body)
    assert res["between"] == [0, 0, 0]
    for i, path in enumerate(res["traces"]):
        tr = load(path)
        names = {e["name"] for e in events(tr, "kernel")}
        assert names == {"k%d" % i}, (i, names)
        assert [e["name"] for e in events(tr, "user_annotation")] == ["r%d" % i]
        assert {e["args"]["correlation"] for e in events(tr, "cuda_runtime")} == {100 + i}


def test_schedule_writes_one_trace_per_cycle_with_its_own_records(fake_lib, tmp_path):
    body = r'''
    handler = cprof.tensorboard_trace_handler(OUT, worker_name="w")
    with cprof.profile(activities=[A.CPU, A.CUDA],
                       schedule=cprof.schedule(wait=1, warmup=0, active=1, repeat=3),
                       on_trace_ready=handler) as prof:
        for step in range(6):
            t = now()
            kernel("step%d" % step, t + 1 * US, t + 2 * US)
            settle(t + 5 * US)
            prof.step()
    '''
    res, _ = run_scenario(tmp_path, body)
    files = sorted((tmp_path / "out").glob("*.pt.trace.json*"))
    assert len(files) == 3, files
    got = []
    for f in files:
        tr = load(f)
        got.append(sorted(e["name"] for e in events(tr, "kernel")))
    assert sorted(got) == [["step1"], ["step3"], ["step5"]], got


def test_overhead_counts_cuptis_own_cost_only(fake_lib, tmp_path):
    """OVERHEAD records are written (cat "overhead", on their thread); the metadata's
    cupti_overhead_ns is CUPTI's own cost: the driver's JIT compiling that CUPTI reports in the
    same kind is shown but neither counted in it nor labelled as CUPTI's."""
    body = r'''
    with window() as p:
        t = now()
        RESULT["created"] = [
            fake.fake_cupti_add_overhead(1 << 16, t + 10 * US, t + 13 * US, TID),  # buffer flush
            fake.fake_cupti_add_overhead(1, t + 20 * US, t + 21 * US, TID)]  # driver compiler
        settle(t + 30 * US)
    RESULT["trace"] = str(p.trace_path)
    RESULT["tid"] = TID
    '''
    res, _ = run_scenario(tmp_path, body)
    assert res["created"] == [1, 1], "OVERHEAD kind not enabled"
    tr = load(res["trace"])
    ov = {e["name"]: e for e in events(tr, "overhead")}
    assert set(ov) == {"CUPTI buffer flush", "Driver compiler"}
    assert all(e["tid"] == res["tid"] for e in ov.values())
    assert ov["CUPTI buffer flush"]["dur"] == pytest.approx(3.0, abs=1e-3)
    assert "CUPTI's own" in ov["CUPTI buffer flush"]["args"]["cprof"]
    assert "CUPTI's own" not in ov["Driver compiler"]["args"]["cprof"]
    assert tr["cprof"]["gpu"]["cupti_overhead_ns"] == 3000


# ------------------------------------------------------------------------------ failure modes


def test_an_exception_in_the_window_keeps_gpu_records(fake_lib, tmp_path):
    exc = "RuntimeError('boom')"  # KeyboardInterrupt: test_gpu_fake.py
    body = r'''
    p = window()
    try:
        with p:
            t = now()
            api(211, t + 1 * US, t + 2 * US, 81)
            kernel("before_exc", t + 5 * US, t + 9 * US, 7, 81)
            settle(t + 10 * US)
            raise %s
    except BaseException as e:
        RESULT["caught"] = type(e).__name__
    RESULT["trace"] = str(p.trace_path)
    ''' % exc
    res, _ = run_scenario(tmp_path, body)
    assert res["caught"] == "RuntimeError"
    tr = load(res["trace"])
    k = one(events(tr, "kernel", name="before_exc"))
    assert any(e["id"] == 81 for e in events(tr, "ac2g", ph="s"))
    assert k["args"]["correlation"] == 81
    assert tr["cprof"]["partial"] is True and tr["cprof"]["end"] == "RuntimeError"
