"""cprof's torch glue: what a window captures from the user's program besides cprof ranges.

- torch.profiler.record_function / torch.autograd.profiler.record_function ranges and
  torch.cuda.nvtx ranges become cprof ranges (user_annotation) while a window is open. The
  patches are installed at the first window and stay (they cost one C call outside windows),
  because a range entered under a patch must find the patch when it exits.
- with_stack / with_modules / record_shapes: the C tracer (py_tracer.c) and the C module hooks
  (py_hooks.c), installed only while a window is open (install() / handle.remove()).
- profile_memory with CUDA: torch.cuda.memory._record_memory_history during the window and a
  snapshot at its end (memory_begin / memory_end / write_memory_snapshot)."""
import os
import pickle
import resource
import sys
import threading
import warnings

from . import _C

_patched = {"record_function": False, "nvtx": False}
_nvtx_local = threading.local()


def _patch_record_function(torch):
    rf = getattr(getattr(torch, "autograd", None), "profiler", None)
    rf = getattr(rf, "record_function", None)
    if rf is None or getattr(rf, "_cprof_patched", False):
        return
    orig_enter, orig_exit = rf.__enter__, rf.__exit__
    open_range, close_range, active = _C.open_range, _C.close_range, _C.active

    def __enter__(self):
        out = orig_enter(self)
        if active():
            # closed by identity: a record_function around the loop that calls prof.step()
            # ends its own range, not the ProfilerStep opened inside it
            self._cprof_token = open_range(self.name)
        return out

    def __exit__(self, exc_type, exc_value, traceback):
        token = self.__dict__.pop("_cprof_token", None)
        if token is not None:
            try:
                close_range(token)
            except _C.NoOpenRangeError:
                pass
        return orig_exit(self, exc_type, exc_value, traceback)

    rf.__enter__, rf.__exit__ = __enter__, __exit__
    rf._cprof_patched = True
    rf._cprof_original = (orig_enter, orig_exit)


def _nvtx_flags():
    flags = getattr(_nvtx_local, "flags", None)
    if flags is None:
        flags = _nvtx_local.flags = []
    return flags


def _patch_nvtx(torch):
    try:
        nvtx = torch.cuda.nvtx
    except Exception:
        return
    if getattr(nvtx, "_cprof_patched", False):
        return
    orig_push, orig_pop = nvtx.range_push, nvtx.range_pop
    push, pop, active, add_arg = _C.push, _C.pop, _C.active, _C.add_arg

    def range_push(msg):
        # torch's call first: where it raises (a CPU-only build) nothing is recorded
        out = orig_push(msg)
        recorded = bool(active())
        if recorded:
            push(str(msg))
            add_arg("nvtx", 1)  # as CUPTI-captured NVTX ranges are marked
        _nvtx_flags().append(recorded)
        return out

    def range_pop():
        out = orig_pop()
        flags = _nvtx_flags()
        if flags and flags.pop():
            try:
                pop()
            except _C.NoOpenRangeError:
                pass
        return out

    range_push.__doc__, range_pop.__doc__ = orig_push.__doc__, orig_pop.__doc__
    nvtx.range_push, nvtx.range_pop = range_push, range_pop
    nvtx._cprof_patched = True
    nvtx._cprof_original = (orig_push, orig_pop)


def patch_torch():
    """Installs the record_function and NVTX patches if torch is imported (idempotent)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if not _patched["record_function"]:
        _patch_record_function(torch)
        _patched["record_function"] = True
    if not _patched["nvtx"]:
        _patch_nvtx(torch)
        _patched["nvtx"] = True


def python_nvtx_installed():
    """True when torch.cuda.nvtx ranges are captured from Python; CUPTI's NVTX (MARKER)
    capture is then left off, or every range would appear twice."""
    patch_torch()
    return _patched["nvtx"] and sys.modules.get("torch") is not None


class _Installed:
    def __init__(self):
        self.parts = []
        self.ops = None  # the operator capture's note when it is off or unavailable

    def module_names(self):
        """Names given to module ranges so far (with_modules / record_shapes)."""
        names = set()
        for p in self.parts:
            resolver = getattr(p, "resolver", None)
            names.update(getattr(resolver, "names", ()))
        return names

    def regions_note(self):
        """The compiled-regions capture's metadata (cprof/_compiled.py), or None."""
        for p in self.parts:
            if hasattr(p, "note"):
                return p.note()
        return None

    def ops_note(self):
        """The operator capture's metadata (cprof/_ops.py), or None when not asked for."""
        for p in self.parts:
            if hasattr(p, "ops_note"):
                return p.ops_note()
        return self.ops

    def remove(self):
        parts, self.parts = self.parts, []
        for p in reversed(parts):
            try:
                p.remove()
            except Exception as err:  # removal must not lose the window's data
                warnings.warn(f"cprof: removing a capture hook failed: {err}", RuntimeWarning,
                              stacklevel=2)


