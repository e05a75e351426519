"""A program for `cprof run` that forks; the child returns through cprof run's code as well."""
import os
import sys

import cprof

with cprof.range("before fork"):
    pass
sys.stdout.flush()
pid = os.fork()
with cprof.range("after fork"):
    pass
if pid:
    _, status = os.waitpid(pid, 0)
    print(f"child exit {os.waitstatus_to_exitcode(status)}", flush=True)
