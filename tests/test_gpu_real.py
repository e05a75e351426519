"""GPU collection on a real GPU with real CUPTI, checked against torch.profiler (Kineto).

Every test is marked ``gpu`` and skips unless torch sees a CUDA GPU and cprof can collect GPU
activity (cprof.features()["gpu_activity"]["available"]). On a GPU machine run
``bash scripts/gpu_check.sh``, or ``python -m pytest -q -rA tests/test_gpu_real.py``.

cprof and torch.profiler cannot hold CUPTI at the same time, and Kineto may keep CUPTI after its
session; so every test that runs torch.profiler does it in a subprocess (this file run as a script:
``python tests/test_gpu_real.py SCENARIO OUT_DIR`` prints one ``RESULT {json}`` line). The pytest
process itself only ever opens cprof windows. NVTX ranges reach CUPTI only if
NVTX_INJECTION64_PATH is set before NVTX initialises, so the NVTX test sets it for a subprocess.

Assumptions about torch.profiler's trace (Kineto, libkineto/src/CuptiActivity.cpp, Demangle.cpp):
kernels are ``cat: "kernel"`` named ``demangle(CUPTI name)``, except that Kineto leaves names
longer than 1024 characters mangled (kMaxSymbolSize) where cprof demangles them: those, and only
those, are mapped to cprof's name through cprof's ``args["mangled name"]`` before comparing.
Copies are ``cat: "gpu_memcpy"`` named ``Memcpy {HtoD|DtoH|...} ({src kind} -> {dst kind})`` with
``args["bytes"]``, sets ``cat: "gpu_memset"`` named ``Memset ({kind})``: the same strings cprof
writes, so they are compared as they are.
"""
import collections
import gzip
import json
import os
import re
import subprocess
import sys
import warnings

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
SCRIPT = os.path.abspath(__file__)

MLP_STEPS = 10  # profiled steps of the comparison workload (after MLP_WARMUP unprofiled ones)
MLP_WARMUP = 10
MLP_BATCH = 512
KINETO_MAX_DEMANGLE = 1024  # Kineto returns longer symbols mangled
TIME_TOLERANCE = 0.05  # summed kernel time, cprof vs torch.profiler
GEMM_RE = re.compile(r"gemm|nvjet|cutlass|xmma|cublas|sm\d+_", re.IGNORECASE)
NVTX_OUTER, NVTX_INNER = "cprof-test nvtx outer", "cprof-test nvtx inner"


# -------------------------------------------------------------------------------------------------
# trace helpers
# -------------------------------------------------------------------------------------------------
def load_trace(path):
    """A trace as a dict: gzip JSON (by its magic bytes, whatever the suffix) or plain JSON."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        magic = f.read(2)
    opener = gzip.open if magic == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def events(trace, cat=None, ph="X"):
    return [e for e in trace.get("traceEvents", []) if e.get("ph") == ph
            and (cat is None or e.get("cat") == cat)]


def kernels(trace):
    return events(trace, "kernel")


def gpu_work(trace):
    return events(trace, "kernel") + events(trace, "gpu_memcpy") + events(trace, "gpu_memset")


def launches_by_correlation(trace):
    """correlation id -> the runtime / driver API events carrying it."""
    out = collections.defaultdict(list)
    for e in events(trace, "cuda_runtime") + events(trace, "cuda_driver"):
        if "correlation" in e.get("args", {}):
            out[e["args"]["correlation"]].append(e)
    return out


def cprof_ranges(trace, name):
    """cprof ranges (not NVTX ones) called name."""
    return [e for e in events(trace, "user_annotation")
            if e["name"] == name and not e.get("args", {}).get("nvtx")]


def range_external_id(trace, name):
    found = cprof_ranges(trace, name)
    assert len(found) == 1, f"expected one cprof range {name!r}, found {len(found)}"
    return found[0]["args"]["External id"]


CPU_CATS = ("cpu_op", "user_annotation", "python_function")


def links_into(trace, work, name):
    """True when GPU work (or a launch) links to the cprof range called name or to a CPU range
    nested in it. With ProfilerContext's defaults (with_stack) a launch belongs to the innermost
    range open at launch time: the C call (a cpu_op, as Kineto's aten op) or a compiled region
    inside the user's range."""
    (rng,) = cprof_ranges(trace, name)
    ext = work["args"].get("External id")
    if ext == rng["args"]["External id"]:
        return True
    linked = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in CPU_CATS
              and e.get("args", {}).get("External id") == ext]
    return len(linked) == 1 and linked[0]["pid"] == rng["pid"] and \
        linked[0]["tid"] == rng["tid"] and rng["ts"] - 0.002 <= linked[0]["ts"] and \
        linked[0]["ts"] + linked[0]["dur"] <= rng["ts"] + rng["dur"] + 0.002


def short(name, n=90):
    return name if len(name) <= n else name[: n - 3] + "..."


def summed_us(evs):
    return sum(float(e.get("dur", 0)) for e in evs)


def top_kernels(evs, n=5):
    t = collections.Counter()
    for e in evs:
        t[e["name"]] += float(e.get("dur", 0))
    return [(short(k, 70), round(v, 1)) for k, v in t.most_common(n)]


