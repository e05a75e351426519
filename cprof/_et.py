"""torch's Execution Trace observer driven by cprof.profile, as torch.profiler.profile drives it.

An execution trace (torch.profiler.ExecutionTraceObserver; the Chakra / PARAM replay format)
is torch's own RecordFunction observer: it records every operator with its inputs' shapes,
types and values into its own JSON file. It does not depend on Kineto, so cprof hands it the
same calls torch.profiler.profile makes: start() when a window starts recording (after warmup),
stop() when the window stops, cleanup() when the with block ends (the observer writes its file
then). torch's ENABLE_PYTORCH_EXECUTION_TRACE=1 builds one when none is passed, as in torch.

cprof's ProfilerStep ranges are cprof ranges, which the observer cannot see; while it runs,
each step also opens a torch RecordFunction of the same name (USER_SCOPE, which cprof's
operator capture leaves out), so the execution trace has the ProfilerStep#N nodes it has under
torch.profiler. Its nodes' rf_id cannot be joined with cprof's trace: cprof's operators come
from ITT, which carries no record-function id (docs/design.md)."""
import os
import sys
import warnings

_IFACE = ("start", "stop", "cleanup")


def resolve(observer):
    """The observer to drive: the one passed (checked for torch's _ITraceObserver interface),
    else torch's from ENABLE_PYTORCH_EXECUTION_TRACE=1, else None."""
    if observer is None:
        if os.environ.get("ENABLE_PYTORCH_EXECUTION_TRACE", "0") != "1":
            return None
        try:
            from torch.profiler import ExecutionTraceObserver
        except ImportError:
            warnings.warn("cprof.profile: ENABLE_PYTORCH_EXECUTION_TRACE=1 but torch (whose "
                          "ExecutionTraceObserver writes execution traces) cannot be "
                          "imported; no execution trace is recorded", RuntimeWarning,
                          stacklevel=4)
            return None
        return ExecutionTraceObserver.build_execution_trace_obs_from_env()
    missing = [m for m in _IFACE if not callable(getattr(observer, m, None))]
    if missing:
        raise TypeError(
            f"cprof.profile: execution_trace_observer must have start(), stop() and cleanup() "
            f"(torch.profiler.ExecutionTraceObserver().register_callback(path) does); "
            f"{type(observer).__name__} lacks {', '.join(m + '()' for m in missing)}")
    return observer


def running(observer):
    """Whether the observer is recording now (torch's has is_running(); another
    _ITraceObserver is taken to run between start() and stop())."""
    is_running = getattr(observer, "is_running", None)
    if callable(is_running):
        try:
            return bool(is_running())
        except Exception:
            return False
    return True


def step_enter(name):
    """Opens a torch RecordFunction named name (for the observer); returns its handle, or None
    when torch's profiler ops are not there."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return torch.ops.profiler._record_function_enter_new(name, None)
    except Exception:
        return None


def step_exit(handle):
    torch = sys.modules.get("torch")
    if handle is None or torch is None:
        return
    try:
        torch.ops.profiler._record_function_exit._RecordFunction(handle)
    except Exception:
        pass
