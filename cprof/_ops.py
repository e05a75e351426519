"""Torch operators (aten ops, autograd nodes, Inductor's triton_ launch ranges) as cpu_op
ranges, recorded in C through a RecordFunction observer built against torch (csrc/torch_ops.cpp,
docs/design.md decisions 92, 98) where it is built for the running torch, else through torch's
ITT hooks (csrc/ops_itt.c; decision 58), which pass names only.

torch's emit_itt profiler state makes every RecordFunction call ITT's task begin/end; cprof's
extension is the ITT collector those calls reach. ITT names its collector through
INTEL_LIBITTNOTIFY64, read when libtorch loads, so `prepare_env()` (run at `import cprof`) sets it
when torch is not imported yet; a process that imported torch first gets no operators (the
trace metadata says why). CPROF_OPS=0 turns the whole mechanism off."""
import os
import sys
import threading

from . import _C, _warn

ENV = "INTEL_LIBITTNOTIFY64"
_state = {"env_set": False, "attach": None, "owner": None, "suspended": False,
          "patched": False, "rf": None, "capture": None}
_lock = threading.Lock()
# cprof's profiler state in torch's PROFILER_STATE slot (torch_ops.cpp CprofState), for
# operator capture (OPS: torch's _RecordFunctionFast records only when the slot holds a state)
# and profile_memory (MEMORY: the allocation reports): the thread whose slot holds it, the
# users the open window wants, and whether torch.profiler took its place on that thread
# SHAPES: a record_shapes window's operators: the state's config then says enabled and
# reporting input shapes, so torch hands the observer an autograd.Function's non-tensor
# arguments, as torch.profiler's (decision 145)
OPS, MEMORY, SHAPES = 1, 2, 4
_slot = {"thread": None, "want": 0, "suspended": False}
# torch.profiler (Kineto) sessions seen through the patched entry points: thread -> True from
# torch's _prepare_profiler / _enable_profiler with activities until its _disable_profiler on
# that thread. torch's profiler state is per thread (_profiler_type() says NONE on the others),
# so a cprof window opened on another thread needs this to know Kineto is busy
_torch_sessions = {}


def disabled_by_env():
    return os.environ.get("CPROF_OPS", "1").strip().lower() in ("0", "off", "false", "no")


def prepare_env():
    """At `import cprof`: names cprof's extension as ITT's collector if torch is not loaded yet
    and no other collector (VTune) is named. The variable is removed again once torch's ITT has
    attached (so child processes do not inherit it) or at the first window."""
    if disabled_by_env() or "torch" in sys.modules or ENV in os.environ:
        return
    os.environ[ENV] = _C.__file__
    _state["env_set"] = True


def _restore_env():
    if _state["env_set"] and os.environ.get(ENV) == _C.__file__:
        del os.environ[ENV]
    _state["env_set"] = False


def release_env():
    """At every window's start: once torch is imported, ITT's collector is settled (cprof's,
    attached now if no window attached it yet), and cprof's INTEL_LIBITTNOTIFY64 leaves the
    environment, so child processes (subprocess, spawn workers, torchrun) do not inherit it.
    Before, only a window capturing operators took it out: ProfilerContext / cprof run
    windows (record_ops off) left it for good."""
    if _state["env_set"] and "torch" in sys.modules:
        attach()


def _torch_lib(torch):
    d = os.path.join(os.path.dirname(torch.__file__), "lib")
    for name in ("libtorch_cpu.so", "libtorch_cpu.dylib"):
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    return None


def attach():
    """Makes cprof torch's ITT collector (once). Returns None when attached, else the reason."""
    if _state["attach"] is not None:
        return _state["attach"] or None
    torch = sys.modules.get("torch")
    if torch is None:
        return "torch is not imported"
    if disabled_by_env():
        return "turned off by CPROF_OPS=0"
    named = os.environ.get(ENV)
    if named and named != _C.__file__:
        # torch's ITT belongs to that collector (VTune...): never take it over
        _state["attach"] = f"{ENV} names another ITT collector ({named}); cprof leaves it alone"
        return _state["attach"]
    lib = _torch_lib(torch)
    why = "libtorch_cpu not found beside torch" if lib is None else _C.ops_attach(lib, _C.__file__)
    _restore_env()
    _state["attach"] = why or ""
    return why


