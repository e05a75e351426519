"""Run in a subprocess by test_gpu_fake.py with CPROF_CUPTI_PATH / CPROF_LIBCUDA_PATH pointing
at the fake library (the CUDA loader resolves once per process). Prints one JSON line."""
import ctypes
import json
import os
import sys
import threading
import time
import warnings

sys.path.insert(0, os.environ["CPROF_REPO"])
import cprof  # noqa: E402
import cprof._C as C  # noqa: E402

# the fake library to drive (FAKE_SO when CPROF_CUPTI_PATH names another, missing, library)
fake = ctypes.CDLL(os.environ.get("FAKE_SO") or os.environ["CPROF_CUPTI_PATH"])
fake.fake_cupti_script_basic.argtypes = [ctypes.c_uint64, ctypes.c_uint32]
fake.fake_cupti_set_error.argtypes = [ctypes.c_char_p, ctypes.c_int]
fake.fake_cupti_set_other_subscriber.argtypes = [ctypes.c_char_p]
fake.fake_cupti_set_dropped.argtypes = [ctypes.c_uint64]
fake.fake_cupti_add_marker.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32,
                                       ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32]
# the record adders the scenarios script (their C signatures, so 64-bit times pass whole)
u64, u32 = ctypes.c_uint64, ctypes.c_uint32
fake.fake_cupti_add_api.argtypes = [ctypes.c_int, ctypes.c_int, u64, u64, u32, u32]
fake.fake_cupti_add_kernel.argtypes = [ctypes.c_char_p, u64, u64, u32, u32]
fake.fake_cupti_add_sync.argtypes = [ctypes.c_int, u64, u64, u32, u32, u32]
fake.fake_cupti_add_sync_ex.argtypes = [ctypes.c_int, u64, u64, u32, u32, u32, u32, u64]
fake.fake_cupti_add_cuda_event.argtypes = [u32, u32, u32, u32, u32, u64]
fake.fake_cupti_add_memory.argtypes = [ctypes.c_int, ctypes.c_int, u64, u64, u64, u32, u32]
fake.fake_cupti_add_mempool.argtypes = [ctypes.c_int, ctypes.c_int, u64, u64, u64, u64]
fake.fake_cupti_add_memcpy_p2p.argtypes = [u64, u64, u64, u32, u32, u32, u32]
out_dir = os.environ["CPROF_OUT"]
scenario = sys.argv[1]
result = {"warnings": []}


def refused_schedule(warmup, repeat, steps, refuse_at):
    """A GPU schedule of one active step per cycle, the basic script launched in each step;
    refuse_at: (step, fn, code) makes fn fail once at that step. Kernels per trace and the
    profiler's collected activities go into the result."""
    kernels = []
    prof = cprof.profile(activities=["CPU", "CUDA"], record_ops=False,
                         schedule=cprof.schedule(wait=0, warmup=warmup, active=1, repeat=repeat),
                         on_trace_ready=lambda p: kernels.append(
                             len([e for e in p.events() if e.category == "kernel"])))
    with prof:
        for i in range(steps):
            if refuse_at is not None and i == refuse_at[0]:
                fake.fake_cupti_set_error_once(refuse_at[1].encode(), refuse_at[2])
            fake.fake_cupti_script_basic(C.now_ns() + 1000, threading.get_native_id())
            time.sleep(0.002)
            prof.step()
    result["kernels"] = kernels
    result["collected"] = prof.collected_activities


