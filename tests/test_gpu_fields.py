"""GPU record fields the fake CUPTI library drives that no other test pinned (mutation audit):
kernel grid / block axes, the ac2g flow's binding point, External ids of launches on a second
thread, and the memory pool counter summed over a device's pools."""
import json
import os
import subprocess
import sys
import textwrap

from conftest import ROOT, load_trace
from test_gpu_fake import events, run


def run_script(text, tmp_path, fake_so):
    """Runs a scenario script of its own against the fake library; its RESULT line."""
    script = tmp_path / "scenario.py"
    script.write_text(text)
    env = dict(os.environ, CPROF_REPO=ROOT, CPROF_OUT=str(tmp_path),
               CPROF_CUPTI_PATH=fake_so, CPROF_LIBCUDA_PATH=fake_so)
    env.pop("NVTX_INJECTION64_PATH", None)
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def test_kernel_grid_and_block_keep_their_axes(tmp_path, fake_so):
    """grid and block are [x, y, z] as CUPTI gave them (Kineto's order): a kernel with a
    distinct size on every axis shows each where it belongs (a swap of two axes kept the
    products, so blocks/warps per SM and occupancy did not notice)."""
    kernels = [("k3d", [7, 3, 2], [32, 4, 2], 32, 0, 0),
               ("k2d", [5, 11, 1], [64, 2, 1], 32, 0, 0)]
    res = run("occupancy", tmp_path, fake_so, OCC_KERNELS=json.dumps(kernels))
    t = load_trace(res["trace"])
    got = {k["name"]: (k["args"]["grid"], k["args"]["block"]) for k in events(t, "kernel")}
    assert got == {"k3d": ([7, 3, 2], [32, 4, 2]), "k2d": ([5, 11, 1], [64, 2, 1])}


def test_flow_finishes_bind_to_the_enclosing_slice(tmp_path, fake_so):
    """Every ac2g flow is an "s" / "f" pair named and categorised "ac2g"; the finish carries
    "bp": "e" (TRACE_FORMAT.md, Kineto): without it Perfetto / chrome://tracing bind the arrow
    to the next slice after ts, not to the kernel that starts there."""
    res = run("basic", tmp_path, fake_so)
    t = load_trace(res["trace"])
    starts, finishes = events(t, ph="s"), events(t, ph="f")
    assert starts and len(starts) == len(finishes)
    for e in starts + finishes:
        assert e["cat"] == "ac2g" and e["name"] == "ac2g", e
    assert all(f.get("bp") == "e" for f in finishes), finishes[:2]
    assert all("bp" not in s for s in starts)


# the start of a scenario script that scripts launches: their API call and kernel records
LAUNCHES = textwrap.dedent("""
    import ctypes, json, os, sys, threading, time
    sys.path.insert(0, os.environ["CPROF_REPO"])
    import cprof, cprof._C as C
    fake = ctypes.CDLL(os.environ["CPROF_CUPTI_PATH"])
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    fake.fake_cupti_add_api.argtypes = [ctypes.c_int, ctypes.c_int, u64, u64, u32, u32]
    fake.fake_cupti_add_kernel.argtypes = [ctypes.c_char_p, u64, u64, u32, u32]
""")

LAUNCH_FROM_A_THREAD = LAUNCHES + textwrap.dedent("""

    def worker():
        with cprof.range("worker_range"):
            t0 = C.now_ns() + 1000
            tid = threading.get_native_id()
            fake.fake_cupti_add_api(0, 211, t0, t0 + 1000, tid, 1)   # cudaLaunchKernel
            fake.fake_cupti_add_kernel(b"worker_kernel", t0 + 2000, t0 + 3000, 7, 1)
            time.sleep(0.002)

    with cprof.ProfilerContext(output_dir=os.environ["CPROF_OUT"], profile_name="thr",
                               verbose=False, with_stack=False, record_ops=False) as p:
        for i in range(5):  # ranges on the main thread before the other thread records
            with cprof.range(f"main_{i}"):
                pass
        th = threading.Thread(target=worker)
        th.start()
        th.join()
        with cprof.range("main_launch"):  # the main thread launches too: both threads link
            t0 = C.now_ns() + 1000
            tid = threading.get_native_id()
            fake.fake_cupti_add_api(0, 211, t0, t0 + 1000, tid, 2)
            fake.fake_cupti_add_kernel(b"main_kernel", t0 + 2000, t0 + 3000, 7, 2)
            time.sleep(0.002)
    print("RESULT " + json.dumps({"trace": str(p.trace_path)}))
""")


def test_launch_on_a_second_thread_links_to_that_threads_range(tmp_path, fake_so):
    """External id ties GPU work to the innermost range open on the launching thread (issue 3):
    a launch from a thread other than the first one links to that thread's range, not to a
    range of the main thread with the same position in its own list."""
    t = load_trace(run_script(LAUNCH_FROM_A_THREAD, tmp_path, fake_so)["trace"])
    for rname, kname, corr in (("worker_range", "worker_kernel", 1),
                               ("main_launch", "main_kernel", 2)):
        (rng,) = [e for e in events(t, "user_annotation") if e["name"] == rname]
        (kernel,) = [e for e in events(t, "kernel") if e["name"] == kname]
        (launch,) = [e for e in events(t, "cuda_runtime")
                     if e["args"].get("correlation") == corr]
        assert launch["tid"] == rng["tid"]
        assert launch["args"]["External id"] == rng["args"]["External id"], rname
        assert kernel["args"]["External id"] == rng["args"]["External id"], rname


