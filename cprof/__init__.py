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

# torch.profiler's names that are torch's own objects, re-exported on first use (so that
# importing cprof does not import torch): name -> (module, attribute, what it is for)
_TORCH_NAMES = {
    "ExecutionTraceObserver": ("torch.profiler", "ExecutionTraceObserver",
                               "to record execution traces"),
    "itt": ("torch.profiler", "itt", "for ITT annotations"),
    "RecordScope": ("torch.profiler", "RecordScope", "for its RecordFunction scopes"),
    "_ExperimentalConfig": ("torch._C._profiler", "_ExperimentalConfig",
                            "for profile(experimental_config=...), which cprof ignores"),
}
# torch.profiler's names that cprof does not offer, and what to use instead
_NOT_OFFERED = {
    "profiler": "torch.profiler.profiler is the module defining profile, schedule and "
                "tensorboard_trace_handler; cprof has them at its top level (cprof.profile)",
    "_KinetoProfile": "torch.profiler.profile's base class; cprof.profile has no such base: "
                      "use cprof.profile, or torch.profiler._KinetoProfile for torch's",
    "KinetoStepTracker": "torch's step counter for Kineto's on-demand tracing, which cprof "
                         "does not use: cprof counts steps with prof.step(); import it from "
                         "torch.profiler to drive torch's on-demand tracing",
    "register_optimizer_step_post_hook": "torch.optim's hook registry, which torch.profiler "
                                         "uses for Kineto's on-demand step counter; cprof "
                                         "counts steps with prof.step(); import it from "
                                         "torch.optim.optimizer",
}

if _find_spec("torch") is not None:  # torch's class, re-exported lazily (below)
    __all__.append("ExecutionTraceObserver")


def __getattr__(name):
    reexport = _TORCH_NAMES.get(name)
    if reexport is not None:
        module, attr, purpose = reexport
        try:
            return getattr(__import__(module, fromlist=[attr]), attr)
        except (ImportError, AttributeError) as err:
            raise AttributeError(f"cprof.{name} is {module}.{attr}; install torch {purpose}") \
                from err
    if name in _NOT_OFFERED:
        raise AttributeError(f"module 'cprof' has no attribute {name!r} "
                             f"({_NOT_OFFERED[name]})")
    raise AttributeError(f"module 'cprof' has no attribute {name!r}")


def __dir__():
    torch_names = set(_TORCH_NAMES) if _find_spec("torch") is not None else set()
    return sorted(set(globals()) | set(__all__) | torch_names)
