"""Test program for tests/test_cli_run.py: what `cprof run` must pass through.

argv[1] selects the ending: ok (default), exit N, raise, sigint / sigterm (print "ready",
then sleep inside a range until the test sends the signal), sysexit-msg, os_exit N (inside
a range), exec (the process replaced by `python -c "print('replaced')"`)."""
import os
import sys
import time

import cprof

mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
print(f"argv={sys.argv!r} name={__name__} path0={sys.path[0]}")
print(f"file={__file__}")
print("to stderr", file=sys.stderr)
sys.stdout.flush()
sys.stdout.buffer.write(b"raw bytes\r\n")  # compared byte for byte
sys.stdout.buffer.flush()
with cprof.range("work"):
    sum(range(1000))
if mode == "exit":
    sys.exit(int(sys.argv[2]))
if mode == "sysexit-msg":
    sys.exit("a message for stderr")
if mode == "raise":
    with cprof.range("failing"):
        raise ValueError("boom")
if mode in ("sigint", "sigterm"):
    with cprof.range("waiting"):
        print("ready", flush=True)
        time.sleep(30)
    print("not interrupted")
if mode == "os_exit":
    with cprof.range("exiting"):
        os._exit(int(sys.argv[2]))
if mode == "exec":
    os.execv(sys.executable, [sys.executable, "-c", "print('replaced')"])
if mode == "chdir":
    os.chdir("/")
print("done")
