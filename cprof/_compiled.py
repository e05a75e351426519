"""torch.compile's regions in cprof traces: a "Torch-Compiled Region: {frame}/{compile}" range
around each run of code that Dynamo compiled, as torch.profiler shows them (torch opens those in
C++ through RecordFunction, which only torch's own profiler sees). A graph break then looks as
seed 001 describes: the resumed frame's region nested in the first one's.

Which code objects: the ones Dynamo compiled before the window opened (from
torch._dynamo.utils.orig_code_map and each original's cache entries, which carry the compile
id) and, while a window is open, each one Dynamo compiles (torch._dynamo.convert_frame's
GuardedCode is subclassed to report them; when convert_frame is imported during a window, an
import hook patches it then). How their runs are seen: csrc/py_regions.c (sys.monitoring local
events on those code objects on 3.12+; on 3.11 a profile function, or, when with_stack's
tracer holds that hook, the tracer itself, which names a region's code as the region).
Nothing is installed unless torch is imported."""
import os
import sys
import warnings

from . import _C

NAME = "Torch-Compiled Region: {}"
_CONVERT_FRAME = "torch._dynamo.convert_frame"
_MONITORING = sys.version_info >= (3, 12)

_active = None  # the _Regions of the open window, or None


def _add(code, name):
    """Called inside Dynamo's compile: must never break it."""
    r = _active
    if r is None:
        return
    try:
        r.add(code, name)
        if not r.aot_done:
            r.add_aot()
    except Exception as err:
        r.mode = f"off ({type(err).__name__}: {err})"
        warnings.warn(f"cprof: compiled regions are not recorded in this window: {err}",
                      RuntimeWarning, stacklevel=2)


_AOT_MODULE = "torch._functorch._aot_autograd.runtime_wrappers"
_AOT_NAMES = {".CompiledFunction.forward": "CompiledFunction",
              ".CompiledFunction.backward": "CompiledFunctionBackward"}
_aot_cache = (None, ())


def _aot_codes():
    """(code, name) of AOTAutograd's CompiledFunction.forward / .backward: torch.profiler
    shows their runs as "CompiledFunction" / "CompiledFunctionBackward" (seed 001: a graph
    break splits a CompiledFunction in two). One code object each, however many graphs; found
    among the code constants of runtime_wrappers once it is imported."""
    global _aot_cache
    mod = sys.modules.get(_AOT_MODULE)
    if mod is None:
        return ()
    if _aot_cache[0] is mod:
        return _aot_cache[1]
    found, todo, seen = [], [], set()
    for v in list(vars(mod).values()):
        members = vars(v).values() if isinstance(v, type) else (v,)
        for a in members:
            f = getattr(a, "__func__", a)
            code = getattr(f, "__code__", None)
            if code is not None and getattr(f, "__module__", None) == _AOT_MODULE:
                todo.append(code)
    while todo:
        code = todo.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        qual = getattr(code, "co_qualname", code.co_name)
        for suffix, name in _AOT_NAMES.items():
            if qual.endswith(suffix) and "CompiledFunctionBackward" not in qual:
                found.append((code, name))
        todo.extend(c for c in code.co_consts if hasattr(c, "co_consts"))
    _aot_cache = (mod, tuple(found))
    return _aot_cache[1]


def _patch(convert_frame):
    """Makes convert_frame report each code object it compiles (idempotent)."""
    real = getattr(convert_frame, "GuardedCode", None)
    if real is None or getattr(real, "_cprof_reports", False):
        return

    class GuardedCode(real):
        _cprof_reports = True
        __doc__ = real.__doc__

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            code = getattr(self, "code", None)
            if code is not None:
                _add(code, str(getattr(self, "trace_annotation", "") or "")
                     or NAME.format(getattr(self, "compile_id", "Unknown")))

    GuardedCode.__name__ = GuardedCode.__qualname__ = real.__name__
    GuardedCode.__module__ = real.__module__
    convert_frame.GuardedCode = GuardedCode


class _PatchOnImport:
    """A meta path finder that patches convert_frame once it is imported (torch.compile's
    first call imports Dynamo, possibly inside a window)."""

    def find_spec(self, name, path=None, target=None):
        if name != _CONVERT_FRAME:
            return None
        from importlib.machinery import PathFinder
        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


_finder = _PatchOnImport()


def _known_codes():
    """(code, name) for every code object Dynamo compiled that is still cached."""
    utils = sys.modules.get("torch._dynamo.utils")
    ocm = getattr(utils, "orig_code_map", None)
    try:
        from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list
        originals = list(ocm.values.values())
    except (ImportError, AttributeError, TypeError):
        return []
    found, seen = [], set()
    for orig in originals:
        if id(orig) in seen:
            continue
        seen.add(id(orig))
        try:
            entries = _debug_get_cache_entry_list(orig)
        except Exception:  # an internal API: a torch without it gives regions for new compiles
            continue
        for e in entries:
            code = getattr(e, "code", None)
            if code is not None:
                found.append((code, NAME.format(getattr(e, "compile_id", "Unknown"))))
    return found


