"""Imports torch (the stand-in in fake_torch/ when the test puts it first on PYTHONPATH);
with "work", then waits 0.3 s (for cprof run's --delay timer) and runs a range for 0.5 s."""
import sys
import time

import torch

print(torch.__name__)
if "work" in sys.argv[1:]:
    time.sleep(0.3)
    with torch.profiler.record_function("after_import"):
        time.sleep(0.5)
