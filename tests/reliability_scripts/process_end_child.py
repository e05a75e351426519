"""A child process for tests/test_reliability_process.py: ends itself with os._exit or an
os.exec* call in the way MODE says, with a cprof window open (decision 116).

    python process_end_child.py MODE OUTDIR"""
import os
import sys
import threading
import time

import cprof

MODE, OUT = sys.argv[1], sys.argv[2]
REPLACEMENT = [sys.executable, "-c", "print('replaced', flush=True)"]


def ctx():
    return cprof.ProfilerContext(output_dir=OUT, profile_name="end", verbose=False,
                                 activities=["CPU"], with_stack=False)


def work():
    with cprof.range("work"):
        pass


if MODE == "ctx_os_exit":  # inside a with-block
    with ctx():
        work()
        os._exit(3)
elif MODE == "profile_os_exit":  # cprof.profile started, trace by on_trace_ready
    p = cprof.profile(activities=["CPU"],
                      on_trace_ready=cprof.tensorboard_trace_handler(OUT, worker_name="end"))
    p.start()
    work()
    os._exit(0)
elif MODE == "thread_os_exit":  # a watchdog thread ends the process, main is in a range
    inside = threading.Event()

    def watchdog():
        inside.wait()
        os._exit(4)
    with ctx():
        work()
        threading.Thread(target=watchdog).start()
        with cprof.range("sleeping"):
            inside.set()
            time.sleep(60)
elif MODE == "ctx_execv":
    with ctx():
        work()
        os.execv(sys.executable, REPLACEMENT)
elif MODE == "ctx_execlp":  # through PATH: os.execlp -> execvp -> execv per directory
    with ctx():
        work()
        os.execlp(os.path.basename(sys.executable), os.path.basename(sys.executable),
                  *REPLACEMENT[1:])
elif MODE == "on_trace_ready_os_exit":  # the user's handler ends the process after writing
    handler = cprof.tensorboard_trace_handler(OUT, worker_name="end")

    def ready(prof):
        handler(prof)
        os._exit(5)
    with cprof.profile(activities=["CPU"], on_trace_ready=ready):
        work()
elif MODE == "fork_child_os_exit":  # a forked child's os._exit writes nothing of the window
    with ctx():
        work()
        pid = os.fork()
        if pid == 0:
            with cprof.range("child"):
                pass
            os._exit(9)
        _, status = os.waitpid(pid, 0)
        print(f"child={os.waitstatus_to_exitcode(status)}", flush=True)
elif MODE == "wrapped_then_closed":  # someone wrapped os._exit in the window: theirs stays
    with ctx():
        work()
        ours = os._exit

        def theirs(code):
            print("theirs", flush=True)
            ours(code)
        os._exit = theirs
    print(f"kept={os._exit is theirs}", flush=True)
    os._exit(6)
elif MODE == "thread_os_exit_stepping":  # a watchdog ends it while main steps a profiler
    p = cprof.profile(activities=["CPU"],
                      on_trace_ready=cprof.tensorboard_trace_handler(OUT, worker_name="end"))

    def watchdog():
        time.sleep(0.2)
        os._exit(7)
    threading.Thread(target=watchdog, daemon=True).start()
    p.start()
    while True:
        for _ in range(20):
            with cprof.range("r"):
                pass
        p.step()
elif MODE == "failed_exec":  # an exec that cannot succeed leaves the window open
    with ctx():
        work()
        try:
            os.execv("/nonexistent/program", ["program"])
        except OSError as err:
            print(f"exec failed: {err.errno}", flush=True)
        with cprof.range("after"):
            pass
elif MODE == "fork_while_a_thread_stops":  # another thread inside cprof's stop at fork
    def slow_ready(prof):
        time.sleep(1.0)

    def other():
        q = cprof.profile(activities=["CPU"], on_trace_ready=slow_ready)
        q.start()
        q.stop()  # on_trace_ready runs inside cprof's critical section
    t = threading.Thread(target=other)
    t.start()
    time.sleep(0.3)
    pid = os.fork()
    if pid == 0:  # the child's own window, ended by os._exit as multiprocessing's are
        with ctx():
            work()
            os._exit(0)
    t0 = time.monotonic()
    os.waitpid(pid, 0)
    print(f"child_s={time.monotonic() - t0:.1f}", flush=True)
    t.join()
else:
    raise SystemExit(f"unknown mode {MODE}")
