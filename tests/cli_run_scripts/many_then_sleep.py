"""Many short ranges for ~0.5 s (a trace that takes a while to write), then sleeps. Used with
--duration and a signal that lands while the timer thread writes the trace."""
import time

import cprof

r = cprof.range("busy")
end = time.monotonic() + 0.5
while time.monotonic() < end:
    for _ in range(1000):
        with r:
            pass
time.sleep(30)