POOLS_SCRIPT = textwrap.dedent("""
    import ctypes, json, os, sys, time
    sys.path.insert(0, os.environ["CPROF_REPO"])
    import cprof, cprof._C as C
    fake = ctypes.CDLL(os.environ["CPROF_CUPTI_PATH"])
    u64 = ctypes.c_uint64
    fake.fake_cupti_add_mempool.argtypes = [ctypes.c_int, ctypes.c_int, u64, u64, u64, u64]
    with cprof.ProfilerContext(output_dir=os.environ["CPROF_OUT"], profile_name="pools",
                               verbose=False, activities=["CPU", "CUDA", "MEM"],
                               with_stack=False) as p:
        t0 = C.now_ns() + 1000
        # two pools on device 0: 2 MiB (1 MiB used) and 4 MiB (3 MiB used)
        fake.fake_cupti_add_mempool(1, 1, 0xA000, 2 << 20, 1 << 20, t0)
        fake.fake_cupti_add_mempool(1, 1, 0xC000, 4 << 20, 3 << 20, t0 + 1000)
        time.sleep(0.002)
    print("RESULT " + json.dumps({"trace": str(p.trace_path)}))
""")


def test_pool_counter_sums_every_pool_of_the_device(tmp_path, fake_so):
    """The "GPU memory pool (CUPTI)" counter is the device's total over its stream-ordered
    pools: with the last pool's figures alone, a second pool hid the first."""
    t = load_trace(run_script(POOLS_SCRIPT, tmp_path, fake_so)["trace"])
    pool = sorted((e for e in t["traceEvents"] if e.get("ph") == "C"
                   and e.get("name") == "GPU memory pool (CUPTI)"), key=lambda e: e["ts"])
    got = [(e["args"]["pool bytes"], e["args"]["utilized bytes"]) for e in pool]
    assert got == [(2 << 20, 1 << 20), (6 << 20, 4 << 20)], got


NESTED_SCRIPT = textwrap.dedent("""
    import ctypes, json, os, sys, threading, time
    sys.path.insert(0, os.environ["CPROF_REPO"])
    import cprof, cprof._C as C
    fake = ctypes.CDLL(os.environ["CPROF_CUPTI_PATH"])
    fake.fake_cupti_script_basic.argtypes = [ctypes.c_uint64, ctypes.c_uint32]
    with cprof.profile(activities=["CPU", "CUDA"], record_ops=False) as p:
        with cprof.range("outer"):
            with cprof.range("inner"):  # launches the script's kernels
                fake.fake_cupti_script_basic(C.now_ns() + 1000, threading.get_native_id())
                time.sleep(0.002)
    ka = {e.key: (e.self_device_time_total, e.device_time_total)
          for e in p.key_averages() if e.key in ("outer", "inner")}
    table = p.key_averages().table(sort_by="cuda_time_total", row_limit=-1)
    print("RESULT " + json.dumps({"ka": ka, "table": table}))
""")


def test_self_cuda_is_the_work_a_range_launched_itself(tmp_path, fake_so):
    """key_averages' Self CUDA column is the GPU time of work a range launched itself, not
    through a child range; CUDA total includes the children's (torch's columns). Every test
    range launched directly, so the table printing the total in both went unnoticed."""
    res = run_script(NESTED_SCRIPT, tmp_path, fake_so)
    (outer_self, outer_total), (inner_self, inner_total) = res["ka"]["outer"], res["ka"]["inner"]
    assert inner_total > 0 and inner_self == inner_total, res["ka"]
    assert outer_self == 0 and outer_total == inner_total, res["ka"]
    lines = res["table"].splitlines()
    header = next(ln for ln in lines if "Self CUDA" in ln)
    cols = [c.strip() for c in header.split("  ") if c.strip()]
    (row,) = [ln.strip() for ln in lines if ln.strip().startswith("outer ")]
    cells = [c.strip() for c in row.split("  ") if c.strip()]
    assert float(cells[cols.index("Self CUDA")].rstrip("ums")) == 0, row
    assert float(cells[cols.index("CUDA total")].rstrip("ums")) > 0, row


EXACT_SCRIPT = LAUNCHES + textwrap.dedent("""
    with cprof.profile(activities=["CPU", "CUDA"], record_ops=False) as p:
        with cprof.range("launcher"):
            t0, tid = C.now_ns() + 1000, threading.get_native_id()
            for i in range(50):  # starts at every sub-microsecond offset
                at = t0 + i * 40_037
                fake.fake_cupti_add_api(0, 211, at, at + 500, tid, i + 1)
                fake.fake_cupti_add_kernel(b"k32", at + 1_000, at + 33_000, 7, i + 1)
            time.sleep(0.003)
    kernels = [e.device_time_total for e in p.events() if e.name == "k32"]
    row = {e.key: (e.device_time_total, e.count) for e in p.key_averages()}
    print("RESULT " + json.dumps({"kernels": kernels, "k32": row["k32"],
                                  "launcher": row["launcher"]}))
""")


def test_device_times_are_exact_microseconds(tmp_path, fake_so):
    """A 32,000 ns kernel's device time is 32.0 µs, and 50 of them 1600.0, exactly, as torch
    takes them from integer ns: the difference of the two float µs times was off in the last
    digits (64.00000000000011 for two), at random with where the window started."""
    res = run_script(EXACT_SCRIPT, tmp_path, fake_so)
    assert res["kernels"] == [32.0] * 50, res["kernels"]
    assert res["k32"] == [1600.0, 50] and res["launcher"][0] == 1600.0, res