def scene(name, **kw):
    # with_stack off: time.sleep below would be the innermost range (a cpu_op) at launch time
    kw.setdefault("with_stack", False)
    with cprof.ProfilerContext(output_dir=out_dir, profile_name=name, verbose=False, **kw) as p:
        with cprof.range("step"):
            with cprof.range("launches"):
                t0 = C.now_ns() + 1000
                fake.fake_cupti_script_basic(t0, threading.get_native_id())
                time.sleep(0.002)  # the scripted activity spans 0.4 ms after t0
    return p


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    if scenario == "basic":
        p = scene("basic")
        result["trace"] = str(p.trace_path)
        result["features"] = cprof.features()["gpu_activity"]
        result["subscribers_after"] = fake.fake_cupti_subscribers()
    elif scenario == "p2p":  # a peer copy, GPU 0 -> GPU 1, launched by cudaMemcpyPeerAsync
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="p2p", verbose=False,
                                   with_stack=False) as p:
            t0 = C.now_ns() + 1000
            fake.fake_cupti_add_api(0, 161, t0 + 1000, t0 + 2000, threading.get_native_id(),
                                    105)
            fake.fake_cupti_add_memcpy_p2p(1 << 20, t0 + 3000, t0 + 5000, 0, 1, 7, 105)
            time.sleep(0.001)
        result["trace"] = str(p.trace_path)
    elif scenario == "busy_strict":
        fake.fake_cupti_set_other_subscriber(b"Kineto (torch.profiler)")
        try:
            scene("busy")
            result["raised"] = None
        except cprof.CuptiBusyError as e:
            result["raised"] = str(e)
        result["window_open"] = C.active()
    elif scenario in ("shared_kineto_idle", "shared_nsight", "shared_kineto_active",
                      "shared_tool"):
        import torch  # loaded: Kineto may be the holder
        holder = {"shared_nsight": b"CUPTI for Nsight Systems",
                  "shared_tool": os.environ.get("FAKE_HOLDER", "HPCToolkit").encode()}.get(
                      scenario, b"Kineto")
        fake.fake_cupti_set_other_subscriber(holder)
        tp = None
        if scenario == "shared_kineto_active":
            tp = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            tp.__enter__()
        try:
            result["trace"] = str(scene("shared").trace_path)
            result["raised"] = None
        except cprof.CuptiBusyError as e:
            result["raised"] = str(e)
        finally:
            if tp is not None:
                tp.__exit__(None, None, None)
        result["window_open"] = C.active()
        result["subscribers_after"] = fake.fake_cupti_subscribers()
    elif scenario == "kineto_on_another_thread":
        # torch's profiler state is per thread: a session on another thread reads NONE here
        import torch
        fake.fake_cupti_set_other_subscriber(b"Kineto")
        cpu = [torch.profiler.ProfilerActivity.CPU]

        def attempt(name, on_worker):
            out = {}

            def go():
                try:
                    scene(name)
                    out["raised"] = None
                except cprof.CuptiBusyError as e:
                    out["raised"] = str(e)
            if on_worker:
                t = threading.Thread(target=go)
                t.start()
                t.join()
            else:
                go()
            return out["raised"]

        # (a) running on the main thread before cprof patched torch's entry points; the
        # window on a worker
        tp = torch.profiler.profile(activities=cpu)
        tp.__enter__()
        try:
            result["main_session_worker_window"] = attempt("a", True)
        finally:
            tp.__exit__(None, None, None)
        # (b) started on a worker (seen through the patched entry points); the window on main
        started, release = threading.Event(), threading.Event()

        def session():
            with torch.profiler.profile(activities=cpu):
                started.set()
                release.wait(60)
        t = threading.Thread(target=session)
        t.start()
        started.wait(60)
        try:
            result["worker_session_main_window"] = attempt("b", False)
        finally:
            release.set()
            t.join()
        # (c) both over: Kineto idle again, shared
        result["after"] = attempt("c", True)
        result["window_open"] = C.active()
    elif scenario == "stop_races_torch_start":
        # torch.profiler starting on another thread while the window stops: its _end_gpu is
        # in the closing sync (seconds on a GPU) when the window's stop ends the collection
        import torch
        from cprof import _window
        real_sync, in_sync, other = _window._sync_cuda, threading.Event(), []

        def slow_sync():
            if threading.current_thread() is not threading.main_thread():
                in_sync.set()
                time.sleep(0.3)  # a GPU still busy
            real_sync()
        _window._sync_cuda = slow_sync

        def torch_starts():
            _window.torch_profiler_starts([torch.profiler.ProfilerActivity.CUDA])
        p = scene_ctx = cprof.ProfilerContext(output_dir=out_dir, profile_name="race",
                                              verbose=False, with_stack=False)
        with scene_ctx:
            with cprof.range("launches"):
                fake.fake_cupti_script_basic(C.now_ns() + 1000, threading.get_native_id())
                time.sleep(0.002)
            b = threading.Thread(target=torch_starts)
            b.start()
            in_sync.wait(30)
        b.join()
        result["trace"] = str(p.trace_path)
        result["gpu_active"] = C.gpu_active()
    elif scenario == "foreign_buffers":
        # buffers of another client (Kineto's) that CUPTI still held, completed into the
        # window through cprof's callbacks: FAKE_FOREIGN of them, in a pool of two buffers
        fake.fake_cupti_complete_foreign.argtypes = [ctypes.c_char_p, u64, u64]
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="foreign", verbose=False,
                                   with_stack=False, gpu_buffer_mb=0.125) as p:
            with cprof.range("launches"):
                t0 = C.now_ns() + 1000
                fake.fake_cupti_script_basic(t0, threading.get_native_id())
                for i in range(int(os.environ["FAKE_FOREIGN"])):
                    fake.fake_cupti_complete_foreign(f"foreign{i}".encode(), t0 + 100,
                                                     t0 + 200)
                time.sleep(0.002)
        result["trace"] = str(p.trace_path)
    elif scenario == "busy_lenient":
        fake.fake_cupti_set_other_subscriber(b"Kineto (torch.profiler)")
        p = scene("lenient", strict=False)
        result["trace"] = str(p.trace_path)
        result["collected"] = p.collected_activities
    elif scenario == "privileges":
        fake.fake_cupti_set_error(b"cuptiActivityEnable", 35)  # INSUFFICIENT_PRIVILEGES
        result["trace"] = str(scene("priv").trace_path)
        result["zeroed_attr"] = fake.fake_cupti_zeroed_attr()
        result["zeroed_attr_set"] = fake.fake_cupti_calls(b"cuptiActivitySetAttribute")
        result["per_thread_attr"] = fake.fake_cupti_per_thread_attr()
    elif scenario == "privileges_schedule":  # FAKE_ENABLE_ERROR: 35 INSUFFICIENT_PRIVILEGES
        fake.fake_cupti_set_error(b"cuptiActivityEnable",
                                  int(os.environ.get("FAKE_ENABLE_ERROR", "35")))
        traces = []
        prof = cprof.profile(activities=["CPU", "CUDA"],
                             schedule=cprof.schedule(wait=1, warmup=1, active=1, repeat=3),
                             on_trace_ready=lambda p: traces.append(p.step_num))
        with prof:
            for _ in range(10):
                prof.step()
        result["traces"] = len(traces)
        result["collected"] = prof.collected_activities
    elif scenario == "refused_schedule":  # CUPTI refuses one cycle's start (FAKE_REFUSE=fn:code)
        fake.fake_cupti_set_error_once.argtypes = [ctypes.c_char_p, ctypes.c_int]
        fn, code = os.environ["FAKE_REFUSE"].split(":")
        if os.environ.get("CUPTI_CLOCK_ERROR"):  # no timestamp callback: CUPTI's own clock
            fake.fake_cupti_set_own_clock(1)
            fake.fake_cupti_set_error(b"cuptiActivityRegisterTimestampCallback",
                                      int(os.environ["CUPTI_CLOCK_ERROR"]))
        fake.fake_cupti_set_error_once(fn.encode(), int(code))
        refused_schedule(warmup=0, repeat=3, steps=3, refuse_at=None)
    elif scenario == "refused_restart":  # CUPTI refuses the restart after warmup (FAKE_REFUSE)
        fake.fake_cupti_set_error_once.argtypes = [ctypes.c_char_p, ctypes.c_int]
        fn, code = os.environ["FAKE_REFUSE"].split(":")
        # refused at step 0, while the warmup window is open: the error hits its restart
        refused_schedule(warmup=1, repeat=2, steps=4, refuse_at=(0, fn, int(code)))
    elif scenario == "refused_warning_as_error":  # the start's warning raised (FAKE_REFUSE)
        fake.fake_cupti_set_error_once.argtypes = [ctypes.c_char_p, ctypes.c_int]
        fn, code = os.environ["FAKE_REFUSE"].split(":")
        fake.fake_cupti_set_error_once(fn.encode(), int(code))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # pytest -W error, filterwarnings = error
            try:
                with cprof.profile(activities=["CPU", "CUDA"], record_ops=False):
                    pass
            except Warning as err:
                result["raised"] = type(err).__name__
        result["open_after"] = [C.active(), C.gpu_active(), fake.fake_cupti_subscribed(None)]
        try:  # the next profiler of the process opens its window
            with cprof.profile(activities=["CPU"], record_ops=False):
                pass
            result["next"] = "ok"
        except Exception as err:
            result["next"] = f"{type(err).__name__}: {err}"
    elif scenario == "unavailable":
        # the environment poses the problem: no driver, an old one, or (here) no device
        if os.environ.get("FAKE_CUINIT_ERROR"):  # 100: CUDA_ERROR_NO_DEVICE, ...
            fake.fake_cupti_set_error(b"cuInit", int(os.environ["FAKE_CUINIT_ERROR"]))
        result["trace"] = str(scene("unavailable").trace_path)
        result["reason"] = cprof.features()["gpu_activity"]["reason"]
    elif scenario == "cupti_clock":  # CUPTI_CLOCK_ERROR: the timestamp callback refused
        fake.fake_cupti_set_own_clock(1)  # records then carry CUPTI's clock, as the real one's
        if os.environ.get("CUPTI_CLOCK_ERROR"):
            fake.fake_cupti_set_error(b"cuptiActivityRegisterTimestampCallback",
                                      int(os.environ["CUPTI_CLOCK_ERROR"]))
        result["trace"] = str(scene("clock").trace_path)
    elif scenario == "dropped":
        fake.fake_cupti_set_dropped(5)
        result["trace"] = str(scene("dropped").trace_path)
    elif scenario == "exception":
        try:
            with cprof.ProfilerContext(output_dir=out_dir, profile_name="exc", verbose=False) as p:
                with cprof.range("launches"):
                    fake.fake_cupti_script_basic(C.now_ns() + 1000, threading.get_native_id())
                    time.sleep(0.002)
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            result["trace"] = str(p.trace_path)
    elif scenario == "windows":
        traces = []
        for i in range(20):
            with cprof.ProfilerContext(output_dir=out_dir, profile_name=f"w{i}",
                                       verbose=False) as p:
                with cprof.range(f"window {i}"):
                    if i % 2 == 0:
                        fake.fake_cupti_script_basic(C.now_ns() + 1000, threading.get_native_id())
                    time.sleep(0.002)
            traces.append(str(p.trace_path))
            result.setdefault("subscribers", []).append(fake.fake_cupti_subscribers())
        result["traces"] = traces
        result["zeroed_attr"] = fake.fake_cupti_zeroed_attr()
        result["zeroed_requests"] = fake.fake_cupti_zeroed_requests()
        result["dirty_buffers"] = fake.fake_cupti_dirty_buffers()
    elif scenario == "slow_cupti":  # run with FAKE_CUPTI_SLOW_US: what the window spans cover
        traces = []

        def keep(p):
            traces.append(os.path.join(out_dir, f"s{len(traces)}.json"))
            p.export_chrome_trace(traces[-1])
        prof = cprof.profile(activities=["CPU", "CUDA"], record_ops=False, on_trace_ready=keep,
                             schedule=cprof.schedule(wait=0, warmup=1, active=2, repeat=1))
        with prof:  # the warmup's restart enables CUPTI again inside step()
            for i in range(4):
                fake.fake_cupti_script_basic(C.now_ns() + 1000, threading.get_native_id())
                time.sleep(0.002)
                prof.step()
        p = scene("slow_context")  # no schedule: the first start enables CUPTI
        result["traces"] = traces + [str(p.trace_path)]
    elif scenario == "slow_cupti_threads":  # FAKE_CUPTI_SLOW_US, another thread recording
        stop = threading.Event()

        def background():
            while not stop.is_set():
                with cprof.range("bg"):
                    time.sleep(0.001)
        bg = threading.Thread(target=background)
        bg.start()
        prof = cprof.profile(activities=["CPU", "CUDA"], record_ops=False)
        with prof:
            with cprof.range("main"):
                fake.fake_cupti_script_basic(C.now_ns() + 1000, threading.get_native_id())
                time.sleep(0.01)
        stop.set()
        bg.join()
        result["min_start_us"] = min(e.start_us for e in prof.events())
        result["trace"] = os.path.join(out_dir, "threads.json")
        prof.export_chrome_trace(result["trace"])
    elif scenario == "torch_profiler_inside":  # torch.profiler started in a GPU window
        import torch
        from torch.profiler import ProfilerActivity
        # torch.profiler asks Kineto for CUDA activity only where torch has CUDA and Kineto
        # CUPTI: said so here (this CPU build's Kineto then records CPU activity alone)
        torch.cuda.is_available = lambda: True
        torch.cuda.synchronize = lambda device=None: None  # torch.profiler's at its stop
        torch.autograd.profiler._supported_activities = lambda: {ProfilerActivity.CPU,
                                                                 ProfilerActivity.CUDA}
        tid = threading.get_native_id()
        traces = {}
        for name, acts in (("cpu_only", [ProfilerActivity.CPU]),
                           ("cuda", [ProfilerActivity.CPU, ProfilerActivity.CUDA])):
            before = len(caught)
            with cprof.ProfilerContext(output_dir=out_dir, profile_name=name, verbose=False,
                                       with_stack=False) as p:
                fake.fake_cupti_script_basic(C.now_ns() + 1000, tid)
                time.sleep(0.002)
                with torch.profiler.profile(activities=acts):
                    result["gpu_active_" + name] = C.gpu_active()
                    t1 = C.now_ns() + 1000
                    fake.fake_cupti_add_kernel(b"under_torch", t1, t1 + 500, 7, 0)
                    torch.ones(4) + 1
                time.sleep(0.002)
            traces[name] = str(p.trace_path)
            result["warned_" + name] = [str(w.message) for w in caught[before:]]
        # warnings as errors (-W error, pytest's filterwarnings): torch.profiler still starts
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with cprof.ProfilerContext(output_dir=out_dir, profile_name="werror", verbose=False,
                                       with_stack=False) as p:
                try:
                    with torch.profiler.profile(activities=[ProfilerActivity.CPU,
                                                            ProfilerActivity.CUDA]):
                        torch.ones(4) + 1
                    result["werror_raised"] = None
                except Exception as err:  # noqa: BLE001 - what the test checks
                    result["werror_raised"] = repr(err)
        traces["werror"] = str(p.trace_path)
        result["traces"] = traces
    elif scenario == "nvtx":
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="nvtx", verbose=False) as p:
            t0 = C.now_ns() + 1000
            tid = threading.get_native_id()
            fake.fake_cupti_add_marker(b"my nvtx range", b"my domain", 1, t0, t0 + 5000, tid)
            time.sleep(0.001)
        result["trace"] = str(p.trace_path)
        # the same record in cprof.profile's results, inside a range of its thread
        with cprof.profile(activities=["CPU", "CUDA"], record_ops=False) as prof:
            with cprof.range("around"):
                t0 = C.now_ns() + 1000
                fake.fake_cupti_add_marker(b"my nvtx range", b"my domain", 1, t0, t0 + 5000,
                                           tid)
                time.sleep(0.001)
        result["events"] = [[e.name, e.category, str(e.device_type), e.thread,
                             e.cpu_parent.name if e.cpu_parent is not None else None]
                            for e in prof.events() if e.name == "my nvtx range"]
        result["rows"] = [[a.key, str(a.device_type), a.count]
                          for a in prof.key_averages() if a.key == "my nvtx range"]
        result["tid"] = tid
        result["nvtx_env"] = os.environ.get("NVTX_INJECTION64_PATH")
    elif scenario == "memory":  # MEMORY2 and MEMORY_POOL records with MEM
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="mem", verbose=False,
                                   activities=["CPU", "CUDA", "MEM"], with_stack=False) as p:
            t0 = C.now_ns() + 1000
            # MEMORY_POOL: created 2 MiB, then 1 MiB in use, then trimmed to 1 MiB
            fake.fake_cupti_add_mempool(1, 1, 0xA000, 2 << 20, 0, t0)
            fake.fake_cupti_add_mempool(3, 1, 0xA000, 1 << 20, 1 << 20, t0 + 3000)
            # MEMORY2 (op 1 allocation, 2 release; memory kind 3 device): 4 MiB then freed
            fake.fake_cupti_add_memory(1, 3, 0xB000, 4 << 20, t0 + 1000, 7, 11)
            fake.fake_cupti_add_memory(2, 3, 0xB000, 4 << 20, t0 + 2000, 7, 12)
            time.sleep(0.002)
        result["trace"] = str(p.trace_path)
    elif scenario == "memory_freed_from_before":  # releases of memory allocated pre-window
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="memb", verbose=False,
                                   activities=["CPU", "CUDA", "MEM"], with_stack=False) as p:
            t0 = C.now_ns() + 1000
            fake.fake_cupti_add_memory(2, 3, 0xC000, 8 << 20, t0 + 1000, 7, 11)  # freed
            fake.fake_cupti_add_memory(1, 3, 0xD000, 4 << 20, t0 + 2000, 7, 12)
            fake.fake_cupti_add_memory(2, 3, 0xE000, 2 << 20, t0 + 3000, 7, 13)  # freed
            time.sleep(0.002)
        result["trace"] = str(p.trace_path)
    elif scenario == "teardown":  # run with and without CPROF_CUPTI_TEARDOWN=1
        fake.fake_cupti_subscribed.argtypes = [ctypes.POINTER(ctypes.c_uint32)]
        fake.fake_cupti_calls.argtypes = [ctypes.c_char_p]
        fake.fake_cupti_calls.restype = ctypes.c_int64

        def state():
            dom = ctypes.c_uint32(0)
            sub = fake.fake_cupti_subscribed(ctypes.byref(dom))
            return {"subscribed": sub, "domains": dom.value, "info": C.gpu_teardown_info(),
                    "finalize_calls": fake.fake_cupti_calls(b"cuptiFinalize"),
                    "subscribe_calls": fake.fake_cupti_calls(b"cuptiSubscribe_v2")}

        traces = [str(scene("td1").trace_path)]
        result["after_stop"] = state()
        traces.append(str(scene("td2").trace_path))  # no CUDA call in between: reused
        result["after_second_stop"] = state()
        result["callbacks_entry_exit"] = fake.fake_cupti_api_call(0, 211)  # cudaLaunchKernel
        result["after_call"] = state()
        fake.fake_cupti_api_call(1, 307)  # a driver call later: nothing left to do
        result["after_second_call"] = state()
        traces.append(str(scene("td3").trace_path))  # after the detach: a new subscriber
        result["after_third_stop"] = state()
        result["traces"] = traces
    elif scenario == "flush_refused_then_clean":  # a stop whose flushes CUPTI refuses
        fake.fake_cupti_set_async(0)
        tid = threading.get_native_id()
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="refused", verbose=False,
                                   with_stack=False) as p:
            fake.fake_cupti_script_basic(C.now_ns() + 1000, tid)
            fake.fake_cupti_deliver()  # into the buffer CUPTI holds, as it makes them
            time.sleep(0.002)
            fake.fake_cupti_set_error(b"cuptiActivityFlushAll", 999)
        fake.fake_cupti_set_error(b"cuptiActivityFlushAll", 0)
        result["refused"] = str(p.trace_path)
        # the next window: CUPTI still holds the buffer, with the last window's records
        result["clean"] = str(scene("clean").trace_path)
        fake.fake_cupti_buffers_misused.restype = ctypes.c_uint64
        result["misused"] = fake.fake_cupti_buffers_misused()
    elif scenario == "flush_refused_then_resized":  # the held buffer, and a smaller pool next
        fake.fake_cupti_set_async(0)
        fake.fake_cupti_buffers_completed.restype = ctypes.c_uint64
        tid = threading.get_native_id()
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="refused", verbose=False,
                                   with_stack=False):
            fake.fake_cupti_script_basic(C.now_ns() + 1000, tid)
            fake.fake_cupti_deliver()  # into the buffer CUPTI holds, as it makes them
            time.sleep(0.002)
            fake.fake_cupti_set_error(b"cuptiActivityFlushAll", 999)
        fake.fake_cupti_set_error(b"cuptiActivityFlushAll", 0)
        # a pool of two 128 KiB buffers: CUPTI fills the buffer it still holds first, then
        # both new ones; three completions in a window whose pool has two buffers
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="resized", verbose=False,
                                   with_stack=False, gpu_buffer_mb=0.25) as p:
            done0 = fake.fake_cupti_buffers_completed()
            t = C.now_ns() + 1000
            n = 0
            while fake.fake_cupti_buffers_completed() < done0 + 2 and n < 200000:
                for _ in range(100):
                    fake.fake_cupti_add_kernel(b"fill", t + n, t + n + 1, 7, 0)
                    n += 1
                fake.fake_cupti_deliver()
            for _ in range(100):  # into the second new buffer, completed by the stop's flush
                fake.fake_cupti_add_kernel(b"fill", t + n, t + n + 1, 7, 0)
                n += 1
            time.sleep(0.002)
        result["made"] = n
        result["completed_in_window"] = fake.fake_cupti_buffers_completed() - done0
        result["resized"] = str(p.trace_path)
    elif scenario == "unrecovered":  # what a stop cannot get out of CUPTI is never silent
        fake.fake_cupti_set_error_once.argtypes = [ctypes.c_char_p, ctypes.c_int]
        tid = threading.get_native_id()
        caught_at = {}
        fake.fake_cupti_set_error_after.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        for name, fn, once in (("flush", b"cuptiActivityFlushAll", False),
                               # the stop's first flush goes through, its second is refused
                               ("flush2", b"cuptiActivityFlushAll", "after"),
                               ("nextrecord", b"cuptiActivityGetNextRecord", True),
                               ("dropcount", b"cuptiActivityGetNumDroppedRecords", False)):
            before = len(caught)
            with cprof.ProfilerContext(output_dir=out_dir, profile_name=name, verbose=False,
                                       with_stack=False) as p:
                fake.fake_cupti_script_basic(C.now_ns() + 1000, tid)
                time.sleep(0.002)
                if once == "after":
                    fake.fake_cupti_set_error_after(fn, 1, 999)
                else:
                    (fake.fake_cupti_set_error_once if once else fake.fake_cupti_set_error)(
                        fn, 999)
            fake.fake_cupti_set_error(fn, 0)
            result[name] = str(p.trace_path)
            caught_at[name] = [str(w.message) for w in caught[before:]]
        before = len(caught)
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="incomplete", verbose=False,
                                   with_stack=False) as p:
            t0 = C.now_ns() + 1000
            fake.fake_cupti_add_kernel(b"no_end", t0, 0, 7, 1)
            fake.fake_cupti_add_kernel(b"backwards", t0 + 500, t0 + 100, 7, 2)
            fake.fake_cupti_add_kernel(b"fine", t0 + 600, t0 + 900, 7, 3)
            fake.fake_cupti_add_kernel(b"zero_start", 0, t0 + 300, 7, 4)  # start not collected
            # a start 1 s before the window opened: no launch in the window made it
            fake.fake_cupti_add_kernel(b"before_window", t0 - 1_000_000_000, t0 + 200, 7, 5)
            fake.fake_cupti_add_marker(b"pushed, never popped", b"", 9, t0 + 50, 0, tid)
            time.sleep(0.002)
        result["incomplete"] = str(p.trace_path)
        caught_at["incomplete"] = [str(w.message) for w in caught[before:]]
        result["warned_at"] = caught_at
    elif scenario == "release_refused":  # CUPTI refusing to unsubscribe / disable at a stop
        fake.fake_cupti_set_error_once.argtypes = [ctypes.c_char_p, ctypes.c_int]
        fake.fake_cupti_subscribers.restype = ctypes.c_int
        tid = threading.get_native_id()
        got = {}
        for name, fn in (("unsub", b"cuptiUnsubscribe"), ("disable", b"cuptiActivityDisable")):
            before = len(caught)
            with cprof.ProfilerContext(output_dir=out_dir, profile_name=name, verbose=False,
                                       with_stack=False) as p:
                fake.fake_cupti_script_basic(C.now_ns() + 1000, tid)
                time.sleep(0.002)
                fake.fake_cupti_set_error_once(fn, 999)
            warned = [str(w.message) for w in caught[before:]]
            held = fake.fake_cupti_subscribers()
            # the next window opens (nothing blamed on another profiler) and collects
            with cprof.ProfilerContext(output_dir=out_dir, profile_name=name + "_next",
                                       verbose=False, with_stack=False) as q:
                fake.fake_cupti_script_basic(C.now_ns() + 1000, tid)
                time.sleep(0.002)
            got[name] = {"warned": warned, "held_between": held,
                         "held_after": fake.fake_cupti_subscribers(),
                         "first": str(p.trace_path), "next": str(q.trace_path)}
        # the kept subscriber survives a window that then fails to start (and whose release
        # CUPTI refuses again): the window after it still takes it back
        fake.fake_cupti_set_error_once(b"cuptiUnsubscribe", 999)
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="a", verbose=False,
                                   with_stack=False):
            pass
        fake.fake_cupti_set_error_once(b"cuptiActivityRegisterCallbacks", 999)
        fake.fake_cupti_set_error_once(b"cuptiUnsubscribe", 999)
        try:
            with cprof.ProfilerContext(output_dir=out_dir, profile_name="b", verbose=False,
                                       with_stack=False):
                pass
            got["failed_start"] = None
        except Exception as err:  # noqa: BLE001 - recorded for the test
            got["failed_start"] = repr(err)
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="c", verbose=False,
                                   with_stack=False) as q:
            fake.fake_cupti_script_basic(C.now_ns() + 1000, tid)
            time.sleep(0.002)
        got["after_failed_start"] = str(q.trace_path)
        got["held_end"] = fake.fake_cupti_subscribers()
        result["release"] = got
    elif scenario == "busy_schedule":  # a schedule's window cannot open (strict): said once
        fake.fake_cupti_set_other_subscriber(b"CUPTI for Nsight Systems")
        try:
            with cprof.profile(activities=["CPU", "CUDA"],
                               schedule=cprof.schedule(wait=1, warmup=1, active=1)) as p:
                for _ in range(4):
                    p.step()
            result["raised"] = None
        except Exception as err:  # noqa: BLE001 - recorded for the test
            result["raised"] = type(err).__name__
        result["step_num"] = p.step_num
        fake.fake_cupti_set_other_subscriber(None)
        with cprof.profile(activities=["CPU"]) as q:
            with cprof.range("after"):
                pass
        result["after"] = [e.name for e in q.events()]
    elif scenario == "names_full":  # more distinct kernel names than CPROF_NAMES_LIMIT
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="names", verbose=False,
                                   with_stack=False) as p:
            t0 = C.now_ns() + 1000
            for i in range(300):
                n = f"kernel{i}"
                fake.fake_cupti_add_kernel(f"_Z{len(n)}{n}v".encode(), t0 + 10 * i,
                                           t0 + 10 * i + 5, 7, i + 1)
            time.sleep(0.002)
        result["trace"] = str(p.trace_path)
    elif scenario == "fork_child":  # a child forked inside a GPU window
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="parent", verbose=False,
                                   with_stack=False) as p:
            fake.fake_cupti_script_basic(C.now_ns() + 1000, threading.get_native_id())
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                child = {"gpu_active": C.gpu_active(), "active": C.active()}
                with warnings.catch_warnings(record=True) as cw:
                    warnings.simplefilter("always")
                    with cprof.ProfilerContext(output_dir=out_dir, profile_name="child",
                                               verbose=False, with_stack=False) as pc:
                        with cprof.range("child work"):
                            pass
                child["warnings"] = [str(x.message) for x in cw]
                child["trace"] = str(pc.trace_path)
                os.write(w, json.dumps(child).encode())
                os._exit(0)
            os.close(w)
            got = b""
            while True:
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                got += chunk
            os.waitpid(pid, 0)
            time.sleep(0.002)
        result["child"] = json.loads(got)
        result["trace"] = str(p.trace_path)
    elif scenario == "pool_unobtainable":  # the pool cannot be had: the window must not stay open
        real = C.gpu_start

        def refuse(**kw):
            raise MemoryError("cprof: cannot allocate 9 CUPTI buffers of 8388608 bytes")
        C.gpu_start = refuse
        try:
            with cprof.ProfilerContext(output_dir=out_dir, profile_name="nopool", verbose=False):
                pass
        except MemoryError as e:
            result["raised"] = str(e)
        result["open_after"] = C.active()
        C.gpu_start = real
        result["trace"] = str(scene("after").trace_path)
    elif scenario == "pool_full":  # run with CPROF_GPU_BUFFER_MB=8 (or gpu_buffer_mb)
        n = int(os.environ.get("POOL_KERNELS", "200000"))
        kw = {}
        if os.environ.get("POOL_MB_ARG"):
            kw["gpu_buffer_mb"] = float(os.environ["POOL_MB_ARG"])
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="pool", verbose=False,
                                   with_stack=False, **kw) as p:
            t0 = C.now_ns() + 1000
            for i in range(n):
                fake.fake_cupti_add_kernel(b"k", t0 + i * 10, t0 + i * 10 + 5, 7, 0)
            time.sleep(0.001 + n * 10e-9)
        result["trace"] = str(p.trace_path)
        result["kernels_added"] = n
    elif scenario == "pool_threads":  # THREADS threads launch one kernel each in the window
        n = int(os.environ.get("THREADS", "4"))
        t0 = 0

        def launch(i):
            tid = threading.get_native_id()
            fake.fake_cupti_add_api(0, 211, t0 + i * 100, t0 + i * 100 + 10, tid, 100 + i)
            fake.fake_cupti_add_kernel(f"k{i}".encode(), t0 + i * 100 + 20, t0 + i * 100 + 50,
                                       7, 100 + i)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with cprof.ProfilerContext(output_dir=out_dir, profile_name="threads", verbose=False,
                                       with_stack=False, gpu_buffer_mb=16) as p:
                t0 = C.now_ns() + 1000
                ts = [threading.Thread(target=launch, args=(i,)) for i in range(n)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                time.sleep(0.001 + n * 1e-6)
        result["warnings"] = [str(x.message) for x in w]
        result["trace"] = str(p.trace_path)
        result["per_thread_attr"] = fake.fake_cupti_per_thread_attr()
    elif scenario == "occupancy":  # kernels of known launch configurations (OCC_KERNELS)
        u64, u32, i32 = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int32
        fake.fake_cupti_add_kernel_ex.argtypes = [ctypes.c_char_p, u64, u64, u32, u32, u32, u32,
                                                  i32, i32, i32, i32, i32, i32, ctypes.c_uint16,
                                                  i32, i32, u32, u64]
        configs = json.loads(os.environ["OCC_KERNELS"])
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="occ", verbose=False,
                                   with_stack=False) as p:
            t0 = C.now_ns() + 1000
            for i, (name, grid, block, regs, smem_static, smem_dynamic) in enumerate(configs):
                fake.fake_cupti_add_kernel_ex(name.encode(), t0 + i * 100, t0 + i * 100 + 50, 0,
                                              1, 7, 0, *grid, *block, regs, smem_static,
                                              smem_dynamic, 0, 0)
            time.sleep(0.002)
        result["trace"] = str(p.trace_path)
    elif scenario == "results":  # cprof.profile's events() / key_averages() with GPU work
        with cprof.profile(activities=["CPU", "CUDA"], record_ops=False) as p:
            with cprof.range("launches"):
                fake.fake_cupti_script_basic(C.now_ns() + 1000, threading.get_native_id())
                time.sleep(0.002)
        ka = p.key_averages()
        result["rows"] = {r.key: {"device_type": str(r.device_type), "count": r.count,
                                  "cpu_total": r.cpu_time_total,
                                  "self_cpu": r.self_cpu_time_total,
                                  "self_dev": r.self_device_time_total,
                                  "dev_total": r.device_time_total} for r in ka}
        result["table"] = ka.table(sort_by="self_cuda_time_total")
        evs = p.events()
        launches = [e for e in evs if e.name == "launches"][0]
        result["children"] = [c.name for c in launches.cpu_children]
        result["child_parents"] = sorted({c.cpu_parent.name for c in launches.cpu_children})
        result["kernels"] = [list(k) for k in launches.kernels]
        result["launch_events"] = [{"name": e.name, "device_type": str(e.device_type),
                                    "category": e.category, "thread": e.thread,
                                    "self_cpu": e.self_cpu_time_total,
                                    "self_dev": e.self_device_time_total}
                                   for e in evs if e.category in ("cuda_runtime", "cuda_driver")]
        result["launches_self_cpu"] = launches.self_cpu_time_total
        result["launches_cpu"] = launches.cpu_time_total
        result["tid"] = threading.get_native_id()
        result["syncs"] = [{"device_type": str(e.device_type), "thread": e.thread,
                            "cpu_total": e.cpu_time_total, "self_cpu": e.self_cpu_time_total,
                            "dev_total": e.device_time_total, "stream": e.stream}
                           for e in evs if e.category == "cuda_sync"]
        result["event_rows"] = sorted([r.key, str(r.device_type), r.count]
                                      for r in evs.key_averages())
        result["profile_rows"] = sorted([r.key, str(r.device_type), r.count] for r in ka)
        result["events_self_cpu"] = evs.key_averages().self_cpu_time_total
        result["profile_self_cpu"] = ka.self_cpu_time_total
    elif scenario == "dup_kernels":  # a range whose only child has its name (one event)
        with cprof.profile(activities=["CPU", "CUDA"], record_ops=False) as p:
            with cprof.range("fwd"):
                with cprof.range("fwd"):
                    fake.fake_cupti_script_basic(C.now_ns() + 1000, threading.get_native_id())
                    time.sleep(0.002)
        (fwd,) = [e for e in p.events() if e.name == "fwd"]
        result["kernels"] = [list(k) for k in fwd.kernels]
        result["self_dev"] = fwd.self_device_time_total
        result["dev_total"] = fwd.device_time_total
    elif scenario == "stack_spans":  # with_stack on: time.sleep is a cpu_op around launches
        result["trace"] = str(scene("spans", with_stack=True).trace_path)
    elif scenario in ("modules_link", "modules_stack_only"):
        # with_modules: GPU work links to the innermost module; with_stack alone (module calls
        # are only "nn.Module: " Python events): to the user range around the model
        import torch

        class Launcher(torch.nn.Module):
            def forward(self, x):
                fake.fake_cupti_script_basic(C.now_ns() + 1000, threading.get_native_id())
                time.sleep(0.002)  # a cpu_op (with_stack's C calls) around the launches
                return x + 1  # an operator (aten::add) after them

        model = torch.nn.Sequential(torch.nn.Identity(), Launcher())
        mods = scenario == "modules_link"
        with cprof.profile(activities=["CPU", "CUDA"], with_modules=mods, with_stack=True,
                           record_ops=mods) as p:
            with cprof.range("around"):
                model(torch.ones(2))
        p.export_chrome_trace(os.path.join(out_dir, scenario + ".json"))
        result["trace"] = os.path.join(out_dir, scenario + ".json")
        result["ops"] = sorted({e.name for e in p.events() if e.category == "cpu_op"})
    elif scenario == "launch13":  # CUDA 13's __cudaLaunchKernel (nvcc 13 <<<>>> launches)
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="l13", verbose=False,
                                   with_stack=False) as p:
            with cprof.range("r"):
                t0 = C.now_ns() + 1000
                for cbid, corr, name in ((211, 1, b"k_cudaLaunchKernel"),
                                         (505, 2, b"k___cudaLaunchKernel"),
                                         (506, 3, b"k___cudaLaunchKernel_ptsz")):
                    fake.fake_cupti_add_api(0, cbid, t0, t0 + 1000,
                                            threading.get_native_id(), corr)
                    fake.fake_cupti_add_kernel(name, t0 + 2000, t0 + 3000, 7, corr)
                    t0 += 5000
                time.sleep(0.001)
        result["trace"] = str(p.trace_path)
    elif scenario == "launcher_thread":  # launches from a thread that records no range
        ready, done, tids = threading.Event(), threading.Event(), []

        def launcher(t0):
            libc = ctypes.CDLL(None)
            libc.prctl(15, b"pt_autograd_0", 0, 0, 0)  # PR_SET_NAME, as autograd names it
            tids.append(threading.get_native_id())
            fake.fake_cupti_add_api(0, 211, t0, t0 + 1000, tids[0], 1)
            fake.fake_cupti_add_kernel(b"bwd_kernel", t0 + 2000, t0 + 3000, 7, 1)
            ready.set()
            done.wait(30)  # alive while the trace is written, as autograd's threads are

        with cprof.ProfilerContext(output_dir=out_dir, profile_name="lt", verbose=False,
                                   with_stack=False) as p:
            with cprof.range("step"):
                th = threading.Thread(target=launcher, args=(C.now_ns() + 1000,))
                th.start()
                ready.wait(30)
                time.sleep(0.002)
        done.set()
        th.join()
        result["trace"] = str(p.trace_path)
        result["launcher_tid"] = tids[0]
        result["main_tid"] = threading.get_native_id()
    elif scenario == "event_waits":  # cudaEventRecord / cudaStreamWaitEvent / EventSynchronize
        tid = threading.get_native_id()
        STREAM_WAIT, EVENT_SYNC = 2, 1
        with cprof.ProfilerContext(output_dir=out_dir, profile_name="ev", verbose=False,
                                   with_stack=False) as p, cprof.range("step"):
            t0 = C.now_ns() + 1000

            def us(x):
                return t0 + x * 1000

            def api(cbid, corr, at):
                fake.fake_cupti_add_api(0, cbid, us(at), us(at + 2), tid, corr)

            # kernel on stream 7, event 5 recorded after it, stream 13 waits, kernel on 13
            api(211, 1, 0)
            fake.fake_cupti_add_kernel(b"producer", us(3), us(20), 7, 1)
            api(135, 2, 4)
            fake.fake_cupti_add_cuda_event(7, 2, 5, 1, 0, 100)
            api(147, 3, 8)
            fake.fake_cupti_add_sync_ex(STREAM_WAIT, us(8), us(9), 13, 3, 5, 1, 100)
            api(211, 4, 12)
            fake.fake_cupti_add_kernel(b"consumer", us(21), us(30), 13, 4)
            # event 5 recorded again on stream 13; the host waits for it: the newer record
            api(135, 5, 31)
            fake.fake_cupti_add_cuda_event(13, 5, 5, 1, 0, 101)
            api(137, 6, 33)
            fake.fake_cupti_add_sync_ex(EVENT_SYNC, us(33), us(40), 0, 6, 5, 1, 101)
            # event 9 was recorded before the window: nothing to pair with
            api(147, 7, 42)
            fake.fake_cupti_add_sync_ex(STREAM_WAIT, us(42), us(43), 7, 7, 9, 1, 0)
            # event 6: CUPTI's sync id names the older of two records
            fake.fake_cupti_add_cuda_event(7, 8, 6, 1, 0, 200)
            fake.fake_cupti_add_cuda_event(13, 9, 6, 1, 0, 201)
            api(147, 10, 45)
            fake.fake_cupti_add_sync_ex(STREAM_WAIT, us(45), us(46), 13, 10, 6, 1, 200)
            # event 5 of another context, recorded later, is not context 1's event 5
            fake.fake_cupti_add_cuda_event(20, 11, 5, 2, 1, 0)
            api(147, 12, 48)
            fake.fake_cupti_add_sync_ex(STREAM_WAIT, us(48), us(49), 7, 12, 5, 1, 0)
            # a stream that ran nothing in the window, synchronized: its track is named too
            api(131, 13, 50)
            fake.fake_cupti_add_sync_ex(3, us(50), us(51), 21, 13, 0xFFFFFFFF, 1, 0)
            time.sleep(0.002)
        result["trace"] = str(p.trace_path)
        with cprof.profile(activities=["CPU", "CUDA"], record_ops=False) as prof:
            t0 = C.now_ns() + 1000
            api(135, 1, 0)
            fake.fake_cupti_add_cuda_event(7, 1, 5, 1, 0, 0)
            api(147, 2, 4)
            fake.fake_cupti_add_sync_ex(STREAM_WAIT, us(4), us(5), 13, 2, 5, 1, 0)
            time.sleep(0.002)
        result["event_names"] = sorted({(e.name, e.category) for e in prof.events()})
    elif scenario == "toggle":  # toggle_collection_dynamic(False / True, [CUDA] / [CPU])
        tid = threading.get_native_id()
        LAUNCH, SYNC, DRV_LAUNCH = 211, 131, 307

        def launch(name, corr, at, run_at, driver=False):
            """a launch call at `at` (ns) and its kernel running from run_at (ns), 5 us each"""
            fake.fake_cupti_add_api(int(driver), DRV_LAUNCH if driver else LAUNCH, at,
                                    at + 5000, tid, corr)
            fake.fake_cupti_add_kernel(name.encode(), run_at, run_at + 5000, 7, corr)

        CUDA, CPU = cprof.ProfilerActivity.CUDA, cprof.ProfilerActivity.CPU
        with cprof.profile(activities=["CPU", "CUDA", "MEM"], record_ops=False) as prof:
            with cprof.range("on_before"):
                t = C.now_ns() + 1000
                launch("k_before", 1, t, t + 20000)
                early = t + 10000  # a call before the toggle whose kernel runs while off
                time.sleep(0.001)
            prof.toggle_collection_dynamic(False, [CUDA])
            with cprof.range("cuda_off"):
                t = C.now_ns() + 1000
                fake.fake_cupti_add_api(0, LAUNCH, early, early + 5000, tid, 2)
                fake.fake_cupti_add_kernel(b"k_launched_before_runs_while_off", t, t + 5000, 7, 2)
                launch("k_off", 3, t, t + 20000)
                launch("k_off_runs_after", 4, t + 1000, t + 5000000)  # ends after the toggle
                launch("k_off_driver", 5, t + 2000, t + 30000, driver=True)
                fake.fake_cupti_add_api(0, SYNC, t + 3000, t + 40000, tid, 6)
                fake.fake_cupti_add_sync(3, t + 3500, t + 39000, 7, 6, 0xFFFFFFFF)
                fake.fake_cupti_add_memory(1, 3, 0xB000, 4 << 20, t + 4000, 7, 20)  # kept
                time.sleep(0.001)
            prof.toggle_collection_dynamic(True, ["cuda"])
            fake.fake_cupti_add_memory(2, 3, 0xB000, 4 << 20, C.now_ns() + 1000, 7, 21)
            with cprof.range("outer"):
                prof.toggle_collection_dynamic(False, [CPU])
                with cprof.range("cpu_off"):
                    t = C.now_ns() + 1000
                    launch("k_cpu_off", 7, t, t + 20000)
                    time.sleep(0.001)
                prof.toggle_collection_dynamic(True, [CPU])
            time.sleep(0.006)  # past k_off_runs_after's end
        result["names"] = sorted({e.name for e in prof.events()})
        path = os.path.join(out_dir, "toggle.json")
        prof.export_chrome_trace(path)
        result["trace"] = path
        # toggled off before the window opens: it opens with CUDA off
        p2 = cprof.profile(activities=["CPU", "CUDA"], record_ops=False)
        p2.toggle_collection_dynamic(False, [CUDA])
        with p2, cprof.range("whole"):
            t = C.now_ns() + 1000
            launch("k_never", 1, t, t + 20000)
            time.sleep(0.001)
        result["names_off_at_start"] = sorted({e.name for e in p2.events()})
        path = os.path.join(out_dir, "toggle_start.json")
        p2.export_chrome_trace(path)
        result["trace_off_at_start"] = path
    elif scenario == "toggle_many":  # more records than one decoded chunk holds, per part
        tid, n = threading.get_native_id(), 3000
        with cprof.profile(activities=["CPU", "CUDA"], record_ops=False) as prof:
            corr = 0
            for part in ("on1", "off", "on2"):
                if part == "off":
                    prof.toggle_collection_dynamic(False, [cprof.ProfilerActivity.CUDA])
                t = C.now_ns() + 1000
                for i in range(n):
                    corr += 1
                    at = t + i * 100
                    fake.fake_cupti_add_api(0, 211, at, at + 50, tid, corr)
                    fake.fake_cupti_add_kernel(f"{part}_{i}".encode(), at + 60, at + 90, 7, corr)
                time.sleep(n * 100 / 1e9 + 0.001)
                if part == "off":
                    prof.toggle_collection_dynamic(True, [cprof.ProfilerActivity.CUDA])
        result["kernels"] = [e.name for e in prof.events() if e.category == "kernel"]
        result["gpu"] = prof._last.notes["gpu"]
    elif scenario == "half_started":  # a start refused after the kernel kind was on
        fake.fake_cupti_enable_fails_at.argtypes = [ctypes.c_int, ctypes.c_int]
        fake.fake_cupti_kernel_on_enable.argtypes = [ctypes.c_char_p, u64, u64]
        t = C.now_ns()  # the stale kernel's time falls in the second window
        fake.fake_cupti_kernel_on_enable(b"stale", t + 60_000_000, t + 60_100_000)
        fake.fake_cupti_enable_fails_at(2, 999)  # MEMCPY, required: CUPTI_ERROR_UNKNOWN
        try:
            with cprof.profile(activities=["CPU", "CUDA"], record_ops=False) as a:
                with cprof.range("first"):
                    pass
            result["first"] = a.collected_activities
        except Exception as err:  # noqa: BLE001 - recorded for the test
            result["first"] = repr(err)
        with cprof.profile(activities=["CPU", "CUDA"], record_ops=False) as b:
            fake.fake_cupti_script_basic(C.now_ns() + 1000, threading.get_native_id())
            time.sleep(0.1)
        result["kernels"] = sorted({e.name for e in b.events() if e.category == "kernel"})
        result["flushes"] = fake.fake_cupti_calls(b"cuptiActivityFlushAll")
result["warnings"] = [str(w.message) for w in caught]
result["warning_classes"] = [w.category.__name__ for w in caught]
print("RESULT " + json.dumps(result))
