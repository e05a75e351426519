"""cprof: a profiler for PyTorch programs whose hot path is C.

    import cprof
    with cprof.ProfilerContext(profile_name="train"):
        with cprof.range("step"):
            ...

See docs/usage.md. The C extension cprof._C holds the event store, the clock and the trace
writer; this package configures, starts, stops and presents."""
from importlib.util import find_spec as _find_spec

from . import _C
from . import _ops

_ops.prepare_env()  # before torch loads, or torch's operators cannot be recorded (cprof/_ops.py)
from ._C import (CprofError, CuptiBusyError, GpuUnavailableError, NoOpenRangeError,
                 TraceFormatError, TraceWriteError, WindowStateError)
from ._features import features
from ._profile import (ActivityError, GpuUnavailableWarning, ProfilerActivity,
                       StacksUnavailableError, kineto_available, profile,
                       supported_activities, tensorboard_trace_handler)
from ._results import DeviceType, EventList, FunctionEventAvg, ProfilerEvent
from ._schedule import ProfilerAction, ScheduleError, min_steps, schedule
from ._ranges import pop, push, range, record_function  # noqa: A004
from ._lifecycle import end_open_windows as end_open_window
from .args import add_profiler_args, create_profiler_from_args
from .context import ProfilerContext, profile_function
from .runprof import (ENGINE_BUCKET_ORDER, MODEL_BUCKET_ORDER, NullProfiler, Profiler,
                      ProfilerConfig, ProfilerStateError, attention_compute_timer,
                      cpu_bucket_timer, cuda_bucket_timer, generate_run_name,
                      get_active_profiler, register_active_profiler, release_active_profiler,
                      rope_compute_timer)

__version__ = _C.__version__

__all__ = [
    "ActivityError",
    "StacksUnavailableError",
    "end_open_window",
    "DeviceType",
    "EventList",
    "FunctionEventAvg",
    "ProfilerAction",
    "ProfilerActivity",
    "ProfilerEvent",
    "ScheduleError",
    "kineto_available",
    "min_steps",
    "profile",
    "record_function",
    "schedule",
    "tensorboard_trace_handler",
    "supported_activities",
    "ENGINE_BUCKET_ORDER",
    "MODEL_BUCKET_ORDER",
    "NullProfiler",
    "Profiler",
    "ProfilerConfig",
    "ProfilerStateError",
    "attention_compute_timer",
    "cpu_bucket_timer",
    "cuda_bucket_timer",
    "generate_run_name",
    "get_active_profiler",
    "register_active_profiler",
    "release_active_profiler",
    "rope_compute_timer",
    "CprofError",
    "CuptiBusyError",
    "GpuUnavailableError",
    "GpuUnavailableWarning",
    "NoOpenRangeError",
    "ProfilerContext",
    "TraceFormatError",
    "TraceWriteError",
    "WindowStateError",
    "add_profiler_args",
    "create_profiler_from_args",
    "features",
    "pop",
    "profile_function",
    "push",
    "__version__",
]

if _find_spec("torch") is not None:  # torch's class, re-exported lazily (below)
    __all__.append("ExecutionTraceObserver")


def __getattr__(name):
    # torch's ExecutionTraceObserver, for profile(execution_trace_observer=...): re-exported on
    # first use, so that importing cprof does not import torch
    if name == "ExecutionTraceObserver":
        try:
            from torch.profiler import ExecutionTraceObserver
        except ImportError as err:
            raise AttributeError(
                "cprof.ExecutionTraceObserver is torch.profiler's; install torch to record "
                "execution traces") from err
        return ExecutionTraceObserver
    raise AttributeError(f"module 'cprof' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
