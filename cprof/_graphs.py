"""CUDA graph captures open on the program's threads, so cprof's own CUDA synchronize never
breaks one (decision 189).

cprof synchronizes CUDA before it ends GPU collection (`_window._sync_cuda`), and it may do
so from a thread other than the program's: `cprof run`'s --delay / --duration timer thread,
or a thread that starts torch.profiler inside a window. torch.cuda.graph captures in CUDA's
*global* mode by default, where a synchronize from any other thread fails and invalidates
the capture: the program would crash because it was profiled. CUDA offers no process-wide
question "is a stream capturing?", so torch.cuda.CUDAGraph's capture_begin / capture_end
(which torch.cuda.graph and make_graphed_callables call) are wrapped to count the global-mode
captures open; cprof's synchronize waits for them to end and holds new ones back while it
runs (a capture_begin waits for the synchronize, which waits only for GPU work). Captures in
"thread_local" or "relaxed" mode (torch.compile's CUDA graph trees) restrict only their own
thread and are not counted. A capture begun before the wrappers were installed is not seen.
"""
import sys
import threading

_cv = threading.Condition()
_open = {}  # id(graph) -> the thread ident of an open global-mode capture


def install(torch):
    """Wraps torch.cuda.CUDAGraph's capture_begin / capture_end (idempotent; a torch without
    them is left alone)."""
    graph = getattr(getattr(torch, "cuda", None), "CUDAGraph", None)
    begin = getattr(graph, "capture_begin", None)
    end = getattr(graph, "capture_end", None)
    if begin is None or end is None or getattr(begin, "_cprof_patched", False):
        return

    def capture_begin(self, *args, **kwargs):
        mode = args[1] if len(args) > 1 else kwargs.get("capture_error_mode", "global")
        counted = mode == "global"
        if counted:
            with _cv:  # waits while cprof synchronizes (sync_allowed)
                _open[id(self)] = threading.get_ident()
        try:
            return begin(self, *args, **kwargs)
        except BaseException:
            if counted:
                _ended(self)
            raise

    def capture_end(self, *args, **kwargs):
        try:
            return end(self, *args, **kwargs)
        finally:
            _ended(self)

    for new, old in ((capture_begin, begin), (capture_end, end)):
        new.__name__, new.__qualname__, new.__doc__ = old.__name__, old.__qualname__, old.__doc__
        new.__wrapped__ = old
        new._cprof_patched = True
    graph.capture_begin, graph.capture_end = capture_begin, capture_end


def install_loaded():
    """install() for the torch imported, if any; never raises (a torch cprof does not know is
    left as it is)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            install(torch)
        except Exception:  # noqa: BLE001 - cprof's own bookkeeping, not the program's
            pass


def _ended(graph):
    with _cv:
        if _open.pop(id(graph), None) is not None:
            _cv.notify_all()


def _others_capture():
    me = threading.get_ident()
    return any(ident != me for ident in _open.values())


class sync_allowed:
    """Context for cprof's CUDA synchronize: waits up to `timeout` seconds for other threads'
    global-mode captures to end and keeps new ones from beginning until the block ends.
    Its value: True when no other thread's capture is open (synchronize), False when one
    still was at the timeout (skip the synchronize: the work in flight is then counted
    incomplete, as without one, and the program's capture is left alone)."""

    def __init__(self, timeout=30.0):
        self.timeout = timeout

    def __enter__(self):
        _cv.acquire()
        return _cv.wait_for(lambda: not _others_capture(), self.timeout)

    def __exit__(self, *exc):
        _cv.release()
        return False
