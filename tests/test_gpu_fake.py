"""GPU collection end to end on CI, through tests/fake_cupti (a stand-in for libcupti and
libcuda producing scripted records): decode -> link -> write, conflicts, drops, lifecycle.
Each scenario runs in its own process: the CUDA loader resolves once per process."""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, load_trace

FAKE_SO = os.path.join(ROOT, "tests", "fake_cupti", "libfake_cupti.so")  # built by fake_so


def run(scenario, tmp_path, fake_so, **env_extra):
    env = dict(os.environ, CPROF_REPO=ROOT, CPROF_OUT=str(tmp_path),
               CPROF_CUPTI_PATH=fake_so, CPROF_LIBCUDA_PATH=fake_so)
    env.update(env_extra)
    env.pop("NVTX_INJECTION64_PATH", None)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "gpu_fake_script.py"),
                        scenario], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def events(trace, cat=None, ph="X"):
    return [e for e in trace["traceEvents"] if e.get("ph") == ph and
            (cat is None or e.get("cat") == cat)]


@pytest.fixture(scope="module")
def basic(tmp_path_factory, fake_so):
    res = run("basic", tmp_path_factory.mktemp("basic"), fake_so)
    return res, load_trace(res["trace"])


def test_features_report_the_library(basic):
    res, _ = basic
    f = res["features"]
    assert f["available"] is True and f["reason"] is None
    assert f["cupti_source"] == "CPROF_CUPTI_PATH" and f["cupti_version"] >= 130000


def test_api_records_come_from_the_whole_kinds_with_other_ids_off(basic):
    """CUPTI 13.0.1 records no call through the per-id switch alone (measured on an H200): the
    kinds are enabled whole and every id cprof does not show is switched off; the trace says
    so, and the launches are there to link kernels to their range."""
    _, t = basic
    a = t["cprof"]["gpu"]["api_records"]
    assert a["mode"] == "kinds+filter" and a["ids_switched_off"] > 1000, a
    assert a["delivered"] >= len(events(t, "cuda_runtime")) > 0
    assert t["cprof"]["gpu"]["cupti_subscriber"] == "held by cprof"


def test_kernels_copies_sets_decoded(basic):
    _, t = basic
    kernels = events(t, "kernel")
    assert len(kernels) == 7
    names = [k["name"] for k in kernels]
    assert "triton_poi_fused_add_0" in names
    assert any(n.startswith("void at::native::vectorized_elementwise_kernel<4") for n in names)
    demangled = [k for k in kernels if "mangled name" in k["args"]]
    assert demangled and all(k["args"]["mangled name"].startswith("_Z") for k in demangled)
    for k in kernels:
        a = k["args"]
        for key in ("device", "context", "stream", "correlation", "registers per thread",
                    "shared memory", "grid", "block", "queued", "External id"):
            assert key in a, key
        assert len(a["grid"]) == 3 and len(a["block"]) == 3
        assert k["pid"] == a["device"] and k["tid"] == a["stream"]
    graph = [k for k in kernels if "graph id" in k["args"]]
    assert len(graph) == 2 and {k["args"]["graph node id"] for k in graph} == {100, 101}
    copies = events(t, "gpu_memcpy")
    assert {c["name"] for c in copies} == {"Memcpy HtoD (Pageable -> Device)",
                                            "Memcpy DtoH (Device -> Pinned)"}
    for c in copies:
        assert c["args"]["bytes"] > 0
        expected = c["args"]["bytes"] / (c["dur"] * 1000)
        assert abs(c["args"]["memory bandwidth (GB/s)"] - expected) < 0.01 * expected
    (memset,) = events(t, "gpu_memset")
    assert memset["name"] == "Memset (Device)"
    (sync,) = events(t, "cuda_sync")  # Kineto's args; the device is its context's
    assert sync["name"] == "Stream Sync"
    assert sync["args"] == {**sync["args"], "cuda_sync_kind": "Stream Sync", "stream": 13,
                            "correlation": 8, "device": 0, "context": 1}
    assert (sync["pid"], sync["tid"]) == (0, 13)  # Kineto's track: its device and stream
    assert "wait_on_stream" not in sync["args"]  # a stream sync waits on no event


def test_kernels_carry_blocks_and_warps_per_sm(basic):
    """Kineto writes "blocks per SM" and "warps per SM" on every kernel (TensorBoard's GPU view
    computes its estimated SM efficiency from them); the device's SM count comes from the
    driver (132 on the fake device)."""
    _, t = basic
    (dev,) = t["deviceProperties"]
    for k in events(t, "kernel"):
        a = k["args"]
        blocks = a["grid"][0] * a["grid"][1] * a["grid"][2] / dev["numSms"]
        threads = a["block"][0] * a["block"][1] * a["block"][2]
        assert a["blocks per SM"] == pytest.approx(blocks, abs=1e-6)
        assert a["warps per SM"] == pytest.approx(blocks * threads / 32, abs=1e-5)


def test_kernels_carry_the_estimated_achieved_occupancy(tmp_path, fake_so):
    """Kineto's "est. achieved occupancy %" (TensorBoard's kernel and GPU views): the blocks that
    fit on an SM of the fake H100 (132 SMs, 64K registers, 228 KiB shared memory, 2048 threads),
    capped by the grid's blocks per SM, times the block's threads over 2048; rounded."""
    kernels = [  # name, grid, block, registers per thread, static / dynamic shared memory
        ("fills", [1000, 1, 1], [256, 1, 1], 32, 0, 0),      # 8 fit; 7.58 per SM: 95 %
        ("regs", [1000, 1, 1], [256, 1, 1], 128, 0, 0),      # registers: 2 fit, 25 %
        ("smem", [1000, 1, 1], [128, 1, 1], 64, 0, 200000),  # opted-in 196 KB: 1 fits, 6 %
        ("small", [10, 1, 1], [1024, 1, 1], 32, 0, 0),       # 10 blocks on 132 SMs: 4 %
        ("none", [10, 1, 1], [1024, 1, 1], 255, 0, 0),       # 255 x 1024 registers: 0 fit
        ("3d", [16, 16, 8], [8, 8, 4], 40, 4096, 1024),      # 256 threads: 6 fit (regs), 75 %
    ]
    res = run("occupancy", tmp_path, fake_so, OCC_KERNELS=json.dumps(kernels))
    t = load_trace(res["trace"])
    got = {k["name"]: k["args"]["est. achieved occupancy %"] for k in events(t, "kernel")}
    assert got == {"fills": 95, "regs": 25, "smem": 6, "small": 4, "none": 0, "3d": 75}


def test_event_waits_name_the_event_record_they_wait_on(tmp_path, fake_so):
    """Kineto's wait_on_stream / wait_on_cuda_event_record_corr_id / wait_on_cuda_event_id on
    Stream Wait Event and Event Sync (HTA's critical path draws cross-stream edges from them):
    the latest record of the same event in the same context before the wait, unless CUPTI's
    cudaEventSyncId names another; -1 when the event was recorded before the window. Each
    cuda_sync is on its device and the stream it concerns (-1: none), as Kineto places it."""
    res = run("event_waits", tmp_path, fake_so)
    t = load_trace(res["trace"])
    syncs = sorted(events(t, "cuda_sync"), key=lambda e: e["args"]["correlation"])
    (ssync,) = [e for e in syncs if e["name"] == "Stream Sync"]
    assert (ssync["pid"], ssync["tid"]) == (0, 21) and "wait_on_stream" not in ssync["args"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events(t, ph="M")
             if e["name"] == "thread_name" and e["pid"] == 0}
    # the Event Sync waits on no stream: Kineto's tid -1, named so no track is anonymous
    assert names == {(0, 7): "stream 7", (0, 13): "stream 13", (0, 21): "stream 21",
                     (0, -1): "syncs (no stream)"}
    syncs.remove(ssync)
    got = [(e["name"], e["pid"], e["tid"], e["args"]["wait_on_stream"],
            e["args"]["wait_on_cuda_event_record_corr_id"], e["args"]["wait_on_cuda_event_id"])
           for e in syncs]
    assert got == [("Stream Wait Event", 0, 13, 7, 2, 5),     # stream 13 waits for stream 7
                   ("Event Sync", 0, -1, 13, 5, 5),           # the newer record of event 5
                   ("Stream Wait Event", 0, 7, -1, -1, 9),    # recorded before the window
                   ("Stream Wait Event", 0, 13, 7, 8, 6),     # the sync id's record
                   ("Stream Wait Event", 0, 7, 13, 5, 5)]     # not context 2's event 5
    keys = list(syncs[0]["args"])  # Kineto's order
    assert keys[keys.index("cuda_sync_kind"):] == [
        "cuda_sync_kind", "wait_on_stream", "wait_on_cuda_event_record_corr_id",
        "wait_on_cuda_event_id", "stream", "correlation", "device", "context"]
    assert t["cprof"]["gpu"]["event_waits"] == {"resolved": 4, "unresolved": 1,
                                               "cuda_event_records": True}
    assert not events(t, "cuda_event")  # the records are lookup data, not events
    assert res["event_names"] == [["Stream Wait Event", "cuda_sync"],
                                  ["cudaEventRecord", "cuda_runtime"],
                                  ["cudaStreamWaitEvent", "cuda_runtime"]]  # nor in events()
    # without CUDA_EVENT records (CPROF_CUPTI_CUDA_EVENTS=0): every wait unresolved, and said
    res = run("event_waits", tmp_path / "off", fake_so, CPROF_CUPTI_CUDA_EVENTS="0")
    t = load_trace(res["trace"])
    assert {e["args"].get("wait_on_stream") for e in events(t, "cuda_sync")} == {-1, None}
    assert t["cprof"]["gpu"]["event_waits"] == {"resolved": 0, "unresolved": 5,
                                               "cuda_event_records": False}


