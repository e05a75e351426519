"""A SIGTERM that reaches a forked child before cprof run's at-fork hook gave it the default
handler back (a Pool's terminate() right after its workers start; the hooks run in order, and
an earlier one can take milliseconds): the child must die of it as without cprof, and nothing
may come back to the parent. The child re-installs the parent's handler to stand in that
moment for sure, and swallows what the handler raises, as the at-fork hook it ran in did."""
import os
import signal
import sys
import time

handler = signal.getsignal(signal.SIGTERM)  # cprof run's, in the profiled process
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGTERM, handler)  # as before cprof run's at-fork hook ran
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    except BaseException:  # noqa: BLE001 - an at-fork hook swallows what its callee raises
        pass
    time.sleep(5)
    os._exit(3)  # not reached: the default action ends the child
_, status = os.waitpid(pid, 0)
print("child signal", os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
      "exit", os.WEXITSTATUS(status) if os.WIFEXITED(status) else None)
sys.stdout.flush()
time.sleep(float(os.environ.get("FORK_EARLY_WAIT", "4")))  # a watchdog's 3 s grace
print("program done")
