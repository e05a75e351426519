"""Ranges at known times (seconds after this program starts): early [0, 0.2], middle
[0.6, 0.9], late [1.5, 1.7]. Used with --delay / --duration."""
import sys
import time

import cprof

t0 = time.monotonic()


def until(t):
    time.sleep(max(0.0, t0 + t - time.monotonic()))


with cprof.range("early"):
    until(0.2)
until(0.6)
with cprof.range("middle"):
    until(0.9)
if len(sys.argv) > 1 and sys.argv[1] == "short":
    sys.exit(0)
until(1.5)
with cprof.range("late"):
    until(1.7)
print("done")
