"""What this build and this machine can do, and for each thing that is not available, why."""
import ctypes

from . import _C

_GPU_NOT_BUILT = (
    "GPU activity collection through CUPTI is not part of cprof " + _C.__version__ + " yet"
)


def _driver_status():
    """(loaded, reason): whether the NVIDIA driver library can be opened in this process."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return False, f"no NVIDIA driver: libcuda.so.1 could not be loaded ({exc})"
    return True, None


def features():
    """Returns a dict: feature name -> {"available": bool, "reason": str or None, ...}.

    - ``cpu_ranges``: cprof.range / push / pop and ProfilerContext CPU traces.
    - ``gpu_activity``: kernels, copies and runtime calls from CUPTI.
    - ``cuda_timers``: CUDA-event bucket timers of the Profiler class.
    - ``build``: how the extension was built.
    """
    driver_ok, driver_reason = _driver_status()
    gpu_reason = _GPU_NOT_BUILT if driver_ok else f"{driver_reason}; and {_GPU_NOT_BUILT}"
    return {
        "cpu_ranges": {"available": True, "reason": None},
        "gpu_activity": {"available": False, "reason": gpu_reason},
        "cuda_timers": {
            "available": False,
            "reason": (f"{driver_reason}; and " if driver_reason else "")
            + "CUDA-event timers are not part of cprof " + _C.__version__ + " yet",
        },
        "build": dict(_C.build_info()),
    }


def gpu_unavailable_reason():
    """None if GPU activity can be collected, else the reason it cannot."""
    f = features()["gpu_activity"]
    return None if f["available"] else f["reason"]