class _Tracer:
    def __init__(self, c_calls, min_duration_us):
        from . import _pystack
        self._pystack = _pystack
        _pystack.start(c_calls=c_calls, min_duration_us=min_duration_us)

    def remove(self):
        self._pystack.stop()


_ops_warned = set()


def _warn_ops_once(note):
    """record_ops=True that records nothing says so (once per reason), not only in the trace's
    cprof.ops metadata. Without torch imported there is nothing to record: no warning."""
    note = note or {}
    reason = note.get("reason") or "unknown reason"
    if note.get("mode") == "off" or reason in _ops_warned:
        return
    _ops_warned.add(reason)
    warnings.warn(f"cprof: record_ops=True, but torch's operators are not recorded in this "
                  f"process: {reason}", RuntimeWarning, stacklevel=4)


def install(with_stack=False, with_modules=False, record_shapes=False, c_calls=True,
            min_duration_us=0.0, ops=False):
    """Installs the captures asked for; the window must be open. Returns a handle whose
    remove() takes them all away."""
    patch_torch()
    handle = _Installed()
    try:
        if ops:
            from . import _ops
            part, handle.ops = _ops.install()
            if part is not None:
                handle.parts.append(part)
            else:
                _warn_ops_once(handle.ops)
        if with_modules or record_shapes:
            if sys.modules.get("torch") is not None:
                from . import _modules
                # shapes are those of module calls: record_shapes needs the module hooks
                handle.parts.append(_modules.install(record_shapes=record_shapes))
        if with_stack:
            handle.parts.append(_Tracer(c_calls, min_duration_us))
        # after the tracer: on 3.11 both would want the profile hook, and the tracer wins.
        # With torch's operators captured, torch's own "Torch-Compiled Region" and
        # "CompiledFunction" ranges arrive with them: cprof's copies would only double them.
        from . import _compiled
        if not any(hasattr(p, "ops_note") for p in handle.parts):
            regions = _compiled.install(with_stack=with_stack)
            if regions is not None:
                handle.parts.append(regions)
    except BaseException:
        handle.remove()
        raise
    return handle


# ---- memory ----

def _cuda(torch):
    try:
        return torch is not None and torch.cuda.is_available()
    except Exception:
        return False


def _cuda_memory_wanted(prof):
    """cprof.profile follows torch.profiler: CUDA memory with the CUDA activity only.
    ProfilerContext follows its seed: MEM alone means the CUDA memory snapshot."""
    return "GPU" in prof.activities or getattr(prof, "_api", None) == "ProfilerContext"


def memory_begin(prof):
    """Starts CUDA memory history when the window tracks memory and torch has CUDA."""
    prof._memory_recording = False
    if not prof.profile_memory:
        return
    if not _cuda_memory_wanted(prof):
        return  # CPU-only memory, as torch.profiler(activities=[CPU], profile_memory=True)
    torch = sys.modules.get("torch")
    if not _cuda(torch):
        return
    try:
        torch.cuda.memory._record_memory_history(max_entries=100000)
        torch.cuda.reset_peak_memory_stats()
        prof._memory_recording = True
    except Exception as err:
        warnings.warn(f"cprof: CUDA memory history could not be started: {err}",
                      RuntimeWarning, stacklevel=3)


def memory_end(prof):
    """Ends the window's memory tracking. Returns None (memory not tracked) or a dict:
    summary (peak figures, always), snapshot and text (with CUDA)."""
    if not prof.profile_memory:
        return None
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    summary = {"cpu_peak_rss_bytes": peak_rss}
    out = {"summary": summary, "snapshot": None, "text": None}
    if not getattr(prof, "_memory_recording", False):
        summary["cuda"] = ("not tracked: CUDA is not among the activities"
                           if not _cuda_memory_wanted(prof)
                           else "not tracked: torch has no CUDA here or it is not in use")
        return out
    prof._memory_recording = False
    torch = sys.modules["torch"]
    try:
        out["snapshot"] = torch.cuda.memory._snapshot()
        summary["cuda_peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        summary["cuda_peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
        out["text"] = torch.cuda.memory_summary()
    except Exception as err:
        summary["cuda"] = f"snapshot failed: {err}"
        warnings.warn(f"cprof: the CUDA memory snapshot failed: {err}", RuntimeWarning,
                      stacklevel=3)
    finally:
        try:
            torch.cuda.memory._record_memory_history(enabled=None)
        except Exception:
            pass
    return out


def _atomic_write(path, data):
    tmp = f"{os.path.join(os.path.dirname(path) or '.', '.' + os.path.basename(path))}." \
          f"{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_memory_snapshot(memory, path):
    """Writes memory["snapshot"] as a pickle at path (for pytorch.org/memory_viz) and
    memory["text"] beside it as .txt. Returns the pickle's path."""
    _atomic_write(path, pickle.dumps(memory["snapshot"], protocol=pickle.HIGHEST_PROTOCOL))
    if memory.get("text"):
        stem = path[:-len(".pickle")] if path.endswith(".pickle") else path
        _atomic_write(stem + ".txt", memory["text"].encode())
    return path