def test_streams_and_devices_named(basic):
    _, t = basic
    meta = events(t, ph="M")
    assert {"name": "GPU 0"} in [e["args"] for e in meta if e["name"] == "process_name"]
    streams = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta
               if e["name"] == "thread_name" and e["pid"] == 0}
    assert streams == {(0, 7): "stream 7", (0, 13): "stream 13"}
    (dev,) = t["deviceProperties"]
    assert dev["name"] == "Fake GPU (cprof tests)" and dev["numSms"] == 132
    assert dev["sharedMemPerBlockOptin"] == 232448  # Kineto writes it too


def test_every_gpu_op_has_a_flow_from_its_launch(basic):
    _, t = basic
    starts = {e["id"]: e for e in events(t, ph="s")}
    finishes = {e["id"]: e for e in events(t, ph="f")}
    assert len(starts) == len(finishes)
    work = events(t, "kernel") + events(t, "gpu_memcpy") + events(t, "gpu_memset")
    launches = events(t, "cuda_runtime") + events(t, "cuda_driver")
    by_corr = {e["args"]["correlation"]: e for e in launches}
    matched = 0
    for w in work:
        f = [f for f in finishes.values() if f["pid"] == w["pid"] and f["tid"] == w["tid"]
             and f["ts"] == w["ts"]]
        assert len(f) == 1, w["name"]
        s = starts[f[0]["id"]]
        launch = by_corr[w["args"]["correlation"]]
        assert s["ts"] == launch["ts"] and s["tid"] == launch["tid"]
        assert launch["ts"] <= w["ts"]  # GPU work never starts before its launch call
        matched += 1
    assert matched == len(work) == 10


def test_only_selected_api_calls_recorded(basic):
    _, t = basic
    names = {e["name"] for e in events(t, "cuda_runtime") + events(t, "cuda_driver")}
    assert names == {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync",
                     "cudaStreamSynchronize", "cudaGraphLaunch", "cuLaunchKernel"}


def test_external_ids_link_gpu_work_to_innermost_range(basic):
    _, t = basic
    ranges = {e["name"]: e for e in events(t, "user_annotation")}
    inner = ranges["launches"]["args"]["External id"]
    assert inner != ranges["step"]["args"]["External id"]
    for cat in ("cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset"):
        for e in events(t, cat):
            assert e["args"]["External id"] == inner, (cat, e["name"])
    ann = events(t, "gpu_user_annotation")
    assert {(a["name"], a["tid"]) for a in ann} == {("launches", 7), ("launches", 13)}
    for a in ann:
        on_stream = [k for k in events(t) if k.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                     and k["tid"] == a["tid"]]
        assert a["ts"] == min(k["ts"] for k in on_stream)
        assert abs(a["ts"] + a["dur"] - max(k["ts"] + k["dur"] for k in on_stream)) < 0.002


def test_metadata_counts_and_no_subscriber_left(basic):
    res, t = basic
    g = t["cprof"]["gpu"]
    assert g["records"]["kernel"] == 7 and g["dropped"]["cupti"] == 0
    assert t["cprof"]["dropped"]["gpu_cupti"] == 0
    assert t["cprof"]["config"]["collected_activities"] == ["CPU", "GPU"]
    assert res["subscribers_after"] == 0
    assert res["warnings"] == []


def test_other_cupti_client_is_a_clear_error(tmp_path, fake_so):
    res = run("busy_strict", tmp_path, fake_so)
    msg = res["raised"]
    assert msg and "another profiler holds CUPTI" in msg and "strict=False" in msg
    assert "Kineto (torch.profiler)" in msg  # cuptiSubscribe_v2 names the holder
    assert res["window_open"] is False


CLI_BUSY = """
import ctypes, sys
sys.path.insert(0, {root!r})
fake = ctypes.CDLL({so!r})
fake.fake_cupti_set_other_subscriber.argtypes = [ctypes.c_char_p]
fake.fake_cupti_set_other_subscriber(b"CUPTI for Nsight Systems")
from cprof.__main__ import main
sys.exit(main(["run", "--activities", "CPU,GPU", "-o", {out!r}, {script!r}]))
"""