def flow_problems(trace):
    """Every kernel / copy / set must be the finish of exactly one ac2g flow (f ts == its ts, on
    its device / stream), whose start sits on the API call with the same correlation id (same
    thread, same ts) and that call must not start after the work. Returns a list of problems."""
    problems = []
    starts = {}
    for s in events(trace, "ac2g", ph="s"):
        if s["id"] in starts:
            problems.append(f"flow id {s['id']} starts twice")
        starts[s["id"]] = s
    finishes = collections.defaultdict(list)
    for f in events(trace, "ac2g", ph="f"):
        finishes[(f["pid"], f["tid"], f["ts"])].append(f)
    by_corr = launches_by_correlation(trace)
    for w in gpu_work(trace):
        corr = w["args"].get("correlation")
        what = f"{w['cat']} {short(w['name'], 60)!r} (correlation {corr})"
        fs = finishes.get((w["pid"], w["tid"], w["ts"]), [])
        if len(fs) != 1:
            problems.append(f"{what}: {len(fs)} ac2g finishes at its start")
            continue
        s = starts.get(fs[0]["id"])
        if s is None:
            problems.append(f"{what}: flow {fs[0]['id']} has no start")
            continue
        launch = [e for e in by_corr.get(corr, [])
                  if e["ts"] == s["ts"] and e["tid"] == s["tid"] and e["pid"] == s["pid"]]
        if not launch:
            problems.append(f"{what}: the flow does not start on an API call with its correlation")
        elif launch[0]["ts"] > w["ts"]:
            problems.append(f"{what}: starts on the GPU before its launch call")
    return problems


def work_multiset(evs):
    return collections.Counter((e["name"], e["args"].get("bytes")) for e in evs)


def counter_diff(a, b, n=10):
    """Lines describing what a has more of than b and vice versa (for assertion messages)."""
    lines = []
    for label, x, y in (("only/more in cprof", a, b), ("only/more in torch.profiler", b, a)):
        d = x - y
        if d:
            lines.append(f"  {label} ({sum(d.values())}):")
            for k, c in d.most_common(n):
                lines.append(f"    {c} x {short(str(k), 150)}")
    return "\n".join(lines)


# -------------------------------------------------------------------------------------------------
# skip unless a GPU and CUPTI are there
# -------------------------------------------------------------------------------------------------
def _gpu_ready():
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure means: not here
        return False, f"torch is not importable: {exc}"
    if not torch.cuda.is_available():
        return False, "no CUDA GPU (torch.cuda.is_available() is False)"
    torch.cuda.init()  # torch maps its libcupti first: cprof then uses the same one
    import cprof
    gpu = cprof.features()["gpu_activity"]
    if not gpu["available"]:
        return False, f"cprof cannot collect GPU activity here: {gpu['reason']}"
    return True, None


if __name__ == "__main__":
    GPU_OK, GPU_REASON = True, None
else:
    GPU_OK, GPU_REASON = _gpu_ready()

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not GPU_OK, reason=str(GPU_REASON))]


