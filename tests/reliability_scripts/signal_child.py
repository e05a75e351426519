"""A child process for tests/test_reliability_process.py: opens a cprof window in the way MODE
says, prints "ready" and sleeps inside it until the test signals it (or ends by itself).

    python signal_child.py MODE OUTDIR

Prints "handler=<name>" (the SIGTERM disposition inside the window) before "ready"."""
import os
import signal
import sys
import time

import cprof

MODE, OUT = sys.argv[1], sys.argv[2]


def ready():
    h = signal.getsignal(signal.SIGTERM)
    print(f"handler={getattr(h, '__qualname__', h)}", flush=True)
    print("ready", flush=True)


def sleep_in_ranges(seconds=60.0):
    with cprof.range("before"):
        pass
    with cprof.range("sleeping"):
        ready()
        time.sleep(seconds)


def ctx():
    return cprof.ProfilerContext(output_dir=OUT, profile_name="sig", with_stack=False,
                                 verbose=False, activities=["CPU"])


if MODE == "ctx":  # ProfilerContext with-block
    with ctx():
        sleep_in_ranges()
elif MODE == "ctx_stack":  # the same with the with_stack tracer and module capture on
    with cprof.ProfilerContext(output_dir=OUT, profile_name="sig", verbose=False,
                               activities=["CPU"], with_stack=True, with_modules=True):
        sleep_in_ranges()
elif MODE == "func":  # profile_function
    @cprof.profile_function(output_dir=OUT, profile_name="sig", verbose=False,
                            activities=["CPU"])
    def work():
        sleep_in_ranges()
    work()
elif MODE == "profile_with":  # cprof.profile with-block, trace by on_trace_ready
    with cprof.profile(activities=["CPU"],
                       on_trace_ready=cprof.tensorboard_trace_handler(OUT, worker_name="sig")):
        sleep_in_ranges()
elif MODE == "profile_startstop":  # start() never stopped
    p = cprof.profile(activities=["CPU"],
                      on_trace_ready=cprof.tensorboard_trace_handler(OUT, worker_name="sig"))
    p.start()
    sleep_in_ranges()
    p.stop()
elif MODE == "profile_finally":  # start(); try: ... finally: stop()
    p = cprof.profile(activities=["CPU"],
                      on_trace_ready=cprof.tensorboard_trace_handler(OUT, worker_name="sig"))
    p.start()
    try:
        sleep_in_ranges()
    finally:
        p.stop()
elif MODE == "profile_schedule":  # a schedule's active window, stepped in a loop
    p = cprof.profile(activities=["CPU"], schedule=cprof.schedule(wait=1, warmup=1, active=50),
                      on_trace_ready=cprof.tensorboard_trace_handler(OUT, worker_name="sig"))
    p.start()
    for i in range(50):
        with cprof.range(f"step{i}"):
            if i == 3:
                ready()
            time.sleep(0.05 if i < 3 else 60)
        p.step()
    p.stop()
elif MODE == "ctx_enter_exit":  # __enter__ without a with-block, then sys.exit(3)
    c = ctx()
    c.__enter__()
    with cprof.range("work"):
        pass
    sys.exit(3)
elif MODE == "profile_sys_exit":  # start() then sys.exit(0) without stop()
    p = cprof.profile(activities=["CPU"],
                      on_trace_ready=cprof.tensorboard_trace_handler(OUT, worker_name="sig"))
    p.start()
    with cprof.range("work"):
        pass
    sys.exit(0)
elif MODE == "startstop_raise":  # start() then an uncaught exception
    c = ctx()
    c.__enter__()
    with cprof.range("work"):
        pass
    raise RuntimeError("boom")
elif MODE == "user_handler":  # the program's own SIGTERM handler: cprof leaves it alone
    def mine(signum, frame):
        print("user handler ran", flush=True)
        sys.exit(7)
    signal.signal(signal.SIGTERM, mine)
    with ctx():
        sleep_in_ranges()
elif MODE == "user_handler_inside":  # installed while the window is open: kept after it
    with ctx():
        signal.signal(signal.SIGTERM, lambda s, f: print("user handler ran", flush=True))
        with cprof.range("r"):
            pass
    h = signal.getsignal(signal.SIGTERM)
    print(f"after={getattr(h, '__qualname__', h)}", flush=True)
elif MODE == "ignored":  # started with SIGTERM ignored: still ignored, the run completes
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with ctx():
        sleep_in_ranges(1.5)
    print("completed", flush=True)
elif MODE == "thread_window":  # a window opened from another thread gets no handler
    import threading
    got = {}

    def run():
        with ctx():
            got["handler"] = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    print(f"handler_in_thread={got['handler']}", flush=True)
elif MODE == "term_during_write":  # SIGTERM while on_trace_ready writes: it waits for it
    handler = cprof.tensorboard_trace_handler(OUT, worker_name="sig")

    def ready_handler(prof):
        os.kill(os.getpid(), signal.SIGTERM)  # delivered at once to this (main) thread
        print("writing", flush=True)
        handler(prof)
        print("written", flush=True)
    with cprof.profile(activities=["CPU"], on_trace_ready=ready_handler):
        with cprof.range("work"):
            pass
    print("after the block", flush=True)  # never: SIGTERM ends the process once written
else:
    raise SystemExit(f"unknown mode {MODE}")
