"""Acceptance tests: issue 3 trace content (TRACE_FORMAT.md), on CPU through the fake CUPTI library."""
import os, subprocess, sys, textwrap
import pytest
from accept_helpers import load_trace, CLONE


SCRIPT = textwrap.dedent("""
    import ctypes, os, sys, threading, time, json
    import cprof
    from cprof import _C as C
    fake = ctypes.CDLL(os.environ["CPROF_CUPTI_PATH"])
    fake.fake_cupti_script_basic.argtypes = [ctypes.c_uint64, ctypes.c_uint32]
    with cprof.ProfilerContext(output_dir=sys.argv[1], profile_name="g", with_stack=False) as p:
        with cprof.range("step"):
            with cprof.range("launches"):
                t0 = C.now_ns() + 1000
                fake.fake_cupti_script_basic(t0, threading.get_native_id())
                time.sleep(0.002)
    print("TRACE", p.trace_path)
""")


@pytest.fixture(scope="module")
def trace(tmp_path_factory, fake_so):  # fake_so: tests/conftest.py builds it
    d = tmp_path_factory.mktemp("g")
    s = d / "s.py"
    s.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=CLONE, CPROF_CUPTI_PATH=fake_so, CPROF_LIBCUDA_PATH=fake_so)
    for k in ("RANK", "WORLD_SIZE", "NVTX_INJECTION64_PATH"):
        env.pop(k, None)
    r = subprocess.run([sys.executable, str(s), str(d)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    path = [l.split(" ", 1)[1] for l in r.stdout.splitlines() if l.startswith("TRACE ")][0]
    return load_trace(path)


def X(t, cat):
    return [e for e in t["traceEvents"] if e.get("ph") == "X" and e.get("cat") == cat]


def test_device_properties(trace):
    dp = trace.get("deviceProperties")
    assert isinstance(dp, list) and dp
    for k in ("id", "name", "totalGlobalMem", "computeMajor", "computeMinor", "maxThreadsPerBlock", "numSms"):
        assert k in dp[0], k


def test_kernel_args(trace):
    ks = X(trace, "kernel")
    assert ks
    for k in ks:
        for a in ("device", "context", "stream", "correlation", "External id", "registers per thread", "shared memory", "grid", "block", "queued"):
            assert a in k["args"], a
        assert k["pid"] == k["args"]["device"] and k["tid"] == k["args"]["stream"]


def test_memcpy_memset_args(trace):
    for cat in ("gpu_memcpy", "gpu_memset"):
        evs = X(trace, cat)
        assert evs, cat
        for e in evs:
            for a in ("device", "context", "stream", "correlation", "bytes", "memory bandwidth (GB/s)"):
                assert a in e["args"], (cat, a)
    names = {e["name"] for e in X(trace, "gpu_memcpy")}
    assert all(n.startswith("Memcpy ") and "(" in n for n in names), names
    assert {e["name"] for e in X(trace, "gpu_memset")} <= {"Memset (Device)", "Memset (Pinned)", "Memset (Pageable)", "Memset (Managed)", "Memset (Unknown)"}


def test_runtime_args(trace):
    rs = X(trace, "cuda_runtime") + X(trace, "cuda_driver")
    assert rs
    for r in rs:
        for a in ("cbid", "correlation"):
            assert a in r["args"], a


def test_flows_pair_every_gpu_op(trace):
    ev = trace["traceEvents"]
    s = {e["id"]: e for e in ev if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    f = {e["id"]: e for e in ev if e.get("ph") == "f" and e.get("cat") == "ac2g"}
    assert s and set(s) == set(f)
    for e in f.values():
        assert e.get("bp") == "e" and e["name"] == "ac2g"
    gpu = X(trace, "kernel") + X(trace, "gpu_memcpy") + X(trace, "gpu_memset")
    launches = {r["args"]["correlation"]: r for r in X(trace, "cuda_runtime") + X(trace, "cuda_driver")}
    for g in gpu:
        c = g["args"]["correlation"]
        if c not in launches:
            continue
        # a flow from the launch to the GPU op
        fl = [i for i, e in f.items() if e["pid"] == g["pid"] and e["tid"] == g["tid"] and abs(e["ts"] - g["ts"]) < 1e-3]
        assert fl, g["name"]
        st = s[fl[0]]
        L = launches[c]
        assert st["pid"] == L["pid"] and st["tid"] == L["tid"]
        assert L["ts"] <= st["ts"] <= L["ts"] + L["dur"] + 1e-3
        # a kernel never appears to start before its launch call begins
        assert g["ts"] >= L["ts"]


def test_external_id_innermost_range(trace):
    ua = {e["name"]: e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") in ("launches", "step")}
    assert "External id" in ua["launches"].get("args", {}), ua["launches"]
    ext = ua["launches"]["args"]["External id"]
    ks = X(trace, "kernel")
    linked = [k for k in ks if k["args"].get("External id") == ext]
    assert linked


def test_gpu_process_and_stream_names(trace):
    meta = [e for e in trace["traceEvents"] if e.get("ph") == "M"]
    gpu_pids = {k["pid"] for k in X(trace, "kernel")}
    streams = {(k["pid"], k["tid"]) for k in X(trace, "kernel")}
    pn = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    tn = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    for p in gpu_pids:
        assert "GPU" in pn.get(p, ""), pn
    for st in streams:
        assert tn.get(st, "").lower().startswith("stream"), (st, tn)


def test_gpu_user_annotation(trace):
    assert X(trace, "gpu_user_annotation")
