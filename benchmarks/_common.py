"""Helpers shared by the CPU benchmarks."""
import os
import platform


def machine_info(torch, cprof):
    """CPU model, cores, kernel and versions, for the results table."""
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu_model": model or platform.processor(),
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cprof": cprof.__version__,
    }
