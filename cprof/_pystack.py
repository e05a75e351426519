"""with_stack: Python function calls (and optionally C function calls) as ranges, recorded in C
(csrc/py_tracer.c) while a window is open.

    _pystack.start(c_calls=True, min_duration_us=5.0)   # a window must be open
    ...
    counts = _pystack.stop()                           # before the window stops

Python 3.12+ uses sys.monitoring (every thread). Python 3.11 sets a C profile function on every
thread that exists at start and, through threading.setprofile, on threading threads started
later; the previous threading profile hook is restored at stop.

cprof's own code is not traced: a function defined in a file of this package is not recorded,
nor is anything it calls (Python or C), nor the C calls it makes; this holds as well for the
cprof frames already running when the tracer starts (start(), ProfilerContext.__enter__). User
code that cprof calls back (an on_trace_ready handler run by profile.step(), a module name
resolver) runs under cprof's frames and is therefore not recorded either. The exception is
cprof's decorators: a wrapper taking ``*args, **kwargs`` (``cprof.range`` on a function,
``profile_function``, the bucket timers) is not recorded, but the function it wraps is.

Python functions are named as torch.profiler names them: "file(line): qualname", the file
relative to the longest site-packages / sys.path entry it lies under
("torch/nn/modules/module.py(1773): _call_impl"), absolute otherwise."""
import math
import numbers
import os
import site
import sys
import threading

from . import _C, _warn

_MONITORING = sys.version_info >= (3, 12)
_saved_thread_hook = None
# co_filename prefix of cprof's own code: spelled as the package's __file__ (as imported), which
# is what its code objects carry
_OWN_PREFIX = os.path.join(os.path.dirname(__file__), "")
# The user frames running when a window opens are recorded as beginning then (decision 96);
# `cprof run` turns it off: the frames under the program are its launcher's, not the user's.
record_running_frames = True


def strip_prefixes():
    """The directory prefixes left out of python_function names, longest first: the ones
    torch.profiler's Python tracer strips (torch.profiler.python_tracer._prefix_regex: site
    and user site-packages, every sys.path entry, the directory torch is installed in)."""
    raw = list(sys.path)
    for get in (site.getsitepackages, site.getuserbase, site.getusersitepackages):
        try:
            got = get()
        except Exception:  # a virtualenv's old site module may lack one
            continue
        raw.extend([got] if isinstance(got, str) else got)
    torch = sys.modules.get("torch")
    if getattr(torch, "__file__", None):
        raw.append(os.path.dirname(os.path.dirname(torch.__file__)))
    paths = {os.path.abspath(p) for p in raw if isinstance(p, str)}
    return [p if p.endswith(os.sep) else p + os.sep for p in sorted(paths, reverse=True)]


def start(c_calls=False, min_duration_us=0.0, c_calls_as_ops=True):
    """Starts the tracer in the open window. c_calls: also record builtin / C function calls
    (torch ops as ``torch._C._nn.linear``, ``builtins.len``) as cpu_op ranges, or as
    python_function ranges (torch.profiler's category for them) with c_calls_as_ops=False:
    where torch's operators are captured as cpu_op already, C calls such as builtins.isinstance
    would otherwise fill operator views (TensorBoard's, HTA's) and parent the aten ops.
    min_duration_us: ranges shorter than this many microseconds are dropped (a range that has
    a kept child is kept). cprof's own code, and what it calls, is not recorded (see above).
    Raises WindowStateError without an open window or when already running, CprofError when
    another profiler holds what the tracer needs."""
    global _saved_thread_hook
    if isinstance(min_duration_us, bool) or not isinstance(min_duration_us, numbers.Real):
        raise TypeError(f"min_duration_us must be a number of microseconds, not "
                        f"{type(min_duration_us).__name__}")
    min_duration_us = float(min_duration_us)
    if math.isnan(min_duration_us) or min_duration_us < 0:
        raise ValueError(f"min_duration_us must be >= 0 microseconds, got {min_duration_us!r}")
    if math.isinf(min_duration_us):
        raise ValueError("min_duration_us must be finite")
    min_ns = int(round(min_duration_us * 1000))
    if _MONITORING:
        _C.tracer_start(c_calls=bool(c_calls), min_duration_ns=min_ns, own_prefix=_OWN_PREFIX,
                        strip_prefixes=strip_prefixes(), running_frames=record_running_frames,
                        c_calls_as_ops=bool(c_calls_as_ops))
        return
    # the threading hook first (a thread it reaches before the tracer runs just removes it),
    # so the tracer does not record this bookkeeping
    saved = threading.getprofile()
    threading.setprofile(_C._tracer_thread_hook)
    try:
        _C.tracer_start(c_calls=bool(c_calls), min_duration_ns=min_ns, own_prefix=_OWN_PREFIX,
                        strip_prefixes=strip_prefixes(), running_frames=record_running_frames,
                        c_calls_as_ops=bool(c_calls_as_ops))
    except BaseException:
        threading.setprofile(saved)
        raise
    _saved_thread_hook = saved


def stop():
    """Stops the tracer; returns its counts (dict: calls recorded, discarded by min_duration,
    suppressed (cprof's own code and what it called), errors, ...) or None if it was not
    running. Name resolution errors (out of memory) are warned about here, since the callbacks
    cannot raise."""
    global _saved_thread_hook
    counts = _C.tracer_stop()
    if not _MONITORING and threading.getprofile() is getattr(_C, "_tracer_thread_hook", None):
        threading.setprofile(_saved_thread_hook)
    _saved_thread_hook = None
    if counts and counts.get("errors"):
        _warn.warn(f"cprof with_stack: {counts['errors']} calls could not be recorded "
                   f"(out of memory)")
    return counts


def active():
    """True while the tracer runs."""
    return _C.tracer_active()