def _profiler_api(torch):
    from torch._C._profiler import (ProfilerConfig, ProfilerState, RecordScope,
                                    _ExperimentalConfig)
    cfg = ProfilerConfig(ProfilerState.ITT, False, False, False, False, False,
                         _ExperimentalConfig())
    # USER_SCOPE ranges (record_function) are recorded by cprof's own patch, as user ranges
    scopes = {s for s in RecordScope.__members__.values() if s != RecordScope.USER_SCOPE}
    return cfg, scopes


def _enable(torch):
    cfg, scopes = _profiler_api(torch)
    torch._C._autograd._enable_profiler(cfg, set(), scopes)


def _disable(torch):
    torch._C._autograd._disable_profiler()


def observer():
    """cprof._torch_ops (the RecordFunction observer) when it is built for the running torch:
    (module, None), else (None, the reason and what to do)."""
    if _state["rf"] is not None:
        return _state["rf"]
    torch = sys.modules.get("torch")
    if torch is None:
        return None, "torch is not imported"
    rebuild = ("rebuild cprof with torch installed (bash scripts/setup.sh, or python setup.py "
               "build_ext --inplace)")
    try:
        from . import _torch_ops
    except ImportError as err:
        res = (None, f"cprof._torch_ops is not built or does not load ({err}): {rebuild}")
    else:
        built = getattr(_torch_ops, "TORCH_VERSION", "?")
        if built != torch.__version__:
            res = (None, f"cprof._torch_ops was built for torch {built}, this is torch "
                         f"{torch.__version__}: {rebuild}")
        else:
            res = (_torch_ops, None)
    _state["rf"] = res
    return res


class _Itt:
    """Capture through torch's ITT profiler state (names only)."""
    mode = "itt"
    shapes = False

    def __init__(self, torch):
        self.torch = torch

    def on(self):
        # the ITT calls are operators from now (before: the program's own annotations); not
        # if torch's ITT state could not be had (torch.profiler holds the thread, say)
        _C.ops_itt_recording(True)
        try:
            _enable(self.torch)
        except BaseException:
            _C.ops_itt_recording(False)
            raise

    def off(self):
        _disable(self.torch)
        _C.ops_itt_recording(False)

    def note(self, errors_before=0):
        return {"mode": self.mode, "names": _C.ops_stats()["names"]}

    def errors(self):
        return 0


class _Observer:
    """Capture through the RecordFunction observer (names, and shapes if asked)."""
    mode = "record_function"

    def __init__(self, mod, shapes):
        self.mod = mod
        self.shapes = bool(shapes)
        self.handle = None

    def on(self):
        self.handle = self.mod.add(self.shapes)

    def off(self):
        handle, self.handle = self.handle, None
        if handle is not None:
            self.mod.remove(handle)

    def errors(self):
        """Shapes that could not be recorded since the process began (torch_ops.cpp)."""
        return self.mod.stats()["errors"]

    def note(self, errors_before=0):
        """errors_before: errors() when the window opened; the note counts this window's."""
        note = {"mode": self.mode, "names": _C.ops_stats()["names"], "shapes": self.shapes}
        errors = self.errors() - errors_before
        if errors > 0:
            note["shape_errors"] = errors
        return note