def run_worker(scenario, out_dir, env_extra=None, timeout=600):
    """Runs this file as a script in a fresh process; returns its RESULT dict."""
    env = dict(os.environ)
    env.pop("NVTX_INJECTION64_PATH", None)  # cprof sets it in this process: keep it out
    env["PYTHONUNBUFFERED"] = "1"
    env.update(env_extra or {})
    r = subprocess.run([sys.executable, SCRIPT, scenario, str(out_dir)], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    if r.returncode != 0 or not lines:
        pytest.fail(f"worker {scenario!r} failed (exit {r.returncode})\n--- stdout ---\n"
                    f"{r.stdout[-3000:]}\n--- stderr ---\n{r.stderr[-6000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def cprof_window(tmp_path, name, **kw):
    import cprof
    return cprof.ProfilerContext(output_dir=str(tmp_path), profile_name=name, verbose=False, **kw)


# -------------------------------------------------------------------------------------------------
# 1. the same MLP steps, profiled by cprof and by torch.profiler (each in its own process)
# -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mlp_traces(tmp_path_factory):
    out = tmp_path_factory.mktemp("mlp")
    c = run_worker("mlp_cprof", out)
    t = run_worker("mlp_torch", out)
    print(f"\ncprof trace: {c['trace']}\ntorch.profiler trace: {t['trace']}")
    return load_trace(c["trace"]), load_trace(t["trace"])


def normalised_torch_kernel_names(ctrace, ttrace):
    """torch.profiler's kernel names, with Kineto's long mangled names mapped to cprof's
    demangled ones (the only systematic naming difference: see the module docstring)."""
    demangled_of = {k["args"]["mangled name"]: k["name"] for k in kernels(ctrace)
                    if "mangled name" in k["args"]}
    names, mapped = [], 0
    for k in kernels(ttrace):
        n = k["name"]
        if len(n) > KINETO_MAX_DEMANGLE and n in demangled_of:
            n = demangled_of[n]
            mapped += 1
        names.append(n)
    return names, mapped


def test_kernels_match_torch_profiler(mlp_traces):
    ctrace, ttrace = mlp_traces
    ck, tk = kernels(ctrace), kernels(ttrace)
    tnames, mapped = normalised_torch_kernel_names(ctrace, ttrace)
    cnames = collections.Counter(k["name"] for k in ck)
    print(f"\nkernels: cprof {len(ck)}, torch.profiler {len(tk)} ({len(cnames)} distinct names; "
          f"{mapped} long mangled Kineto names mapped to cprof's demangled ones)")
    print("cprof top kernels (us):", top_kernels(ck))
    print("torch top kernels (us):", top_kernels(tk))
    assert ck, "cprof recorded no kernel"
    assert len(ck) == len(tk), (
        f"kernel count differs: cprof {len(ck)} vs torch.profiler {len(tk)}\n"
        + counter_diff(cnames, collections.Counter(tnames)))
    assert cnames == collections.Counter(tnames), (
        "kernel names differ\n" + counter_diff(cnames, collections.Counter(tnames)))
    gpu = ctrace["cprof"]["gpu"]
    assert gpu["records"]["kernel"] == len(ck)
    assert ctrace["cprof"]["dropped"]["gpu_cupti"] == 0


def test_summed_kernel_time_matches_torch_profiler(mlp_traces):
    ctrace, ttrace = mlp_traces
    cs, ts = summed_us(kernels(ctrace)), summed_us(kernels(ttrace))
    diff = (cs - ts) / ts if ts else float("inf")
    print(f"\nsummed kernel time: cprof {cs:.1f} us, torch.profiler {ts:.1f} us "
          f"({100 * diff:+.2f}%)")
    assert ts > 0
    assert abs(diff) <= TIME_TOLERANCE, (
        f"summed kernel time differs by {100 * diff:+.2f}% (cprof {cs:.1f} us, torch.profiler "
        f"{ts:.1f} us; tolerance {100 * TIME_TOLERANCE:.0f}%)")


def test_copies_and_sets_match_torch_profiler(mlp_traces):
    ctrace, ttrace = mlp_traces
    for cat in ("gpu_memcpy", "gpu_memset"):
        c, t = events(ctrace, cat), events(ttrace, cat)
        cb = sum(e["args"].get("bytes", 0) for e in c)
        tb = sum(e["args"].get("bytes", 0) for e in t)
        print(f"\n{cat}: cprof {len(c)} ({cb} bytes), torch.profiler {len(t)} ({tb} bytes); "
              f"names {sorted(collections.Counter(e['name'] for e in c).items())}")
        assert work_multiset(c) == work_multiset(t), (
            f"{cat} (name, bytes) differ\n" + counter_diff(work_multiset(c), work_multiset(t)))
        assert cb == tb
    # the workload copies its batch host -> device and reads the loss back every step
    names = {e["name"] for e in events(ctrace, "gpu_memcpy")}
    assert any(n.startswith("Memcpy HtoD") for n in names), names
    assert any(n.startswith("Memcpy DtoH") for n in names), names


def test_every_kernel_has_a_flow_from_its_launch(mlp_traces):
    ctrace, _ = mlp_traces
    work = gpu_work(ctrace)
    n_s, n_f = len(events(ctrace, "ac2g", ph="s")), len(events(ctrace, "ac2g", ph="f"))
    problems = flow_problems(ctrace)
    print(f"\n{len(work)} GPU ops, {n_s} flow starts, {n_f} flow finishes, "
          f"{len(problems)} problems")
    assert work
    assert not problems, "\n".join(problems[:20])
    assert n_s == n_f == len(work)
    for k in kernels(ctrace):
        a = k["args"]
        assert len(a["grid"]) == 3 and len(a["block"]) == 3 and min(a["grid"] + a["block"]) >= 1


# -------------------------------------------------------------------------------------------------
# 2. kernel families: cuBLAS, Triton (torch.compile), CUDA graphs; External ids; windows
# -------------------------------------------------------------------------------------------------
def test_kernels_of_more_threads_than_pool_buffers_are_all_kept(tmp_path):
    """CUPTI 13 gives each thread that makes records a buffer of its own unless told otherwise;
    cprof asks for shared buffers (decision 167), so six launching threads in a window whose
    pool holds two buffers (gpu_buffer_mb=16) keep every thread's kernels."""
    import threading
    import torch
    n = 6
    xs = [torch.randn(256, 256, device="cuda") for _ in range(n)]
    (xs[0] * 2).sum()
    torch.cuda.synchronize()
    errors = []

    def work(i):
        try:
            torch.cuda.set_device(0)
            for _ in range(3):
                xs[i].mul_(1.0001)
            torch.cuda.synchronize()
        except BaseException as err:  # noqa: BLE001 - reported on the main thread
            errors.append(err)
    with cprof_window(tmp_path, "threads", gpu_buffer_mb=16) as p:
        ts = [threading.Thread(target=work, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        torch.cuda.synchronize()
    assert not errors, errors
    t = load_trace(p.trace_path)
    launches = [e for e in t["traceEvents"] if e.get("ph") == "X" and
                e.get("cat") == "cuda_runtime" and "Launch" in e.get("name", "")]
    tids = {e["tid"] for e in launches}
    print(f"\n{len(kernels(t))} kernels, launches from {len(tids)} threads, dropped "
          f"{t['cprof']['dropped']}")
    assert len(tids) >= n, tids
    assert t["cprof"]["dropped"]["gpu_buffers_refused"] == 0
    assert len(kernels(t)) >= 3 * n


def test_records_dropped_after_the_pool_runs_dry_are_counted(tmp_path):
    """Decision 182 on the real CUPTI: a pool of two 64 KiB buffers (gpu_buffer_mb=0.125) and
    20,000 small kernels. Once CUPTI's requests are refused no buffer completes, so the drops
    are read from the global queue (context NULL) at the stop: the trace must count them
    (gpu_cupti > 0) beside the refused requests, and the warning says how many."""
    import torch
    x = torch.zeros(1 << 10, device="cuda")
    x.add_(1.0)
    torch.cuda.synchronize()
    n = 20000
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with cprof_window(tmp_path, "dry", gpu_buffer_mb=0.125) as p:
            for _ in range(n):
                x.add_(1.0)
            torch.cuda.synchronize()
    t = load_trace(p.trace_path)
    d = t["cprof"]["dropped"]
    print(f"\n{len(kernels(t))} of {n} kernels kept, dropped {d}; warnings "
          f"{[str(w.message)[:100] for w in caught]}")
    assert d["gpu_buffers_refused"] > 0 and len(kernels(t)) < n, d
    assert d["gpu_drop_count_errors"] == 0, d
    assert d["gpu_cupti"] > 0, ("CUPTI's drops after the pool ran dry were not counted: "
                                f"{d}")
    assert any("counted by CUPTI" in str(w.message) for w in caught)


def test_cublas_kernels_appear(tmp_path):
    import torch
    a = torch.randn(2048, 2048, device="cuda")
    b = torch.randn(2048, 2048, device="cuda")
    ah, bh = a.bfloat16(), b.bfloat16()
    a @ b, ah @ bh  # warm-up: cuBLAS handle, workspace, heuristics
    torch.cuda.synchronize()
    with cprof_window(tmp_path, "cublas") as p:
        import cprof
        with cprof.range("matmul"):
            a @ b
            ah @ bh
        torch.cuda.synchronize()
    t = load_trace(p.trace_path)
    ks = [k for k in kernels(t) if links_into(t, k, "matmul")]
    by_corr = launches_by_correlation(t)
    print("\nkernels in 'matmul':")
    for k in ks:
        api = [e["name"] for e in by_corr.get(k["args"]["correlation"], [])]
        print(f"  {short(k['name'], 100)}  {k['dur']:.1f} us  grid {k['args']['grid']} "
              f"block {k['args']['block']}  launched by {api}")
    gemm = [k for k in ks if GEMM_RE.search(k["name"])]
    assert len(gemm) >= 2, f"no cuBLAS GEMM kernel among {[k['name'] for k in ks]}"
    for k in gemm:
        assert by_corr.get(k["args"]["correlation"]), f"no launch call for {k['name']}"
    assert not flow_problems(t), flow_problems(t)[:10]


def test_triton_kernels_from_torch_compile(tmp_path):
    pytest.importorskip("triton")
    import torch

    def f(x, y):
        return torch.sin(x) * torch.cos(y) + x

    cf = torch.compile(f)
    x = torch.randn(1 << 20, device="cuda")
    y = torch.randn(1 << 20, device="cuda")
    try:
        cf(x, y)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - no compiler / Triton toolchain on this machine
        pytest.skip(f"torch.compile could not build a Triton kernel here: "
                    f"{type(exc).__name__}: {str(exc)[:400]}")
    with cprof_window(tmp_path, "triton") as p:
        import cprof
        with cprof.range("compiled"):
            for _ in range(3):
                cf(x, y)
        torch.cuda.synchronize()
    t = load_trace(p.trace_path)
    by_corr = launches_by_correlation(t)
    tk = [k for k in kernels(t) if k["name"].startswith("triton")]
    print(f"\nTriton kernels: {collections.Counter(k['name'] for k in tk)}")
    print(f"all kernels: {collections.Counter(short(k['name']) for k in kernels(t))}")
    assert len(tk) >= 3 and len(tk) % 3 == 0, [k["name"] for k in kernels(t)]
    apis = collections.Counter()
    for k in tk:
        assert links_into(t, k, "compiled"), k["args"]
        launch = by_corr.get(k["args"]["correlation"], [])
        assert len(launch) == 1, f"{k['name']}: launch calls {launch}"
        apis[(launch[0]["cat"], launch[0]["name"])] += 1
        assert launch[0]["cat"] == "cuda_driver" and launch[0]["name"].startswith(
            "cuLaunchKernel"), launch[0]
    print(f"Triton launches: {dict(apis)}")
    assert not flow_problems(t), flow_problems(t)[:10]


def test_cuda_graph_kernels_have_graph_ids(tmp_path):
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512)).cuda()
    static_x = torch.randn(64, 512, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        model(static_x)
    g.replay()
    torch.cuda.synchronize()
    replays = 3
    with cprof_window(tmp_path, "graph") as p:
        import cprof
        with cprof.range("replay"):
            for _ in range(replays):
                g.replay()
        torch.cuda.synchronize()
    t = load_trace(p.trace_path)
    ks = kernels(t)
    launches = [e for e in events(t, "cuda_runtime") + events(t, "cuda_driver")
                if e["name"] in ("cudaGraphLaunch", "cuGraphLaunch")]
    graph_ids = collections.Counter(k["args"].get("graph id") for k in ks)
    print(f"\n{len(ks)} kernels from {len(launches)} graph launches; graph ids {dict(graph_ids)}; "
          f"names {collections.Counter(short(k['name'], 60) for k in ks)}")
    assert ks and len(ks) % replays == 0
    assert len(launches) >= replays
    for k in ks:
        assert k["args"].get("graph id"), f"{k['name']} has no graph id"
        assert "graph node id" in k["args"]
        assert links_into(t, k, "replay")
    assert not flow_problems(t), flow_problems(t)[:10]


def test_external_ids_link_kernels_to_their_range(tmp_path):
    import torch
    import cprof
    a = torch.randn(256, 256, device="cuda")
    a.mul_(1.0), a @ a
    torch.cuda.synchronize()
    with cprof_window(tmp_path, "external") as p:
        with cprof.range("outer"):
            a.mul_(1.0001)  # one kernel in "outer" only
            with cprof.range("x"):
                for _ in range(4):
                    a.add_(1.0)
                a @ a
            torch.cuda.synchronize()
    t = load_trace(p.trace_path)
    outer, inner = range_external_id(t, "outer"), range_external_id(t, "x")
    assert outer != inner
    ks = kernels(t)
    in_x = [k for k in ks if links_into(t, k, "x")]
    in_outer = [k for k in ks if links_into(t, k, "outer") and not links_into(t, k, "x")]
    print(f"\n{len(ks)} kernels: {len(in_x)} in 'x' (External id {inner}), {len(in_outer)} in "
          f"'outer' (External id {outer})")
    assert len(in_outer) == 1 and len(in_x) >= 5 and len(in_x) + len(in_outer) == len(ks)
    by_corr = launches_by_correlation(t)
    for k in in_x:
        for launch in by_corr[k["args"]["correlation"]]:
            assert links_into(t, launch, "x"), launch
    ann = [e for e in events(t, "gpu_user_annotation") if e["args"]["External id"] == inner]
    assert ann and all(e["name"] == "x" for e in ann)


def test_event_waits_name_the_stream_and_record_they_wait_on(tmp_path):
    """A side stream waits on an event recorded on the main stream, and the host waits on an
    event recorded on the side stream: the Stream Wait Event and the Event Sync name the
    recording stream and the cudaEventRecord call (Kineto's wait_on_* args), and sit on their
    device's track."""
    import torch
    a = torch.randn(512, 512, device="cuda")
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    e1, e2 = torch.cuda.Event(), torch.cuda.Event()
    a @ a
    torch.cuda.synchronize()
    with cprof_window(tmp_path, "waits") as p:
        a @ a
        e1.record(main)
        side.wait_event(e1)
        with torch.cuda.stream(side):
            b = a @ a
        e2.record(side)
        e2.synchronize()
        del b
    t = load_trace(p.trace_path)
    records = {e["args"]["correlation"]: e for e in events(t, "cuda_runtime")
               if e["name"].startswith("cudaEventRecord")}
    syncs = {e["name"]: e for e in events(t, "cuda_sync")}
    print("\n" + json.dumps({n: e["args"] for n, e in syncs.items()}, indent=1))
    print(json.dumps(t["cprof"]["gpu"].get("event_waits")))
    wait, esync = syncs["Stream Wait Event"], syncs["Event Sync"]
    assert wait["args"]["wait_on_stream"] in {k["args"]["stream"] for k in kernels(t)}
    assert wait["args"]["wait_on_cuda_event_record_corr_id"] in records
    assert wait["tid"] == wait["args"]["stream"] != wait["args"]["wait_on_stream"]
    assert esync["args"]["wait_on_cuda_event_record_corr_id"] in records
    side_kernels = {k["args"]["stream"] for k in kernels(t)
                    if k["args"]["stream"] != wait["args"]["wait_on_stream"]}
    assert esync["args"]["wait_on_stream"] in side_kernels
    assert wait["pid"] == esync["pid"] == wait["args"]["device"] == 0
    assert t["cprof"]["gpu"]["event_waits"]["unresolved"] == 0


def test_many_windows_each_holds_only_its_own_kernels(tmp_path):
    import torch
    import cprof
    x = torch.zeros(1 << 16, device="cuda")
    x.add_(1.0)
    torch.cuda.synchronize()
    counts, zeroing = [], []
    for i in range(5):
        with cprof_window(tmp_path, f"window{i}") as p:
            with cprof.range(f"w{i}"):
                for _ in range(i + 1):
                    x.add_(1.0)
                torch.cuda.synchronize()
        t = load_trace(p.trace_path)
        ks = kernels(t)
        counts.append(len(ks))
        rng = cprof_ranges(t, f"w{i}")
        assert len(rng) == 1 and [e["name"] for e in events(t, "user_annotation")] == [f"w{i}"]
        r0 = rng[0]["ts"]
        r1 = r0 + rng[0]["dur"]
        assert len(ks) == i + 1, f"window {i}: {[k['name'] for k in ks]}"
        assert t["cprof"]["gpu"]["records"]["kernel"] == i + 1
        assert t["cprof"]["dropped"]["gpu_cupti"] == 0
        # CUPTI took the pre-zeroed buffers (decision 65); from the second window on, the
        # buffers the last one used were zeroed at its start, and they hold this window's
        # records intact (the kernel counts above)
        gpu = t["cprof"]["gpu"]
        assert gpu["buffers_prezeroed"] is True, gpu
        zeroing.append(gpu["prezero_us"])
        assert i == 0 or gpu["prezero_us"] > 0, gpu
        for k in ks:
            assert links_into(t, k, f"w{i}")
            assert r0 - 2 <= k["ts"] and k["ts"] + k["dur"] <= r1 + 2, (k["ts"], k["dur"], r0, r1)
        assert not flow_problems(t)
    print(f"\nkernels per window: {counts}; us zeroing buffers at window start: {zeroing}")
    assert float(x[0]) == 1 + sum(range(1, 6))


# -------------------------------------------------------------------------------------------------
# 3. NVTX (subprocess with NVTX_INJECTION64_PATH), conflicts with torch.profiler (subprocesses)
# -------------------------------------------------------------------------------------------------
def test_nvtx_ranges_appear(tmp_path):
    import cprof
    cupti = cprof._C.cuda_info()["cupti"]["path"]
    assert cupti, "cprof found no libcupti path to inject into NVTX"
    res = run_worker("nvtx", tmp_path, {"NVTX_INJECTION64_PATH": cupti})
    assert res["nvtx_env"] == cupti
    t = load_trace(res["trace"])
    marks = [e for e in events(t, "user_annotation") if e.get("args", {}).get("nvtx")]
    print(f"\nNVTX_INJECTION64_PATH={cupti}\nNVTX ranges: "
          f"{[(e['name'], round(e['dur'], 1), e['args'].get('domain')) for e in marks]}; "
          f"kernels {len(kernels(t))}")
    by_name = {e["name"]: e for e in marks}
    assert NVTX_OUTER in by_name and NVTX_INNER in by_name, [e["name"] for e in marks]
    o, i = by_name[NVTX_OUTER], by_name[NVTX_INNER]
    assert o["ts"] <= i["ts"] and i["ts"] + i["dur"] <= o["ts"] + o["dur"] + 0.002
    assert len(kernels(t)) == 2


@pytest.fixture(scope="module")
def busy_result(tmp_path_factory):
    return run_worker("busy", tmp_path_factory.mktemp("busy"))


def test_torch_profiler_active_strict_raises_cupti_busy(busy_result):
    msg = busy_result["strict_raised"]
    print(f"\nstrict=True under torch.profiler: {busy_result['strict_error_type']}: {msg}")
    assert busy_result["strict_error_type"] == "CuptiBusyError", busy_result
    assert "strict=False" in msg
    assert busy_result["window_open_after"] is False


def test_torch_profiler_active_lenient_warns_and_writes_cpu_trace(busy_result):
    print(f"\nstrict=False under torch.profiler: warnings {busy_result['lenient_warnings']}")
    assert busy_result["lenient_error"] is None, busy_result["lenient_error"]
    assert any("CPU activity only" in w for w in busy_result["lenient_warnings"])
    t = load_trace(busy_result["lenient_trace"])
    assert not kernels(t) and not events(t, "cuda_runtime")
    assert "gpu_unavailable" in t["cprof"]
    assert [e["name"] for e in events(t, "user_annotation")] == ["lenient"]
    # torch.profiler still got the GPU work of its own session
    assert busy_result["torch_kernels"] >= 2, busy_result


def test_cprof_then_torch_profiler_then_cprof_in_one_process(tmp_path):
    """cprof and torch.profiler take turns in one process (cprof, torch, cprof, torch, cprof):
    every session gets all of its own kernels. Kineto keeps CUPTI subscribed after its first
    session: the later cprof windows collect without a subscriber and say so."""
    res = run_worker("sequence", tmp_path)
    assert not res["errors"], res["errors"]
    ours = [load_trace(p) for p in res["cprof"]]
    theirs = [len(kernels(load_trace(p))) for p in res["torch"]]
    print(f"\nkernels per cprof window {[len(kernels(t)) for t in ours]}, per torch.profiler "
          f"session {theirs}; subscriber {[t['cprof']['gpu']['cupti_subscriber'] for t in ours]}")
    assert theirs == [5, 5], ("torch.profiler recorded a different number of kernels after a "
                              "cprof window (5 launched): cprof may have left CUPTI in a state "
                              "Kineto cannot use")
    for i, t in enumerate(ours):
        ks = kernels(t)
        assert len(ks) == 5, f"cprof window {i}: {len(ks)} kernels"
        assert all(links_into(t, k, "burst") for k in ks), f"cprof window {i}: unlinked"
    assert ours[0]["cprof"]["gpu"]["cupti_subscriber"] == "held by cprof"
    assert all(t["cprof"]["gpu"]["cupti_subscriber"].startswith("shared") for t in ours[1:])


def test_torch_profiler_started_inside_a_window_gets_cupti_and_the_window_keeps_its_own(
        tmp_path):
    """Decision 177 on the real CUPTI: torch.profiler started inside a cprof GPU window. The
    window's GPU collection ends just before Kineto's setup: its kernels so far are all in its
    trace (3 add kernels in 'before', none lost to Kineto's buffers), torch.profiler records
    its own 4 mul kernels, the window says when it ended, and its CPU ranges go on ('after')."""
    res = run_worker("torch_inside", tmp_path)
    t = load_trace(res["trace"])
    ks = kernels(t)
    theirs = kernels(load_trace(res["torch_trace"]))
    print(f"\ncprof window kernels {len(ks)}, torch.profiler's {len(theirs)}; warnings "
          f"{[w[:80] for w in res['warnings']]}")
    assert len(ks) == 3 and all(links_into(t, k, "before") for k in ks), [k["name"] for k in ks]
    assert len(theirs) == 4, [k["name"] for k in theirs]
    assert res["gpu_active_after_torch"] is False
    assert "gpu_taken_by_torch_profiler" in t["cprof"]
    assert any("torch.profiler started CUDA collection" in w for w in res["warnings"])
    assert [e["name"] for e in events(t, "user_annotation")
            if e["name"] in ("before", "after")] == ["before", "after"]


def test_torch_profiler_on_another_thread_is_not_shared(tmp_path):
    """Decision 190 on the real CUPTI: torch.profiler runs on the main thread and a cprof
    window opens on a worker thread, where torch's per-thread profiler state reads NONE. The
    window must refuse (strict) instead of sharing CUPTI, and torch.profiler keeps every one of
    its kernels (8: 3 adds, the worker's 2 muls, 3 adds); sharing registered cprof's buffer
    callbacks over Kineto's and switched its kinds off at the window's stop (the last adds
    missing from torch's trace)."""
    res = run_worker("busy_other_thread", tmp_path)
    print(f"\nwindow on the worker: {res['raised']}; torch.profiler kernels "
          f"{len(res['torch_kernels'])}")
    assert res["raised"] and res["raised"].startswith("CuptiBusyError"), res["raised"]
    assert len(res["torch_kernels"]) >= 8, res["torch_kernels"]


# -------------------------------------------------------------------------------------------------
# 4. long sessions (issue 7) and torch.compile regions on the GPU (issue 5)
# -------------------------------------------------------------------------------------------------
def test_thousand_gpu_windows_do_not_grow(tmp_path):
    """1,000 ProfilerContext windows collecting CUDA (3 kernels each) in one process: the
    CUPTI buffers a window uses stay the same from window 1 to 1,000, nothing is dropped, RSS
    after window 1,000 within 8 MB of RSS after window 100, file descriptors unchanged."""
    script = os.path.join(HERE, "reliability_scripts", "long_session.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))  # an in-place build too
    r = subprocess.run([sys.executable, script, "1000", str(tmp_path / "out"), "cuda"],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    rss = dict((int(k), v) for k, v in res["rss"])
    print(f"\n1,000 GPU windows: RSS {rss}, fds {res['fd_before']} -> {res['fd_after']}, "
          f"{res['ms_median']:.2f} ms/window median; per-window GPU: {res['gpu']}")
    assert [g["kernels"] for g in res["gpu"]] == [3, 3, 3], res["gpu"]
    assert len({g["buffers"] for g in res["gpu"]}) == 1, res["gpu"]
    assert all(not g["dropped"] or not any(g["dropped"].values()) for g in res["gpu"]), res["gpu"]
    assert rss[1000] - rss[100] < 8 << 20, rss
    assert res["fd_after"] == res["fd_before"], res


def test_compiled_regions_around_triton_kernels(tmp_path):
    """torch.compile (inductor, Triton) with a graph break: nested "Torch-Compiled Region"
    ranges, and the Triton kernels of each graph inside (by External id) the region that ran
    it."""
    import torch
    import cprof

    def f(x):
        y = (x * 2).relu().sum(dim=0)
        torch._dynamo.graph_break()
        return (y + 1).sin()

    cf = torch.compile(f)
    x = torch.randn(256, 256, device="cuda")
    cf(x)
    torch.cuda.synchronize()
    with cprof_window(tmp_path, "compiled_regions") as p:
        cf(x)
        torch.cuda.synchronize()
    t = load_trace(p.trace_path)
    regions = [e for e in events(t, "user_annotation")
               if e["name"].startswith("Torch-Compiled Region")]
    print(f"\nregions: {[(e['name'], round(e['dur'], 1)) for e in regions]}; kernels: "
          f"{[k['name'] for k in kernels(t)]}")
    assert len(regions) == 2, [e["name"] for e in regions]
    outer, inner = sorted(regions, key=lambda e: e["ts"])
    assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]
    triton = [k for k in kernels(t) if k["name"].startswith("triton")]
    assert len(triton) >= 2, [k["name"] for k in kernels(t)]
    assert t["cprof"]["compiled_regions"]["regions"] == 2


# -------------------------------------------------------------------------------------------------
# worker side: `python tests/test_gpu_real.py SCENARIO OUT_DIR`
# -------------------------------------------------------------------------------------------------
def _build_mlp(torch):
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 1024)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x_host = torch.randn(MLP_BATCH, 1024).pin_memory()
    target = torch.randn(MLP_BATCH, 1024, device="cuda")

    def step():
        x = x_host.to("cuda", non_blocking=True)  # a pinned HtoD copy
        loss = torch.nn.functional.mse_loss(model(x), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()  # a DtoH copy and a sync

    return step


def _torch_session(torch):
    from torch.profiler import ProfilerActivity, profile
    return profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])


def _worker(scenario, out_dir):
    import torch
    import cprof

    os.makedirs(out_dir, exist_ok=True)
    torch.cuda.init()
    res = {"scenario": scenario}

    def window(name, **kw):
        return cprof.ProfilerContext(output_dir=out_dir, profile_name=name, verbose=False, **kw)

    if scenario in ("mlp_cprof", "mlp_torch"):
        step = _build_mlp(torch)
        for _ in range(MLP_WARMUP):
            step()
        torch.cuda.synchronize()
        if scenario == "mlp_cprof":
            with window("mlp_cprof") as p:
                for _ in range(MLP_STEPS):
                    step()
                torch.cuda.synchronize()
            res["trace"] = str(p.trace_path)
        else:
            with _torch_session(torch) as prof:
                for _ in range(MLP_STEPS):
                    step()
                torch.cuda.synchronize()
            res["trace"] = os.path.join(out_dir, "mlp_torch.pt.trace.json")
            prof.export_chrome_trace(res["trace"])
    elif scenario == "nvtx":
        x = torch.randn(1 << 20, device="cuda")
        x.add_(1.0), x.mul_(1.0)
        torch.cuda.synchronize()
        with window("nvtx") as p:
            torch.cuda.nvtx.range_push(NVTX_OUTER)  # NVTX's first call: inside the window
            x.mul_(1.0001)
            torch.cuda.nvtx.range_push(NVTX_INNER)
            x.add_(1.0)
            torch.cuda.nvtx.range_pop()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
        res["trace"] = str(p.trace_path)
        res["nvtx_env"] = os.environ.get("NVTX_INJECTION64_PATH")
    elif scenario == "busy":
        x = torch.randn(1 << 16, device="cuda")
        x.add_(1.0)
        torch.cuda.synchronize()
        res["strict_error_type"] = res["strict_raised"] = None
        with _torch_session(torch) as prof:
            x.add_(1.0)
            try:
                with window("strict"):
                    x.add_(1.0)
            except cprof.CprofError as exc:
                res["strict_error_type"], res["strict_raised"] = type(exc).__name__, str(exc)
            res["window_open_after"] = cprof._C.active()
            res["lenient_error"] = None
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    with window("lenient", strict=False) as p:
                        with cprof.range("lenient"):
                            x.add_(1.0)
                        torch.cuda.synchronize()
                    res["lenient_trace"] = str(p.trace_path)
                except Exception as exc:  # noqa: BLE001 - reported to the test
                    res["lenient_error"] = f"{type(exc).__name__}: {exc}"
            res["lenient_warnings"] = [str(w.message) for w in caught]
            torch.cuda.synchronize()
        path = os.path.join(out_dir, "busy_torch.pt.trace.json")
        prof.export_chrome_trace(path)
        res["torch_kernels"] = len(kernels(load_trace(path)))
    elif scenario == "sequence":
        x = torch.zeros(1 << 16, device="cuda")
        x.add_(1.0)
        torch.cuda.synchronize()

        def burst():
            for _ in range(5):
                x.add_(1.0)
            torch.cuda.synchronize()

        # cprof, torch.profiler, cprof, torch.profiler, cprof: Kineto keeps its subscriber
        # after its first session and registers its own buffer callbacks in each one
        res["cprof"], res["torch"], res["errors"] = [], [], []
        for i in range(5):
            if i % 2:
                with _torch_session(torch) as prof:
                    burst()
                path = os.path.join(out_dir, f"seq{i}_torch.pt.trace.json")
                prof.export_chrome_trace(path)
                res["torch"].append(path)
                continue
            try:
                with window(f"seq{i}") as p:
                    with cprof.range("burst"):
                        burst()
                res["cprof"].append(str(p.trace_path))
            except Exception as exc:  # noqa: BLE001 - reported to the test
                res["errors"].append(f"window {i}: {type(exc).__name__}: {exc}")
    elif scenario == "busy_other_thread":
        # decision 187: torch.profiler running on the main thread, a cprof window opened on a
        # worker, where torch's per-thread profiler state reads NONE
        import threading
        x = torch.randn(1 << 16, device="cuda")
        x.add_(1.0)
        torch.cuda.synchronize()
        with _torch_session(torch):  # Kineto subscribes at its first session and keeps it
            x.add_(1.0)
            torch.cuda.synchronize()
        out = {"raised": None}

        def other():
            try:
                with window("other_thread"):
                    for _ in range(2):
                        x.mul_(1.0)
                    torch.cuda.synchronize()
            except cprof.CprofError as exc:
                out["raised"] = f"{type(exc).__name__}: {exc}"

        with _torch_session(torch) as prof:
            for _ in range(3):
                x.add_(1.0)
            t = threading.Thread(target=other)
            t.start()
            t.join()
            for _ in range(3):
                x.add_(1.0)
            torch.cuda.synchronize()
        path = os.path.join(out_dir, "other_thread_torch.pt.trace.json")
        prof.export_chrome_trace(path)
        res["raised"] = out["raised"]
        res["torch_kernels"] = [k["name"] for k in kernels(load_trace(path))]
    elif scenario == "torch_inside":
        # decision 177: torch.profiler started inside a cprof GPU window
        x = torch.zeros(1 << 16, device="cuda")
        x.add_(1.0)
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with window("outer") as p:
                with cprof.range("before"):
                    for _ in range(3):
                        x.add_(1.0)  # launched, maybe not finished: still cprof's
                with _torch_session(torch) as prof:
                    for _ in range(4):
                        x.mul_(1.0)
                    torch.cuda.synchronize()
                res["gpu_active_after_torch"] = cprof._C.gpu_active()
                with cprof.range("after"):
                    x.add_(1.0)
                torch.cuda.synchronize()
        res["warnings"] = [str(w.message) for w in caught]
        res["trace"] = str(p.trace_path)
        path = os.path.join(out_dir, "inside_torch.pt.trace.json")
        prof.export_chrome_trace(path)
        res["torch_trace"] = path
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    print("RESULT " + json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python tests/test_gpu_real.py SCENARIO OUT_DIR")
    sys.exit(_worker(sys.argv[1], sys.argv[2]))


def test_cprof_run_duration_ending_during_a_graph_capture_leaves_it_alone(tmp_path):
    """cprof run's --duration timer thread ends the window with a CUDA synchronize; a program
    capturing torch.cuda.graph (CUDA's global capture mode: any other thread's synchronize
    fails and invalidates the capture) in a loop must never be broken by it (decision 189)."""
    prog = tmp_path / "graphs.py"
    prog.write_text(
        "import time, torch\n"
        "model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).cuda()\n"
        "x = torch.randn(32, 256, device='cuda')\n"
        "side = torch.cuda.Stream()\n"
        "side.wait_stream(torch.cuda.current_stream())\n"
        "with torch.no_grad(), torch.cuda.stream(side):\n"
        "    for _ in range(3):\n"
        "        model(x)\n"
        "torch.cuda.current_stream().wait_stream(side)\n"
        "n, end = 0, time.monotonic() + 3.0\n"
        "while time.monotonic() < end:\n"
        "    g = torch.cuda.CUDAGraph()\n"
        "    with torch.no_grad(), torch.cuda.graph(g):\n"
        "        for _ in range(20):\n"
        "            model(x)\n"
        "    g.replay()\n"
        "    n += 1\n"
        "torch.cuda.synchronize()\n"
        "print('CAPTURES', n)\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "cprof", "run", "--delay", "0.5",
                          "--duration", "0.7", "-o", str(tmp_path / "out"), str(prog)],
                         capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    print(out.stdout[-2000:], out.stderr[-2000:])
    assert out.returncode == 0, out.stderr[-4000:]
    assert "CAPTURES" in out.stdout
    traces = [f for f in os.listdir(tmp_path / "out") if ".trace.json" in f]
    assert traces, os.listdir(tmp_path / "out")
    t = load_trace(tmp_path / "out" / traces[0])
    assert kernels(t) or events(t, "cuda_runtime"), "the window collected no GPU activity"