class _Regions:
    """The installed capture of one window (a _glue part). Hooks are set at the first code
    object to watch, so a window in which nothing compiled runs pays nothing."""

    def __init__(self, with_stack):
        self.tool = None
        self.codes = []
        self.threads = 0
        self.aot_done = False
        self.started = False
        # 3.11 with with_stack: the tracer holds the profile hook on every thread; it asks the
        # regions' map when it names a code object, and records a region as a user range
        self.mode = ("sys.monitoring" if _MONITORING else
                     "with_stack tracer" if with_stack else "setprofile")
        global _active
        _active = self
        cf = sys.modules.get(_CONVERT_FRAME)
        if cf is not None:
            _patch(cf)
        elif _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
        known = _known_codes()
        for code, name in known:
            self.add(code, name)
        if known:
            self.add_aot()

    def _start(self):
        self.started = True
        if _MONITORING:
            self._take_tool()
            if self.tool is None:
                self.mode = "off (no free sys.monitoring tool id)"
                return
            self.threads = _C.regions_begin(False, self.tool)
        elif self.mode == "setprofile":
            self.threads = _C.regions_begin(True)

    def add_aot(self):
        for code, name in _aot_codes():
            self.add(code, name)
            self.aot_done = True

    def _take_tool(self):
        mon = sys.monitoring
        # not the reserved ids (PROFILER_ID, DEBUGGER_ID, COVERAGE_ID), and the highest free:
        # the with_stack tracer takes the lowest of 3-5, and a higher id's callbacks run first,
        # so a region opens before its frame's python_function (and, with the tracer's help,
        # csrc/py_regions.c, closes after it)
        for tool in (5, 4, 3):
            if mon.get_tool(tool) is not None:
                continue
            try:
                mon.use_tool_id(tool, "cprof-compiled-regions")
            except ValueError:
                continue
            ev = mon.events
            mon.register_callback(tool, ev.PY_START, _C.region_start)
            mon.register_callback(tool, ev.PY_RETURN, _C.region_end)
            mon.register_callback(tool, ev.PY_UNWIND, _C.region_end)
            mon.set_events(tool, ev.PY_UNWIND)
            self.tool = tool
            return

    def add(self, code, name):
        if not self.started:
            self._start()
        if self.mode.startswith("off"):
            return
        _C.regions_add(code, name)
        self.codes.append(code)
        if self.tool is not None:
            ev = sys.monitoring.events
            sys.monitoring.set_local_events(self.tool, code, ev.PY_START | ev.PY_RETURN)

    def note(self):
        """What the trace metadata says of this capture."""
        return {"mode": self.mode if self.started or self.mode.startswith("off")
                else "idle (nothing compiled)", "codes": len(self.codes),
                "regions": _C.regions_stats()["entered"] if self.started
                and self.mode != "with_stack tracer" else None}

    def remove(self):
        global _active
        if _active is self:
            _active = None
        if _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
        if not self.started or self.mode.startswith("off"):
            _C.regions_clear()
            return
        tool, self.tool = self.tool, None
        first = None
        if tool is not None:
            mon = sys.monitoring
            steps = [lambda c=c: mon.set_local_events(tool, c, 0) for c in self.codes]
            steps += [lambda: mon.set_events(tool, 0)]
            steps += [lambda e=e: mon.register_callback(tool, e, None)
                      for e in (mon.events.PY_START, mon.events.PY_RETURN, mon.events.PY_UNWIND)]
            steps += [lambda: mon.free_tool_id(tool)]
            for step in steps:  # every step runs; the first failure is reported
                try:
                    step()
                except Exception as err:
                    first = first or err
        if self.mode != "with_stack tracer":
            _C.regions_end()
        _C.regions_clear()
        self.codes = []
        if first is not None:
            warnings.warn(f"cprof: removing the compiled-region hooks: {first}",
                          RuntimeWarning, stacklevel=2)


def install(with_stack=False):
    """Starts capturing compiled regions for the open window, or returns None when torch is
    not imported (nothing can have been compiled, and torch.compile needs torch) or
    CPROF_COMPILED_REGIONS=0 switches the capture off (on 3.11 its profile function slows every
    Python call while compiled code is known; docs/benchmarks.md has the figures)."""
    if sys.modules.get("torch") is None:
        return None
    if os.environ.get("CPROF_COMPILED_REGIONS", "1").strip().lower() in ("0", "false", "no",
                                                                          "off"):
        return None
    return _Regions(with_stack)