def _patch_torch_profiler(torch):
    """torch allows one profiler per thread: torch.profiler / emit_nvtx started inside a cprof
    window would fail with "Profiler is already enabled on this thread". The patched entry
    points suspend cprof's operator capture while torch's own profiler runs (its operators are
    then in torch's trace, not cprof's) and resume it after. They also say when torch.profiler
    takes CUPTI from a cprof window collecting GPU activity (_window.torch_profiler_starts).
    Once per process; a window with GPU collection installs them too (patch_torch_profiler)."""
    if _state["patched"]:
        return
    ap = torch.autograd.profiler
    legacy = sys.modules.get("torch.autograd.profiler_legacy")
    if legacy is None:
        try:
            import torch.autograd.profiler_legacy as legacy
        except ImportError:
            legacy = None

    def gpu_check(args, kwargs):
        # Kineto taking CUPTI from a cprof window that collects GPU activity: said, not silent;
        # never raised into torch's start (a warning under -W error: the metadata still says)
        from . import _window
        try:
            _window.torch_profiler_starts(args[1] if len(args) > 1
                                          else kwargs.get("activities"))
        except Exception:  # noqa: BLE001 - torch.profiler must start whatever cprof thinks
            pass

    def session_begins(args, kwargs):
        # a Kineto session (emit_nvtx / emit_itt pass no activities): busy from here on,
        # marked before torch's call (a window starting meanwhile on another thread sees it).
        # Returns whether this call marked it (to be unmarked if torch's call fails)
        activities = args[1] if len(args) > 1 else kwargs.get("activities")
        me = threading.get_ident()
        try:
            if not activities or me in _torch_sessions:
                return False
        except Exception:  # noqa: BLE001 - torch's call as cprof does not know it
            return False
        _torch_sessions[me] = True
        return True

    def call_marked(orig, mark, *args, **kwargs):
        marked = mark and session_begins(args, kwargs)
        try:
            return orig(*args, **kwargs)
        except BaseException:
            if marked:
                _torch_sessions.pop(threading.get_ident(), None)
            raise

    def wrap_prepare(orig):
        def _prepare_profiler(*args, **kwargs):
            gpu_check(args, kwargs)  # Kineto enables its CUPTI activities here
            return call_marked(orig, True, *args, **kwargs)
        return _prepare_profiler

    def wrap_enable(orig, kineto=True):
        def _enable_profiler(*args, **kwargs):
            gpu_check(args, kwargs)
            if _state["owner"] == threading.get_ident() and not _state["suspended"]:
                _state["capture"].off()
                _state["suspended"] = True
            if _slot["thread"] == threading.get_ident():
                # torch's state needs the slot cprof's state holds
                _state_pop_here(OPS | MEMORY | SHAPES)
                _slot["suspended"] = True
            else:
                _stale_pop()
            return call_marked(orig, kineto, *args, **kwargs)
        return _enable_profiler

    def wrap_disable(orig):
        def _disable_profiler(*args, **kwargs):
            try:
                result = orig(*args, **kwargs)
            finally:
                _torch_sessions.pop(threading.get_ident(), None)
                _torch_sessions.pop(None, None)  # one running when cprof came (see below)
            if _state["owner"] == threading.get_ident() and _state["suspended"]:
                _state["capture"].on()
                ap._run_on_profiler_start()
                _state["suspended"] = False
            if _slot["suspended"]:
                _slot["suspended"] = False
                if _slot["want"]:
                    state_push(_slot["want"])
            return result
        return _disable_profiler

    ap._enable_profiler = wrap_enable(ap._enable_profiler)
    ap._disable_profiler = wrap_disable(ap._disable_profiler)
    if hasattr(ap, "_prepare_profiler"):
        ap._prepare_profiler = wrap_prepare(ap._prepare_profiler)
    if legacy is not None and hasattr(legacy, "_enable_profiler_legacy"):
        # torch.autograd.profiler_legacy.profile: the same one-state-per-thread rule (its
        # config is its only argument: no CUDA activity to check)
        legacy._enable_profiler_legacy = wrap_enable(legacy._enable_profiler_legacy,
                                                     kineto=False)
        legacy._disable_profiler_legacy = wrap_disable(legacy._disable_profiler_legacy)
    if getattr(ap, "_is_profiler_enabled", False):
        # torch's profiler runs already (cprof sets this flag only once patched): a session
        # these wrappers did not see begin, on some thread; busy until a disable comes
        _torch_sessions[None] = True
    _state["patched"] = True


def torch_profiler_elsewhere():
    """Whether a torch.profiler session is running on any thread, as far as cprof can tell:
    one seen starting through the patched entry points, or one running when they were
    installed. _profiler_type() sees the calling thread's session only."""
    return bool(_torch_sessions)