def test_cprof_run_with_cupti_held_says_the_command_line_way_out(tmp_path, fake_so):
    """cprof run cannot open its window while another tool holds CUPTI and does not run the
    program (exit 1). The message said "use cprof with strict=False", an option cprof run does
    not have; it now names --activities CPU, and still names the holder."""
    script = tmp_path / "prog.py"
    script.write_text("print('ran')\n")
    code = CLI_BUSY.format(root=ROOT, so=fake_so, out=str(tmp_path / "out"), script=str(script))
    env = dict(os.environ, CPROF_CUPTI_PATH=fake_so, CPROF_LIBCUDA_PATH=fake_so)
    env.pop("NVTX_INJECTION64_PATH", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1 and "ran" not in r.stdout, (r.returncode, r.stdout, r.stderr)
    assert "another profiler holds CUPTI" in r.stderr, r.stderr
    assert "--activities CPU" in r.stderr and "strict=False" not in r.stderr, r.stderr
    assert "Nsight Systems" in r.stderr, r.stderr


@pytest.mark.parametrize("refused", [False, True])
def test_records_in_cupti_s_own_clock_land_in_their_ranges(tmp_path, fake_so, refused):
    """Where CUPTI refuses the timestamp callback, its records carry its own clock and cprof
    converts them with the offset it measured at start (cuptiGetTimestamp): the fake now
    stamps that way (set_own_clock), so the fallback is checked, not only the callback."""
    res = run("cupti_clock", tmp_path, fake_so, **({"CUPTI_CLOCK_ERROR": "999"} if refused
                                                    else {}))
    t = load_trace(res["trace"])
    assert res["warnings"] == []
    kernels = events(t, "kernel")
    assert len(kernels) == 7 and t["cprof"]["gpu"]["dropped"]["outside_window"] == 0
    rng = {e["name"]: e for e in events(t, "user_annotation")}
    launches = rng["launches"]
    calls = events(t, "cuda_runtime")
    assert calls and all(launches["ts"] <= c["ts"] and c["ts"] + c["dur"]
                         <= launches["ts"] + launches["dur"] for c in calls)
    assert {k["args"]["External id"] for k in kernels} == {launches["args"]["External id"]}


@pytest.mark.parametrize("fn", ["cuptiSubscribe_v2", "cuptiActivityEnable",
                                "cuptiActivityRegisterCallbacks", "cuptiGetTimestamp"])
def test_a_cupti_error_at_one_cycle_s_start_leaves_the_next_cycles_gpu(tmp_path, fake_so, fn):
    """CUPTI refusing a window's start with an error that says nothing of the machine
    (CUPTI_ERROR_UNKNOWN, once) was taken as "no GPU here": the rest of the schedule recorded
    CPU only. That cycle is CPU only, with a warning that says so; the next ones collect.
    No permission stays CPU only for good (privileges_schedule). cuptiGetTimestamp failing
    where the timestamp callback was refused too left the clock offset at -now: every record
    of the window fell outside it, counted only as outside_window."""
    extra = {"CUPTI_CLOCK_ERROR": "999"} if fn == "cuptiGetTimestamp" else {}
    res = run("refused_schedule", tmp_path, fake_so, FAKE_REFUSE=f"{fn}:999", **extra)
    assert res["kernels"] == [0, 7, 7], res
    assert res["collected"] == ["CPU", "GPU"], res
    w = [m for m, c in zip(res["warnings"], res["warning_classes"])
         if c == "GpuUnavailableWarning"]
    assert len(w) == 1 and "CUPTI_ERROR_UNKNOWN" in w[0] and "asks CUPTI again" in w[0], w
    assert "cprof: " not in w[0][len("cprof: "):], w  # one prefix, not two


@pytest.mark.parametrize("code", [999, 35])
def test_a_cupti_error_at_the_restart_after_warmup_is_taken_as_at_a_start(tmp_path, fake_so,
                                                                         code):
    """A schedule's warmup window restarts CUPTI when the active steps begin. A refusal there
    was a RuntimeWarning with its "cprof: " said twice, and no permission there did not end
    GPU collection for later cycles; it now follows decision 147 as a start does: an error of
    one window (999) leaves the next cycle its GPU, no permission (35) ends it, each said once
    as a GpuUnavailableWarning."""
    res = run("refused_restart", tmp_path, fake_so, FAKE_REFUSE=f"cuptiSubscribe_v2:{code}")
    w = [(m, c) for m, c in zip(res["warnings"], res["warning_classes"]) if "CUPTI" in m]
    assert len(w) == 1 and w[0][1] == "GpuUnavailableWarning", res["warnings"]
    assert w[0][0].count("cprof: ") == 1, w
    if code == 999:
        assert res["kernels"] == [0, 7] and res["collected"] == ["CPU", "GPU"], res
        assert "asks CUPTI again" in w[0][0], w
    else:
        assert res["kernels"] == [0, 0] and res["collected"] == ["CPU"], res
        assert "INSUFFICIENT_PRIVILEGES" in w[0][0], w


@pytest.mark.parametrize("code", [999, 35])
def test_a_start_s_gpu_warning_raised_as_error_closes_the_window(tmp_path, fake_so, code):
    """Under a warnings filter of "error" the GpuUnavailableWarning of a refused start raises
    out of the profiler's start. It was warned before the profiler took the window, so the
    window stayed open: every later profiler of the process was refused ("a cprof window is
    already open"). It is now closed as any failed start's is."""
    res = run("refused_warning_as_error", tmp_path, fake_so,
              FAKE_REFUSE=f"cuptiActivityEnable:{code}")
    assert res["raised"] == "GpuUnavailableWarning", res
    assert res["open_after"] == [False, False, 0], res
    assert res["next"] == "ok", res


def test_idle_kineto_subscriber_is_shared_and_everything_collected(tmp_path, fake_so):
    """Kineto keeps its CUPTI subscriber after a torch.profiler session for the life of the
    process (seen on an H200 with torch 2.11). With torch loaded and no session running, cprof
    collects through the activity API without a subscriber of its own, and says so."""
    pytest.importorskip("torch")
    res = run("shared_kineto_idle", tmp_path, fake_so)
    assert res["raised"] is None and res["window_open"] is False
    t = load_trace(res["trace"])
    assert len(events(t, "kernel")) == 7 and "gpu_unavailable" not in t["cprof"]  # the scene
    assert t["cprof"]["gpu"]["cupti_subscriber"].startswith("shared")
    assert "(Kineto)" in t["cprof"]["gpu"]["cupti_subscriber"]  # the holder CUPTI named
    assert res["subscribers_after"] == 1  # the other client's, untouched
    rng = {e["name"]: e["args"]["External id"] for e in events(t, "user_annotation")}
    assert {k["args"]["External id"] for k in events(t, "kernel")} == {rng["launches"]}


def test_nsight_or_a_running_torch_profiler_is_never_shared(tmp_path, fake_so):
    """Sharing CUPTI with Nsight, or with a torch.profiler session in progress, would take the
    other tool's records: cprof refuses as before (strict)."""
    pytest.importorskip("torch")
    for scenario, holder in (("shared_nsight", "Nsight Systems"), ("shared_kineto_active",
                                                                  "Kineto")):
        os.makedirs(tmp_path / scenario)
        res = run(scenario, tmp_path / scenario, fake_so)
        assert res["raised"] and "another profiler holds CUPTI" in res["raised"], scenario
        assert holder in res["raised"] and res["window_open"] is False


def test_a_torch_profiler_on_another_thread_is_never_shared(tmp_path, fake_so):
    """torch's profiler state is per thread: _profiler_type() reads NONE on every thread but
    the session's, so a window opened on another thread (a worker's, cprof run's timer
    thread) took a running torch.profiler for an idle Kineto and shared CUPTI with it: on a
    GPU it registers cprof's buffer callbacks over Kineto's (Kineto's records go to cprof) and
    its stop switches Kineto's activity kinds off. A session on any thread now refuses as one
    on the window's own thread does (strict); once it is over, sharing comes back."""
    pytest.importorskip("torch")
    res = run("kineto_on_another_thread", tmp_path, fake_so)
    for case in ("main_session_worker_window", "worker_session_main_window"):
        assert res[case] and "another profiler holds CUPTI" in res[case], (case, res)
    assert res["after"] is None, res
    assert res["window_open"] is False


def test_a_window_stop_and_a_torch_profiler_start_end_the_gpu_side_once(tmp_path, fake_so):
    """torch.profiler started on another thread just before a window stops: its _end_gpu was
    in the closing CUDA sync (seconds on a busy GPU; the fake has none, so it was never seen)
    when the window's stop ended GPU collection, then its own gpu_stop failed and warned that
    the window's GPU records were lost (they were not), with a gpu_error in the metadata; with
    the two inside gpu_stop at once, one snapshot could replace the other. Ending the GPU
    side is now one caller at a time, and the second finds it ended."""
    pytest.importorskip("torch")
    res = run("stop_races_torch_start", tmp_path, fake_so)
    assert not [w for w in res["warnings"] if "are lost" in w], res["warnings"]
    t = load_trace(res["trace"])
    assert "gpu_error" not in t["cprof"], t["cprof"].get("gpu_error")
    assert len(events(t, "kernel")) == 7
    assert res["gpu_active"] is False


@pytest.mark.parametrize("foreign", [1, 8])
def test_buffers_of_another_client_completed_into_a_window_are_counted(tmp_path, fake_so,
                                                                        foreign):
    """CUPTI completes a buffer through the callbacks registered now, whoever handed it out:
    one that Kineto's session left with CUPTI comes to cprof's window. Such a buffer took a
    place in the completed list, sized for the pool's own buffers, so the window's own last
    buffer found none and its records (every kernel of this window) were dropped with no
    count or word. A few such buffers now have places of their own (decoded: their records
    are the process's GPU work), and a completion that still finds none is counted, warned
    about and in the metadata."""
    res = run("foreign_buffers", tmp_path, fake_so, FAKE_FOREIGN=str(foreign))
    t = load_trace(res["trace"])
    names = [k["name"] for k in events(t, "kernel")]
    unkept = t["cprof"]["dropped"]["gpu_buffers_unkept"]
    if foreign == 1:  # room for it: the window's 7 kernels and the foreign one
        assert len(names) == 8 and unkept == 0, (names, unkept)
    else:  # more than the places kept for them: what found none is counted and said
        assert unkept >= 1, t["cprof"]["dropped"]
        assert [w for w in res["warnings"] if "could not be kept" in w], res["warnings"]
    assert t["cprof"]["gpu"]["unrecovered"]["foreign_buffers"] == foreign


@pytest.mark.parametrize("holder", ["HPCToolkit", "CUPTI for nsys", "Score-P", "ncu"])
def test_a_named_profiling_tool_is_never_taken_for_kineto(tmp_path, fake_so, holder):
    """With torch loaded, an idle holder is shared only when it may be Kineto: a profiling tool
    CUPTI names is refused (strict), its name in the error."""
    pytest.importorskip("torch")
    res = run("shared_tool", tmp_path, fake_so, FAKE_HOLDER=holder)
    assert res["raised"] and "another profiler holds CUPTI" in res["raised"]
    assert holder in res["raised"] and res["window_open"] is False


def test_other_cupti_client_lenient_gives_cpu_trace_and_warning(tmp_path, fake_so):
    res = run("busy_lenient", tmp_path, fake_so)
    assert any("CPU activity only" in w for w in res["warnings"])
    t = load_trace(res["trace"])
    assert not events(t, "kernel") and "gpu_unavailable" in t["cprof"]
    assert [e["name"] for e in events(t, "user_annotation")] == ["step", "launches"]
    # the trace and the context say what was collected: CPU only
    assert t["cprof"]["config"]["collected_activities"] == ["CPU"]
    assert res["collected"] == ["CPU"]


def test_insufficient_privileges_message(tmp_path, fake_so):
    res = run("privileges", tmp_path, fake_so)
    assert any("INSUFFICIENT_PRIVILEGES" in w and "NVreg_RestrictProfilingToAdminUsers" in w
               for w in res["warnings"])
    t = load_trace(res["trace"])
    assert "INSUFFICIENT_PRIVILEGES" in t["cprof"]["gpu_unavailable"]
    # the window set the zeroed-buffer attribute before enabling failed, and took it back (and
    # asked for shared buffers: a third set)
    assert res["zeroed_attr_set"] == 3 and res["zeroed_attr"] == 0
    assert res["per_thread_attr"] == 0
    assert t["cprof"]["config"]["collected_activities"] == ["CPU"]
    assert res["warning_classes"].count("GpuUnavailableWarning") == 1


@pytest.mark.parametrize("code, name", [
    (35, "INSUFFICIENT_PRIVILEGES"), (40, "VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES"),
    (27, "NOT_SUPPORTED"), (45, "WSL_DEVICE_NOT_SUPPORTED")])
def test_insufficient_privileges_warns_once_per_profiler_not_per_cycle(tmp_path, fake_so, code,
                                                                        name):
    """No permission, or a device / setup CUPTI cannot trace (a vGPU, WSL, MIG, ...), is the
    machine's: GPU off for the profiler's later windows with one warning (decision 147). Only
    35 was: 40 and the NOT_SUPPORTED family were taken as errors of one window, asked again and
    warned about every schedule cycle."""
    res = run("privileges_schedule", tmp_path, fake_so, FAKE_ENABLE_ERROR=str(code))
    warned = [c for c, w in zip(res["warning_classes"], res["warnings"]) if name in w]
    assert warned == ["GpuUnavailableWarning"], res["warnings"]
    assert not any("asks CUPTI again" in w for w in res["warnings"]), res["warnings"]
    assert res["traces"] == 3
    assert res["collected"] == ["CPU"]


@pytest.mark.parametrize("case, env, words", [
    ("no driver", {"CPROF_LIBCUDA_PATH": "/nonexistent/libcuda.so.1"},
     ["no NVIDIA driver", "/nonexistent/libcuda.so.1"]),
    ("no GPU", {"FAKE_CUINIT_ERROR": "100"},
     ["cuInit failed", "CUDA error 100", "no CUDA-capable device", "CUDA_VISIBLE_DEVICES"]),
    ("driver/module mismatch", {"FAKE_CUINIT_ERROR": "803"},
     ["cuInit failed", "CUDA error 803", "kernel module", "reboot"]),
    ("no driver and the CUPTI named is missing",
     {"CPROF_LIBCUDA_PATH": "/nonexistent/libcuda.so.1",
      "CPROF_CUPTI_PATH": "/nonexistent/libcupti.so.13", "FAKE_SO": FAKE_SO},
     ["no NVIDIA driver", "CUPTI could not be loaded", "/nonexistent/libcupti.so.13"]),
    ("old driver", {"FAKE_CUDA_DRIVER_VERSION": "12040"},
     ["supports CUDA 12.4", "CUDA 13.0", "update the NVIDIA driver"]),
    ("old CUPTI", {"FAKE_CUPTI_API_VERSION": "26"},
     ["CUPTI could not be loaded", "13.0", "CPROF_CUPTI_PATH"]),
])
def test_no_usable_gpu_says_why_and_records_cpu(tmp_path, fake_so, case, env, words):
    """Each way GPU collection can be impossible: one warning naming the cause and the fix, and
    the CPU trace, with the reason in its metadata."""
    res = run("unavailable", tmp_path, fake_so, **env)
    warned = [w for w in res["warnings"] if "GPU activity" in w]
    assert len(warned) == 1 and all(x in warned[0] for x in words), (case, res["warnings"])
    assert all(x in res["reason"] for x in words), res["reason"]
    t = load_trace(res["trace"])
    assert all(x in t["cprof"]["gpu_unavailable"] for x in words)
    assert t["cprof"]["config"]["collected_activities"] == ["CPU"]
    assert [e["name"] for e in events(t, "user_annotation")] == ["step", "launches"]


def test_cupti_drops_are_counted_and_warned(tmp_path, fake_so):
    res = run("dropped", tmp_path, fake_so)
    assert any("GPU activity records were dropped" in w for w in res["warnings"])
    t = load_trace(res["trace"])
    assert t["cprof"]["dropped"]["gpu_cupti"] == 5


def test_exception_keeps_gpu_records(tmp_path, fake_so):
    res = run("exception", tmp_path, fake_so)
    t = load_trace(res["trace"])
    assert len(events(t, "kernel")) == 7 and t["cprof"]["end"] == "KeyboardInterrupt"


def test_many_windows_no_leak_between_them(tmp_path, fake_so):
    res = run("windows", tmp_path, fake_so)
    assert res["subscribers"] == [0] * 20
    for i, path in enumerate(res["traces"]):
        t = load_trace(path)
        assert len(events(t, "kernel")) == (7 if i % 2 == 0 else 0), i
        assert [e["name"] for e in events(t, "user_annotation")] == [f"window {i}"]
        gpu = t["cprof"]["gpu"]
        assert gpu["buffers_prezeroed"] is True
    # CUPTI was told the buffers come zero-filled (it skips zeroing them on the thread that
    # asks, mid-window), and every buffer it got was: the ones written in window i are zeroed
    # when window i + 1 starts. After the last window the process-wide attribute is off again
    # (a later torch.profiler session hands CUPTI buffers nobody zeroed).
    assert res["zeroed_requests"] >= 10 and res["dirty_buffers"] == 0
    assert res["zeroed_attr"] == 0


def test_gpu_memory_counter_never_goes_below_zero(tmp_path, fake_so):
    """Releases of memory allocated before the window: the counter starts at the least the
    window proves was allocated then (8 MiB freed before anything was allocated), so it reads
    0 at its lowest instead of -8 MiB, and every step keeps its size."""
    res = run("memory_freed_from_before", tmp_path, fake_so)
    mem = [e["args"]["allocated bytes"] for e in events(load_trace(res["trace"]), ph="C")
           if e["name"] == "GPU memory (CUPTI)"]
    assert mem == [0, 4 << 20, 2 << 20]
    # no kernel ran on the device: its process is named all the same
    procs = {e["pid"]: e["args"]["name"] for e in events(load_trace(res["trace"]), ph="M")
             if e["name"] == "process_name"}
    assert procs.get(0) == "GPU 0"


def test_memory_records_become_counter_tracks(tmp_path, fake_so):
    """MEM: MEMORY2 allocations/releases as the "GPU memory (CUPTI)" counter, MEMORY_POOL
    operations (cudaMallocAsync pools) as "GPU memory pool (CUPTI)", both on the device."""
    res = run("memory", tmp_path, fake_so)
    t = load_trace(res["trace"])
    mem = [e for e in events(t, ph="C") if e["name"] == "GPU memory (CUPTI)"]
    assert [e["args"]["allocated bytes"] for e in mem] == [4 << 20, 0]
    pool = [e for e in events(t, ph="C") if e["name"] == "GPU memory pool (CUPTI)"]
    assert [(e["args"]["pool bytes"], e["args"]["utilized bytes"]) for e in pool] == \
        [(2 << 20, 0), (1 << 20, 1 << 20)]
    assert {e["pid"] for e in mem + pool} == {0}
    assert pool[1]["ts"] - pool[0]["ts"] == pytest.approx(3.0, abs=0.002)
    assert mem[0]["ts"] - pool[0]["ts"] == pytest.approx(1.0, abs=0.002)
    # the CPU side of MEM is there too
    assert [e for e in events(t, ph="C") if e["name"] == "CPU memory"]


def test_nvtx_ranges_and_injection_env(tmp_path, fake_so):
    res = run("nvtx", tmp_path, fake_so)
    assert res["nvtx_env"] == fake_so
    t = load_trace(res["trace"])
    (m,) = [e for e in events(t, "user_annotation") if e["args"].get("nvtx")]
    assert m["name"] == "my nvtx range" and m["args"]["domain"] == "my domain"
    assert abs(m["dur"] - 5.0) < 0.002
    # events() / key_averages() give it as the trace does: a user_annotation range of its
    # thread, nested in the range open there, with a CPU row (it was a CUDA
    # "gpu_user_annotation" event of no row, unlike the trace)
    assert res["events"] == [["my nvtx range", "user_annotation", "CPU", res["tid"], "around"]]
    assert res["rows"] == [["my nvtx range", "CPU", 1]]
    # an External id as every user_annotation has (TRACE_FORMAT.md), unique in the trace
    ids = [e["args"]["External id"] for e in t["traceEvents"]
           if e.get("ph") == "X" and e.get("cat") in ("user_annotation", "cpu_op",
                                                      "python_function")]
    assert m["args"]["External id"] > 0 and ids.count(m["args"]["External id"]) == 1


def test_driver_only_diagnostic_mode_says_so_and_keeps_kernels(tmp_path, fake_so):
    """CPROF_CUPTI_API_RECORDS=driver (benchmarks only, design decision 67): KIND_DRIVER alone,
    no runtime records; the trace names the mode, and GPU work is still collected (on a real
    GPU nothing links through the runtime's nested driver calls: measured, 0 of 960)."""
    res = run("basic", tmp_path, fake_so, CPROF_CUPTI_API_RECORDS="driver")
    t = load_trace(res["trace"])
    a = t["cprof"]["gpu"]["api_records"]
    assert a["mode"] == "driver+filter" and a["ids_switched_off"] > 100, a
    assert not [e for e in events(t, "cuda_runtime") if e["name"].startswith("cuda")]
    assert events(t, "kernel")


def test_cupti_teardown_detaches_at_the_next_api_exit(tmp_path, fake_so):
    """CPROF_CUPTI_TEARDOWN=1: at stop the subscriber keeps the runtime and driver callback
    domains; the next CUDA API exit unsubscribes and calls cuptiFinalize (once); a window
    opened before any CUDA call takes the subscriber back; one opened after the detach
    subscribes again, and every window has its GPU records."""
    res = run("teardown", tmp_path, fake_so, CPROF_CUPTI_TEARDOWN="1")
    runtime_driver = (1 << 1) | (1 << 2)
    a = res["after_stop"]
    assert a["subscribed"] == 1 and a["domains"] == runtime_driver
    assert a["info"]["state"] == "pending" and a["finalize_calls"] == 0
    b = res["after_second_stop"]
    # the second window reused the pending subscriber (so did each window's warmup restart)
    assert b["subscribe_calls"] == a["subscribe_calls"] == 1
    assert b["info"]["state"] == "pending" and b["finalize_calls"] == 0
    assert res["callbacks_entry_exit"] == 2
    c = res["after_call"]
    assert c["subscribed"] == 0 and c["finalize_calls"] == 1
    assert c["info"] == {"state": "idle", "finalized": 1, "last_result": 0}
    assert res["after_second_call"]["finalize_calls"] == 1
    d = res["after_third_stop"]
    assert d["subscribe_calls"] == 2 and d["info"]["state"] == "pending"  # subscribed anew
    for path in res["traces"]:
        t = load_trace(path)
        assert len(events(t, "kernel")) == 7, path
        assert t["cprof"]["gpu"]["cupti_subscriber"] == "held by cprof"


def test_without_teardown_cupti_is_never_finalized(tmp_path, fake_so):
    res = run("teardown", tmp_path, fake_so)
    for key in ("after_stop", "after_call", "after_third_stop"):
        s = res[key]
        assert s["subscribed"] == 0 and s["domains"] == 0 and s["finalize_calls"] == 0, key
        assert s["info"] == {"state": "idle", "finalized": 0, "last_result": 0}
    assert res["callbacks_entry_exit"] == 0
    # every start subscribes anew (the windows' warmup restarts included)
    n = res["after_stop"]["subscribe_calls"]
    assert n >= 1 and res["after_third_stop"]["subscribe_calls"] == 3 * n


def test_cuda13_launch_stub_is_a_launch(tmp_path, fake_so):
    """nvcc 13 compiles <<<>>> to __cudaLaunchKernel (runtime ids 505 / 506): kernels of custom
    extensions built with it get their launch record, flow and External id like any other."""
    t = load_trace(run("launch13", tmp_path, fake_so)["trace"])
    flows = {e["id"] for e in events(t, ph="f")}
    ks = events(t, "kernel")
    assert len(ks) == 3
    assert all(k["args"]["correlation"] in flows for k in ks)
    assert len({k["args"]["External id"] for k in ks}) == 1 and ks[0]["args"]["External id"]
    assert [e["name"] for e in events(t, "cuda_runtime")] == ["cudaLaunchKernel"] * 3


@pytest.mark.parametrize("how, mb", [({"CPROF_GPU_BUFFER_MB": "8"}, 8),
                                     ({"POOL_MB_ARG": "8"}, 8), ({"POOL_MB_ARG": "4"}, 4),
                                     ({"POOL_MB_ARG": "24"}, 24)])
def test_full_cupti_buffer_pool_is_counted_warned_and_in_the_metadata(tmp_path, fake_so, how,
                                                                       mb):
    """A window with more GPU records than the pool holds: the refused buffer requests are
    counted, warned about once, and written into the trace; the records that fit are kept.
    The cap comes from gpu_buffer_mb or CPROF_GPU_BUFFER_MB, and is kept: a cap under two
    8 MiB buffers makes the buffers smaller (it used to be 16 MiB whatever was asked)."""
    res = run("pool_full", tmp_path, fake_so, **how)
    t = load_trace(res["trace"])
    kept = len(events(t, "kernel"))
    assert 0 < kept < res["kernels_added"]
    refused = t["cprof"]["dropped"]["gpu_buffers_refused"]
    assert refused > 0 and t["cprof"]["gpu"]["pool_bytes"] == mb << 20
    assert kept * 200 <= (mb << 20)  # a kernel record takes ~216 bytes: the cap held
    warned = [w for w in res["warnings"] if "filled up" in w]
    assert len(warned) == 1 and "gpu_buffer_mb" in warned[0] and f"{mb} MiB" in warned[0]
    # and how many records CUPTI dropped for want of a buffer: read once more at the stop
    # (no buffer completes once the pool is dry, and the count was read only with one)
    dropped = t["cprof"]["dropped"]["gpu_cupti"]
    assert kept + dropped == res["kernels_added"], (kept, dropped)
    assert f"({dropped} counted by CUPTI)" in warned[0]
    # the report flags it
    r = subprocess.run([sys.executable, "-m", "cprof", "report", res["trace"], "--format",
                        "json"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    diag = [d for d in json.loads(r.stdout)["diagnoses"] if d["id"] == "dropped"]
    assert diag and diag[0]["evidence"]["gpu_buffers_refused"] == refused


def test_records_of_more_threads_than_pool_buffers_are_all_kept(tmp_path, fake_so):
    """CUPTI 13 gives each thread that makes records a buffer of its own by default
    (CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER = 1, modelled by the fake), so a window in
    which more threads launched than the pool has buffers (16 MiB: two) lost the other threads'
    launches whole, reported as a pool that "filled up" with advice to shorten the window.
    cprof asks for one shared set of buffers, which its pool is sized for."""
    res = run("pool_threads", tmp_path, fake_so, THREADS="4")
    t = load_trace(res["trace"])
    assert sorted(e["name"] for e in events(t, "kernel")) == ["k0", "k1", "k2", "k3"]
    assert t["cprof"]["dropped"]["gpu_buffers_refused"] == 0
    assert not [w for w in res["warnings"] if "filled up" in w], res["warnings"]
    assert res["per_thread_attr"] == 0


def test_per_thread_buffers_diagnostic_sets_cuptis_default_explicitly(tmp_path, fake_so):
    """CPROF_CUPTI_PER_THREAD_BUFFERS=1 (the A/B mode of bench_cupti_modes.py) only left the
    attribute alone (review9): where a CUPTI's default is shared buffers, or after a window
    of the other mode, the "per-thread" measurement measured shared buffers. It sets 1: and
    with per-thread buffers, the fake's four threads outnumber the two-buffer pool again,
    which the trace reports, never silently."""
    res = run("pool_threads", tmp_path, fake_so, THREADS="4", CPROF_CUPTI_PER_THREAD_BUFFERS="1",
              FAKE_CUPTI_PER_THREAD_DEFAULT="0")
    assert res["per_thread_attr"] == 1
    t = load_trace(res["trace"])
    kept = len(events(t, "kernel"))
    assert kept < 4 and t["cprof"]["dropped"]["gpu_buffers_refused"] > 0


def test_gpu_buffer_mb_is_checked():
    import cprof
    for bad in (0, -1, "lots", float("inf"), float("nan"), 1e12):
        with pytest.raises(ValueError, match="gpu_buffer_mb"):
            cprof.profile(activities=["CPU"], gpu_buffer_mb=bad)
        with pytest.raises(ValueError, match="gpu_buffer_mb"):
            cprof.ProfilerContext(gpu_buffer_mb=bad)
    for bad in (0, -1, "lots", float("inf"), float("nan")):
        with pytest.raises(ValueError, match="buffer_size_mb"):
            cprof.profile(activities=["CPU"], buffer_size_mb=bad)
        with pytest.raises(ValueError, match="buffer_size_mb"):
            cprof.ProfilerContext(buffer_size_mb=bad)
    assert not cprof._C.active()


@pytest.mark.parametrize("bad, says", [("abc", "must be a number of MiB, got 'abc'"),
                                       ("-5", "CPROF_GPU_BUFFER_MB must be a finite positive")])
def test_cprof_gpu_buffer_mb_is_checked_when_the_profiler_is_made(monkeypatch, bad, says):
    """It was read only when a GPU window opened: a typo passed a CPU-only dry run and failed
    on the GPU nodes, from `with` (docs2 audit)."""
    import cprof
    monkeypatch.setenv("CPROF_GPU_BUFFER_MB", bad)
    with pytest.raises(ValueError, match=says):
        cprof.ProfilerContext(activities=["CPU"])
    with pytest.raises(ValueError, match=says):
        cprof.profile(activities=["CPU"])
    monkeypatch.setenv("CPROF_GPU_BUFFER_MB", "")  # empty: the default
    cprof.profile(activities=["CPU"])


def test_buffer_pool_that_cannot_be_had_closes_the_window(tmp_path, fake_so):
    """gpu_start failing for memory: a MemoryError saying what to lower, and no window left
    open (the next one opens and collects)."""
    res = run("pool_unobtainable", tmp_path, fake_so)
    assert "cannot allocate" in res["raised"] and "gpu_buffer_mb" in res["raised"]
    assert res["open_after"] is False
    assert len(events(load_trace(res["trace"]), "kernel")) == 7


def test_what_a_stop_cannot_recover_is_counted_and_warned(tmp_path, fake_so):
    """A final flush that fails, a buffer whose walk ends on an error, records without an end
    and NVTX ranges never popped: each is warned about and written into the metadata."""
    res = run("unrecovered", tmp_path, fake_so)
    warned = res["warned_at"]
    t = load_trace(res["flush"])
    assert t["cprof"]["dropped"]["gpu_flush_error"] == 999
    assert [w for w in warned["flush"] if "could not flush" in w and "999" in w]
    # the second flush refused after the first went through: what came between them (work
    # finishing while collection was switched off) is left with CUPTI, said as well
    t = load_trace(res["flush2"])
    assert t["cprof"]["dropped"]["gpu_flush_error"] == 999
    assert [w for w in warned["flush2"] if "could not flush" in w and "999" in w]
    t = load_trace(res["nextrecord"])
    assert t["cprof"]["dropped"]["gpu_buffers_undecoded"] == 1
    assert t["cprof"]["gpu"]["unrecovered"]["undecoded_error"] == 999
    assert [w for w in warned["nextrecord"] if "could not be read to their end" in w]
    # CUPTI refusing to say how many records it dropped: unknown, not 0
    t = load_trace(res["dropcount"])
    assert t["cprof"]["dropped"]["gpu_drop_count_errors"] >= 1
    assert t["cprof"]["gpu"]["unrecovered"]["drop_count_errors"] >= 1
    assert [w for w in warned["dropcount"] if "would not say how many" in w]
    assert len(events(t, "kernel")) > 0  # the records it did deliver are all there
    t = load_trace(res["incomplete"])
    assert [e["name"] for e in events(t, "kernel")] == ["fine"]
    assert t["cprof"]["dropped"]["gpu_incomplete"] == 4  # no end, backwards, zero start, NVTX
    assert t["cprof"]["gpu"]["unrecovered"]["nvtx_open"] == 1
    # one record from before the window would stretch the timeline by a second: dropped,
    # counted; no event of the trace starts before the window
    assert t["cprof"]["gpu"]["dropped"]["outside_window"] == 1
    start_us = min(e["ts"] for e in t["traceEvents"] if e.get("ph") == "X")
    assert start_us >= 0
    w = [w for w in warned["incomplete"] if "no end time" in w]
    assert len(w) == 1 and "3 GPU activity record(s)" in w[0] and "1 NVTX range(s)" in w[0]


def test_a_buffer_cupti_still_holds_after_a_refused_flush_is_left_to_it(tmp_path, fake_so):
    """A stop whose flushes CUPTI refuses leaves the buffer it was filling with CUPTI (it is
    CUPTI's until bufferCompleted gives it back). The next window zeroed it and handed it out
    again, so CUPTI's records landed after zeros and the whole buffer, that window's kernels
    included, could not be read. Now it stays CUPTI's: the next window gets all its kernels,
    the older records in that buffer are counted outside the window."""
    res = run("flush_refused_then_clean", tmp_path, fake_so)
    assert load_trace(res["refused"])["cprof"]["dropped"]["gpu_flush_error"] == 999
    t = load_trace(res["clean"])
    assert len(events(t, "kernel")) == 7
    assert t["cprof"]["gpu"]["unrecovered"]["buffers_undecoded"] == 0
    assert t["cprof"]["gpu"]["dropped"]["outside_window"] > 0  # the refused window's records
    assert res["misused"] == 0  # no buffer touched while CUPTI held it


def test_a_held_buffer_and_a_resized_pool_lose_no_completed_buffer(tmp_path, fake_so):
    """A buffer CUPTI still holds when the next window's pool is made anew (another size) is
    left mapped and completed in that window, beside the new pool's buffers: the list of
    completed buffers had room for the new pool's only, so the last one completed (the
    stop's flush) was dropped in silence, its kernels missing with no drop counted."""
    res = run("flush_refused_then_resized", tmp_path, fake_so)
    assert res["completed_in_window"] == 3  # the held buffer and both new ones
    t = load_trace(res["resized"])
    assert len([e for e in events(t, "kernel") if e["name"] == "fill"]) == res["made"]
    assert t["cprof"]["gpu"]["unrecovered"]["buffers_undecoded"] == 0


def test_a_clean_window_reports_nothing_unrecovered(basic):
    res, t = basic
    assert t["cprof"]["gpu"]["unrecovered"] == {"flush_error": 0, "buffers_undecoded": 0,
                                                "buffers_unkept": 0, "foreign_buffers": 0,
                                                "undecoded_error": 0, "nvtx_open": 0,
                                                "drop_count_errors": 0, "disable_error": 0,
                                                "unsubscribe_error": 0}
    assert t["cprof"]["dropped"]["gpu_drop_count_errors"] == 0
    assert t["cprof"]["dropped"]["gpu_flush_error"] == 0
    assert not [w for w in res["warnings"] if "flush" in w or "no end time" in w
                or "read to their end" in w], res["warnings"]


def test_child_forked_in_a_gpu_window_has_no_collector(tmp_path, fake_so):
    """CUDA does not survive fork(): the child has no GPU collection running, and its own
    window says why it records CPU only; the parent's trace is complete."""
    res = run("fork_child", tmp_path, fake_so)
    child = res["child"]
    assert child["gpu_active"] is False and child["active"] is False
    assert [w for w in child["warnings"] if "forked" in w and "spawn" in w], child["warnings"]
    assert not [w for w in child["warnings"] if "already active" in w]
    tc = load_trace(child["trace"])
    assert "forked" in tc["cprof"]["gpu_unavailable"]
    assert [e["name"] for e in events(tc, "user_annotation")] == ["child work"]
    assert len(events(load_trace(res["trace"]), "kernel")) == 7


def test_gpu_user_annotation_spans_belong_to_user_ranges_under_with_stack(tmp_path, fake_so):
    """With with_stack (ProfilerContext's default) the innermost range at launch time is often
    a C call or Python function: GPU work keeps that External id, but its
    gpu_user_annotation span is the user's range around it, as Kineto's are."""
    t = load_trace(run("stack_spans", tmp_path, fake_so)["trace"])
    cpu = {e["args"]["External id"]: e for e in t["traceEvents"]
           if e.get("ph") == "X" and "External id" in e.get("args", {})
           and e.get("cat") in ("cpu_op", "python_function", "user_annotation")}
    kernels = events(t, "kernel")
    assert kernels and any(cpu[k["args"]["External id"]]["cat"] == "cpu_op" for k in kernels)
    spans = events(t, "gpu_user_annotation")
    assert spans and {s["name"] for s in spans} == {"launches"}
    assert {s["tid"] for s in spans} == {k["tid"] for k in kernels}


def test_with_modules_links_gpu_work_to_the_innermost_module_with_ops_recorded(tmp_path,
                                                                               fake_so):
    """Issue 5: with_modules, kernels link to the innermost module; cprof.profile records
    torch's operators with it too (torch.profiler's with_modules has them), and an operator
    or C call inside the module is not the link's target."""
    pytest.importorskip("torch")
    res = run("modules_link", tmp_path, fake_so)
    assert "aten::add" in res["ops"]
    t = load_trace(res["trace"])
    # with torch's operators recorded, C calls are python_function ranges (decision 124)
    assert "time.sleep" not in " ".join(res["ops"])
    assert [e for e in events(t, "python_function") if e["name"].endswith("sleep")]
    mods = {e["name"]: e for e in events(t, "user_annotation")}
    assert {"Sequential", "1"} <= set(mods)
    ext = mods["1"]["args"]["External id"]
    work = events(t, "kernel") + events(t, "gpu_memcpy") + events(t, "cuda_runtime")
    assert work and all(e["args"]["External id"] == ext for e in work)


def test_with_stack_alone_links_gpu_work_past_the_module_events(tmp_path, fake_so):
    """with_stack without with_modules writes module calls as "nn.Module: " Python events
    only: GPU work links to the range around them (as to no python_function), never to the
    External id of a module range the trace does not have."""
    pytest.importorskip("torch")
    res = run("modules_stack_only", tmp_path, fake_so)
    t = load_trace(res["trace"])
    assert not [e for e in events(t, "user_annotation") if e["name"] in ("Sequential", "1")]
    assert [e for e in events(t, "python_function") if e["name"] == "nn.Module: 1"]
    (around,) = [e for e in events(t, "user_annotation") if e["name"] == "around"]
    cpu_ids = {e["args"]["External id"] for e in events(t, "user_annotation")
               + events(t, "cpu_op")}
    work = events(t, "kernel") + events(t, "gpu_memcpy") + events(t, "cuda_runtime")
    # each links to a CPU event the trace has: "around", or a C call (time.sleep) inside
    assert work and all(e["args"]["External id"] in cpu_ids for e in work)
    assert work[0]["args"]["External id"] == around["args"]["External id"]


def test_results_charge_gpu_work_once_and_list_the_cuda_calls(tmp_path, fake_so):
    """cprof.profile's key_averages / events() with GPU work, as torch.profiler's: the CUDA
    calls are CPU rows nested in the range that made them (its self CPU time leaves them
    out); "Self CUDA time total" counts each kernel, copy and set once (the CPU rows that
    launched them were summed as well: every Self CUDA % was half what it should be)."""
    res = run("results", tmp_path, fake_so)
    rows = res["rows"]
    gpu = {k: r for k, r in rows.items() if r["device_type"] == "CUDA"}
    assert gpu and all(r["cpu_total"] == 0 for r in gpu.values())
    gpu_total = sum(r["self_dev"] for r in gpu.values())
    assert rows["launches"]["self_dev"] == pytest.approx(gpu_total)
    footer = [ln for ln in res["table"].splitlines() if ln.startswith("Self CUDA time total")]
    (line,) = footer
    shown = float(re.search(r"([\d.]+)us", line).group(1))
    assert shown == pytest.approx(gpu_total, abs=1e-3)
    (launch_row,) = [ln for ln in res["table"].splitlines() if ln.strip().startswith("launches")]
    assert "100.00%" in launch_row.split()[6:8]
    calls = {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync",
             "cudaStreamSynchronize", "cudaGraphLaunch"}
    assert calls <= {k for k, r in rows.items() if r["device_type"] == "CPU"}
    assert rows["cudaLaunchKernel"]["count"] == 4 and rows["cudaLaunchKernel"]["self_dev"] == 0
    assert set(res["children"]) == calls | {"cuLaunchKernel"}
    assert res["child_parents"] == ["launches"]
    for e in res["launch_events"]:
        assert e["device_type"] == "CPU" and e["thread"] == res["tid"] and e["self_dev"] == 0
    spent = sum(e["self_cpu"] for e in res["launch_events"])
    assert res["launches_self_cpu"] == pytest.approx(res["launches_cpu"] - spent, abs=1e-3)
    assert sorted(k[0] for k in res["kernels"]) == sorted(
        n for n, r in gpu.items() for _ in range(r["count"]))


def test_results_keep_cuda_syncs_off_the_cpu_and_out_of_the_rows(tmp_path, fake_so):
    """A cuda_sync record (the device side of cudaStreamSynchronize) is a CUDA event of no
    thread, as Kineto files CUDA_SYNC: it was a CPU event of thread 0 whose wait counted as CPU
    time, a "Stream Sync" row of events().key_averages() but not of prof.key_averages()
    (torch's are one list averaged). Its device time is the work it waited for, counted there
    (decision 148)."""
    res = run("results", tmp_path, fake_so)
    (sync,) = res["syncs"]
    assert sync == {"device_type": "CUDA", "thread": None, "cpu_total": 0, "self_cpu": 0,
                    "dev_total": 0, "stream": 13}
    assert res["event_rows"] == res["profile_rows"]
    assert "Stream Sync" not in {r[0] for r in res["profile_rows"]}
    assert res["events_self_cpu"] == pytest.approx(res["profile_self_cpu"])


def test_a_merged_duplicate_range_keeps_its_child_s_kernels(tmp_path, fake_so):
    """torch's _remove_dup_nodes lifts the merged child's kernels into the parent with its
    device time: the parent's kernels list was left empty while its self CUDA time had
    them."""
    res = run("dup_kernels", tmp_path, fake_so)
    assert res["kernels"] and res["self_dev"] > 0
    assert sum(k[2] for k in res["kernels"]) == pytest.approx(res["self_dev"])
    assert res["dev_total"] == pytest.approx(res["self_dev"])


def test_toggle_collection_dynamic_leaves_out_what_was_launched_while_off(tmp_path, fake_so):
    """torch.profiler's toggle_collection_dynamic: GPU work asked for while CUDA is off (its
    launch call's time, wherever the kernel runs) is left out, its calls and syncs too, and
    counted; work launched before the toggle that runs while off is kept. CPU off keeps
    kernels, linked to the range open before the toggle."""
    res = run("toggle", tmp_path, fake_so)
    names = set(res["names"])
    assert {"k_before", "k_launched_before_runs_while_off", "k_cpu_off"} <= names
    assert not {"k_off", "k_off_runs_after", "k_off_driver"} & names
    assert {"on_before", "cuda_off", "outer"} <= names and "cpu_off" not in names
    t = load_trace(res["trace"])
    kernels = {e["name"]: e for e in events(t, "kernel")}
    assert set(kernels) == {"k_before", "k_launched_before_runs_while_off", "k_cpu_off"}
    launches = events(t, "cuda_runtime") + events(t, "cuda_driver")
    corr = sorted(e["args"]["correlation"] for e in launches)
    assert corr == [1, 2, 7]  # the off interval's calls (3-6) and its sync are gone
    assert not events(t, "cuda_sync")
    # memory records are kept (a running total): the allocation while off and its release
    mem = [e["args"]["allocated bytes"] for e in events(t, ph="C")
           if e["name"] == "GPU memory (CUPTI)"]
    assert mem == [4 << 20, 0]
    outer = [e for e in events(t, "user_annotation") if e["name"] == "outer"]
    assert kernels["k_cpu_off"]["args"]["External id"] == outer[0]["args"]["External id"]
    meta = t["cprof"]
    assert meta["gpu"]["toggled_off"] == 8  # 3 kernels, their 3 calls, a sync call, its sync
    assert meta["counts"]["cpu_ranges_toggled_off"] == 1
    toggles = meta["toggle_collection_dynamic"]["toggles"]
    assert [(x["enable"], x["activities"]) for x in toggles] == [
        (False, ["CUDA"]), (True, ["CUDA"]), (False, ["CPU"]), (True, ["CPU"])]
    assert [x["ts_us"] for x in toggles] == sorted(x["ts_us"] for x in toggles)
    # toggled off before the window: nothing of the GPU's, said so
    assert "k_never" not in res["names_off_at_start"] and "whole" in res["names_off_at_start"]
    t2 = load_trace(res["trace_off_at_start"])
    assert not events(t2, "kernel") and not events(t2, "cuda_runtime")
    assert t2["cprof"]["toggle_collection_dynamic"]["off_at_start"] == ["CUDA"]
    assert t2["cprof"]["gpu"]["toggled_off"] == 2


def test_toggle_leaves_order_and_counts_right_across_many_records(tmp_path, fake_so):
    """The records left out are taken out of the decoded chunks in place (4096 records
    each): the rest keep their order, counts and kinds add up."""
    res = run("toggle_many", tmp_path, fake_so)
    n = 3000
    kernels = res["kernels"]
    assert kernels == [f"on1_{i}" for i in range(n)] + [f"on2_{i}" for i in range(n)]
    gpu = res["gpu"]
    assert gpu["toggled_off"] == 2 * n
    assert gpu["records"]["kernel"] == gpu["records"]["runtime"] == 2 * n
    assert gpu["total"] == sum(gpu["records"].values())


def test_a_thread_seen_only_in_cupti_records_is_named(tmp_path, fake_so):
    """A thread that launched GPU work but recorded no range (autograd's device thread without
    operator capture) gets thread_name / thread_sort_index metadata like every track: its OS
    name when it is still running."""
    out = run("launcher_thread", tmp_path, fake_so)
    t = load_trace(out["trace"])
    tid = out["launcher_tid"]
    (call,) = [e for e in events(t, "cuda_runtime") if e["tid"] == tid]
    names = {e["tid"]: e["args"]["name"] for e in events(t, ph="M") if e["name"] == "thread_name"}
    assert names.get(tid) == "pt_autograd_0"
    sort = [e for e in events(t, ph="M") if e["name"] == "thread_sort_index" and e["tid"] == tid]
    assert len(sort) == 1 and out["main_tid"] in names
    assert len([e for e in events(t, ph="M") if e["name"] == "thread_name"
                and e["tid"] == tid]) == 1



def test_kernels_past_a_full_name_table_carry_the_marker_name(tmp_path, fake_so):
    """More distinct kernel names than the name table holds: the kernels past it are named
    '[cprof: name table full]', as CPU ranges are, and counted; they were written as ""."""
    res = run("names_full", tmp_path, fake_so, CPROF_NAMES_LIMIT="150")
    t = load_trace(res["trace"])
    names = [e["name"] for e in events(t, "kernel")]
    assert len(names) == 300 and "" not in names
    marked = names.count("[cprof: name table full]")
    assert marked > 0 and t["cprof"]["names_refused"] >= marked
    assert "kernel0()" in names  # the ones that fit keep their (demangled) names
    assert [m for m in res["warnings"] if "could not be stored: cprof's name table is full" in m]


def test_a_stop_that_cupti_will_not_undo_is_said_and_the_next_window_works(tmp_path, fake_so):
    """cuptiUnsubscribe or cuptiActivityDisable failing at a stop: warned, in the metadata;
    the subscriber CUPTI kept is cprof's own and the next window takes it back (it used to
    raise CuptiBusyError blaming "another profiler"), and collects."""
    res = run("release_refused", tmp_path, fake_so)["release"]
    unsub, disable = res["unsub"], res["disable"]
    assert [w for w in unsub["warned"] if "would not release cprof's subscriber" in w]
    assert unsub["held_between"] == 1 and unsub["held_after"] == 0
    t = load_trace(unsub["first"])
    assert t["cprof"]["gpu"]["unrecovered"]["unsubscribe_error"] == 999
    assert [w for w in disable["warned"] if "would not stop collecting" in w]
    assert load_trace(disable["first"])["cprof"]["gpu"]["unrecovered"]["disable_error"] == 999
    for r in (unsub, disable):
        assert len(events(load_trace(r["next"]), "kernel")) == len(events(load_trace(r["first"]),
                                                                          "kernel")) > 0
    after = load_trace(res["after_failed_start"])
    assert len(events(after, "kernel")) > 0, res["failed_start"]
    assert "another profiler" not in json.dumps(after["cprof"])
    assert res["held_end"] == 0


def test_a_schedules_window_that_cannot_open_raises_once_and_leaves_nothing(tmp_path, fake_so):
    """strict (the default) and CUPTI held by Nsight: the step that opens the window raises
    CuptiBusyError, and the with block's exit does not try to open it again (it used to, and
    warned that stopping failed); the next profile works."""
    res = run("busy_schedule", tmp_path, fake_so)
    assert res["raised"] == "CuptiBusyError" and res["step_num"] == 1
    assert not [w for w in res["warnings"] if "stopping after an exception failed" in w], \
        res["warnings"]
    assert res["after"] == ["after"]


def test_a_start_refused_half_way_leaves_no_buffer_with_cupti(tmp_path, fake_so):
    """A start that fails after some kinds were enabled disabled them without a flush: CUPTI
    kept the pool buffer it had begun writing (a kernel of another thread), the next window
    handed that buffer out again as free, and the stale kernel came back in the next window's
    trace, or two writers shared one buffer (gpurev2 F2). The failure now flushes and discards
    what that delivers, as stop does."""
    res = run("half_started", tmp_path, fake_so)
    assert "stale" not in res["kernels"], res
    assert res["kernels"], res  # the second window's own kernels are there
    assert any("CUPTI" in w or "GPU" in w for w in res["warnings"]), res["warnings"]


def test_stop_synchronizes_every_device_the_program_used(monkeypatch):
    """At stop cprof waits for launched work so its records are complete. torch.cuda.synchronize()
    alone waits for the current device: kernels still running on another GPU (a model split
    across devices) reached CUPTI's forced flush without an end and were dropped as incomplete.
    Every device with a primary context is synchronized; one without is left alone (it ran
    nothing, and synchronizing it would create a context)."""
    torch = pytest.importorskip("torch")
    from cprof import _window

    synced = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    monkeypatch.setattr(torch._C, "_cuda_hasPrimaryContext", lambda i: i in (0, 2),
                        raising=False)
    _window._sync_cuda()
    assert synced == [0, 2]
    # a device whose context has a sticky error (an illegal address) raises: the others are
    # still synchronized (the loop ended at the first, gpurev2 F3)
    def sync(device=None):
        synced.append(device)
        if device == 0:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
    monkeypatch.setattr(torch.cuda, "synchronize", sync)
    synced.clear()
    _window._sync_cuda()
    assert synced == [0, 2]
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    # a torch without the query: the current device, as before
    monkeypatch.delattr(torch._C, "_cuda_hasPrimaryContext")
    synced.clear()
    _window._sync_cuda()
    assert synced == [None]
    # never while this thread's stream captures a CUDA graph: the synchronize would fail and
    # invalidate the user's capture
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    synced.clear()
    _window._sync_cuda()
    assert synced == []


def test_a_peer_copy_names_its_source_and_destination_devices(tmp_path, fake_so):
    """A PtoP copy (CUPTI's MEMCPY2) kept only its launching device: the device it copied to
    was decoded but never written. Kineto writes fromDevice / inDevice / toDevice."""
    t = load_trace(run("p2p", tmp_path, fake_so)["trace"])
    (c,) = events(t, "gpu_memcpy")
    assert c["name"] == "Memcpy PtoP (Device -> Device)"
    assert (c["args"]["fromDevice"], c["args"]["inDevice"], c["args"]["toDevice"]) == (0, 0, 1)
    assert c["args"]["bytes"] == 1 << 20


def test_window_span_leaves_out_cuptis_enabling_and_the_closing_flush(tmp_path, fake_so):
    """Seed-002 audit finding 1: the window's span (Kineto's "PyTorch Profiler (0)", and the
    window metadata) started before CUPTI was enabled and ended after cprof's closing sync
    and flush, so a warmup's restart put ~6 ms of nothing before the first recorded step and
    `cprof report` counted it: utilisation 10.9% instead of 17.6%, a 9 ms "largest gap". With
    each subscribe and flush taking 30 ms, the span now hugs the steps."""
    res = run("slow_cupti", tmp_path, fake_so, FAKE_CUPTI_SLOW_US="30000")
    assert len(res["traces"]) == 2
    for path in res["traces"]:
        t = load_trace(path)
        span = [e for e in events(t, "Trace") if e["name"] == "PyTorch Profiler (0)"]
        assert len(span) == 1, path
        s0, s1 = span[0]["ts"], span[0]["ts"] + span[0]["dur"]
        cpu = [e for e in events(t) if e.get("cat") in ("user_annotation", "gpu_user_annotation")
               and e["name"].startswith(("ProfilerStep#", "step"))]
        assert cpu, path
        first, last = min(e["ts"] for e in cpu), max(e["ts"] + e["dur"] for e in cpu)
        # before: 30+ ms (one subscribe) ahead, 60+ ms (two flushes) after
        assert 0 <= first - s0 < 10_000, (path, first - s0)
        assert 0 <= s1 - last < 10_000, (path, s1 - last)
        w = t["cprof"]["window"]
        assert abs(w["duration_ns"] / 1e3 - span[0]["dur"]) < 1, w
        for k in events(t, "kernel"):  # GPU work is still inside the window it belongs to
            assert k["ts"] >= s0 - 1 and k["ts"] + k["dur"] <= s1 + 1, k


def test_other_threads_recording_around_cprofs_set_up_stay_out_of_the_window(tmp_path,
                                                                            fake_so):
    """Review 5 finding 3: decision 150 moved only the span. A thread recording while cprof
    enabled CUPTI, and during its closing sync and flush, put ranges before and after it:
    `cprof report`'s window (from every event) came back to 101 ms for a 10.5 ms span, and
    events() had negative start_us. The report now counts CPU events inside the profiler's
    span only (GPU work whole), and events() times count from the earliest event."""
    res = run("slow_cupti_threads", tmp_path, fake_so, FAKE_CUPTI_SLOW_US="30000")
    assert res["min_start_us"] >= 0
    t = load_trace(res["trace"])
    (span,) = [e for e in events(t, "Trace") if e["name"] == "PyTorch Profiler (0)"]
    bg = [e for e in events(t, "user_annotation") if e["name"] == "bg"]
    s0, s1 = span["ts"], span["ts"] + span["dur"]
    assert any(e["ts"] < s0 for e in bg) and any(e["ts"] > s1 for e in bg)  # the situation
    r = subprocess.run([sys.executable, "-m", "cprof", "report", res["trace"], "--format",
                        "json"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr
    win = json.loads(r.stdout)["window"]
    kernels = events(t, "kernel")
    lo = min([s0] + [k["ts"] for k in kernels])
    hi = max([s1] + [k["ts"] + k["dur"] for k in kernels])
    assert win["start_us"] == pytest.approx(lo, abs=1) and win["end_us"] == pytest.approx(hi, abs=1)


def test_torch_profiler_taking_cupti_inside_a_window_is_said(tmp_path, fake_so):
    """torch.profiler started with CUDA inside a cprof window that collects GPU activity would
    take CUPTI's buffer callbacks (one client per process), with the records still in a
    buffer, and switch the kinds off at its stop: the window's GPU side was lost without a
    word. The window's GPU collection now ends just before torch's setup, as at a stop (its
    records so far kept, CUPTI released); a warning and the metadata say so. A CPU-only
    torch.profiler inside a window takes nothing and nothing is said."""
    pytest.importorskip("torch")
    res = run("torch_profiler_inside", tmp_path, fake_so)
    assert not [w for w in res["warned_cpu_only"] if "torch.profiler" in w]
    cpu_only = load_trace(res["traces"]["cpu_only"])
    assert "gpu_taken_by_torch_profiler" not in cpu_only["cprof"]
    assert res["gpu_active_cpu_only"] is True
    assert "under_torch" in {e["name"] for e in events(cpu_only, "kernel")}
    (w,) = [w for w in res["warned_cuda"] if "torch.profiler started CUDA collection" in w]
    assert "gpu_taken_by_torch_profiler" in w and "one tool" in w
    t = load_trace(res["traces"]["cuda"])
    meta = t["cprof"]["gpu_taken_by_torch_profiler"]
    assert meta["since_s"] >= 0 and "torch.profiler" in meta["why"]
    # CUPTI was released before torch's setup; the records made before it are in the trace,
    # the one made under torch.profiler is not (on a GPU it is in torch.profiler's trace)
    assert res["gpu_active_cuda"] is False
    names = {e["name"] for e in events(t, "kernel")}
    assert any("gemm" in n for n in names) and "under_torch" not in names, names
    # with warnings as errors the warning never raises into torch.profiler's start; the
    # metadata still says
    assert res["werror_raised"] is None, res["werror_raised"]
    assert "gpu_taken_by_torch_profiler" in load_trace(res["traces"]["werror"])["cprof"]