def patch_torch_profiler():
    """_patch_torch_profiler for the torch loaded, if any (a GPU window's start)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            _patch_torch_profiler(torch)
        except (ImportError, AttributeError):  # a torch without these entry points
            pass


class _Ops:
    """One window's operator capture on the thread that opened it."""

    def __init__(self, torch, capture, shapes_note):
        self.torch = torch
        self.capture = capture
        self.shapes_note = shapes_note
        self.thread = threading.get_ident()
        # the C counter is the process's: the window's metadata counts its own (it used to
        # give the sum of every window so far)
        self.errors_before = capture.errors()

    fast_note = None  # why torch's _RecordFunctionFast ranges are not recorded, if they are not

    def ops_note(self):
        note = self.capture.note(self.errors_before)
        if self.shapes_note:
            note["shapes_unavailable"] = self.shapes_note
        if self.fast_note:
            note["record_function_fast_unavailable"] = self.fast_note
        return note

    def remove(self):
        with _lock:
            if _state["owner"] != self.thread:
                return
            if threading.get_ident() != self.thread:
                if self.capture.mode == "record_function":
                    state_pop(OPS | SHAPES)  # bookkeeping only: the state is that
                    # thread's
                # torch's per-thread state can only be left on its own thread: the next
                # window on that thread reuses it; ranges pushed meanwhile are not recorded
                return
            _state["owner"] = None
            suspended, _state["suspended"] = _state["suspended"], False
            capture, _state["capture"] = _state["capture"], None
        if capture.mode == "record_function":
            state_pop(OPS | SHAPES)
        if not suspended:
            capture.off()
        self.torch.autograd.profiler._run_on_profiler_stop()


CAPTURES = ("auto", "itt", "record_function")


def capture_choice():
    """CPROF_OPS_CAPTURE: auto (default), itt or record_function (the observer even without
    shapes). A ValueError names the valid values."""
    v = os.environ.get("CPROF_OPS_CAPTURE", "auto").strip().lower() or "auto"
    if v not in CAPTURES:
        raise ValueError(f"cprof: CPROF_OPS_CAPTURE={v!r}; valid values are "
                         f"{', '.join(CAPTURES)}")
    return v


def _choose(torch, record_shapes):
    """(capture, why_no_shapes) for a window, or (None, why_no_ops). The observer comes first
    where it is built for this torch: it passes shapes, and the sequence numbers that link
    forward ops to their backward nodes as torch.profiler's fwdbwd flows (decision 98); ITT
    (names only) where it is not. CPROF_OPS_CAPTURE=itt takes ITT only; auto and
    record_function are the same choice (record_function was the way to ask for the observer
    when ITT came first)."""
    choice = capture_choice()
    # attached either way, once: attaching also takes cprof's INTEL_LIBITTNOTIFY64 out of
    # the environment, which child processes must not inherit
    why = attach()
    if choice == "itt":
        if why is not None:
            return None, why
        return _Itt(torch), ("CPROF_OPS_CAPTURE=itt: ITT passes operator names only"
                             if record_shapes else None)
    mod, why_observer = observer()
    if mod is not None:
        return _Observer(mod, record_shapes), None
    if why is None:
        return _Itt(torch), why_observer if record_shapes else None
    return None, why


def install(record_shapes=False):
    """Starts operator capture for the open window. Returns (part, None) or (None, note): the
    part's ops_note() or the note go into the trace's metadata as cprof.ops. With record_shapes,
    operators carry their inputs' shapes where the observer is built (else the note says why)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None, {"mode": "off", "reason": "torch is not imported"}
    if disabled_by_env():
        return None, {"mode": "unavailable", "reason": "turned off by CPROF_OPS=0"}
    try:
        capture, why = _choose(torch, record_shapes)
    except ValueError as err:  # CPROF_OPS_CAPTURE changed since cprof.profile() checked it
        return None, {"mode": "unavailable", "reason": str(err)}
    if capture is None:
        return None, {"mode": "unavailable", "reason": why}
    _patch_torch_profiler(torch)
    me = threading.get_ident()
    with _lock:
        owner = _state["owner"]
        if owner is not None and owner != me:
            return None, {"mode": "unavailable",
                          "reason": "operator capture is held by another thread's window"}
        fresh = owner is None
        if fresh:
            _state["owner"] = me
            _state["capture"] = capture
        else:  # this thread's capture outlived its window (closed from another thread)
            capture = _state["capture"]
    if fresh:
        try:
            capture.on()
        except RuntimeError as err:  # torch's own profiler is running on this thread
            with _lock:
                _state["owner"] = None
                _state["capture"] = None
            return None, {"mode": "unavailable", "reason": f"torch.profiler is active: {err}"}
    torch.autograd.profiler._run_on_profiler_start()
    shapes_note = None
    if record_shapes and not capture.shapes:
        shapes_note = why or "an earlier window's capture without shapes is still on this thread"
    part = _Ops(torch, capture, shapes_note)
    if capture.mode == "record_function":  # ITT's own state holds the slot under ITT
        shapes = SHAPES if capture.shapes and _shapes_state_safe(torch) else 0
        part.fast_note = state_push(OPS | shapes)
    return part, None


def _shapes_state_safe(torch):
    """Whether cprof's state may tell torch a profiler reporting input shapes is enabled
    (SHAPES). Not while torch.distributed.rpc has an agent: every RPC would then ask the remote
    end to profile, and torch hands the reply's events to the thread's state as if it were its
    legacy profiler's (an autograd.Function's scalar arguments are then not recorded)."""
    rpc = sys.modules.get("torch.distributed.rpc")
    if rpc is None:
        return True
    try:
        return not torch._C._distributed_rpc._is_current_rpc_agent_set()
    except (AttributeError, RuntimeError):
        return True


class _AsyncRanges:
    """One window's capture of torch's async ranges (install_async)."""

    def __init__(self, mod):
        self.mod = mod
        self.handle = mod.add_async()

    def remove(self):
        handle, self.handle = self.handle, None
        if handle is not None:
            self.mod.remove(handle)


def install_async():
    """Starts the capture of torch's async ranges for the open window: the user-scope
    RecordFunctions torch.distributed's process groups open around collectives
    ("gloo:all_reduce", "nccl:all_reduce"), begun on one thread and ended on the thread that
    completes the work, as user_annotation ranges, whether operators are captured or not (torch.
    profiler records them with its CPU activity). A global RecordFunction callback for the user
    scope, added at the window's start and removed at its end, from any thread; record_function's
    own ranges (not async) pass through it. Returns (part, None), or (None, why not)."""
    if sys.modules.get("torch") is None:
        return None, "torch is not imported"
    if disabled_by_env():
        return None, "turned off by CPROF_OPS=0"
    mod, why = observer()
    if mod is None:
        return None, why
    return _AsyncRanges(mod), None


# ---- cprof's profiler state (operator capture's _RecordFunctionFast, profile_memory) ----

def _stale_pop():
    """Takes out a cprof state left in this thread's slot by no window: torch's autograd engine
    puts back the thread state it saved before running a hook, so a window closed inside a
    backward hook finds its state back in the slot once backward returns."""
    mod, _ = observer()
    if mod is None:
        return
    try:
        # -1, nothing done, when the slot's top is not cprof's
        mod.state_pop(OPS | MEMORY | SHAPES)
    except RuntimeError:
        pass


def _state_pop_here(users):
    mod, _ = observer()
    if mod is None or _slot["thread"] != threading.get_ident():
        return
    try:
        had = mod.state_pop(users)
    except RuntimeError as err:  # torch's debug-info stack changed under it: never fatal
        _warn.warn(f"cprof: cprof's profiler state could not be removed ({err}); "
                   "allocations reported after the window are ignored")
        had = -1
    if had < 0 or not had & ~users:
        _slot["thread"] = None


def state_push(users):
    """Installs cprof's profiler state on this thread for users (OPS, MEMORY) for the window:
    torch's allocators then report every allocation and release to mem_events.c (MEMORY), and
    torch's _RecordFunctionFast ranges (Inductor's triton_ launches, compiled-graph calls)
    reach the operator observer (OPS). None when installed, else why not."""
    torch = sys.modules.get("torch")
    if torch is None:
        return "torch is not imported"
    mod, why = observer()
    if mod is None:
        return why
    _patch_torch_profiler(torch)
    me = threading.get_ident()
    if _slot["thread"] == me and not _slot["want"]:
        _state_pop_here(OPS | MEMORY | SHAPES)  # left by a window closed from another thread
    if _slot["thread"] not in (None, me):
        if _slot["want"]:
            return "cprof's profiler state of an earlier window is still on another thread"
        # left in another thread's slot by a window closed elsewhere, wanted by nobody: that
        # thread's torch.profiler start takes it out (_stale_pop); this thread gets its own
        _slot["thread"] = None
    _slot["want"] |= users
    if not mod.state_push(users):
        _slot["want"] &= ~users
        return ("torch's profiler state holds this thread's slot (torch.profiler, or "
                "CPROF_OPS_CAPTURE=itt)")
    _slot["thread"] = me
    return None


def state_pop(users):
    """Takes users away from cprof's state (on the thread that installed it; from another
    thread it is taken at that thread's next window or torch.profiler start)."""
    _slot["want"] &= ~users
    if not _slot["want"]:
        _slot["suspended"] = False
    _state_pop_here(users)

