"""cprof's torch glue: what a window captures from the user's program besides cprof ranges.

- torch.profiler.record_function / torch.autograd.profiler.record_function ranges and
  torch.cuda.nvtx ranges become cprof ranges (user_annotation) while a window is open. The
  patches are installed at the first window and stay (they cost one C call outside windows),
  because a range entered under a patch must find the patch when it exits.
- with_stack / with_modules / record_shapes: the C tracer (py_tracer.c) and the C module hooks
  (py_hooks.c), installed only while a window is open (install() / handle.remove()).
- profile_memory with CUDA: torch.cuda.memory._record_memory_history during the window and a
  snapshot at its end (memory_begin / memory_end / write_memory_snapshot)."""
import errno
import os
import pickle
import resource
import struct
import sys
import threading
import warnings

from . import _C, _warn

_patched = {"record_function": False, "nvtx": False, "dist": False}
# one allocation event as csrc/mem_events.c packs it (cprof_mem_event): ts_ns, addr, bytes,
# total_allocated, total_reserved, tid, device_type, device_index, pad
MEM_EVENT = struct.Struct("=QQqqqIbbH")
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
    orig_on_future = getattr(rf, "_call_end_callbacks_on_future", None)
    if orig_on_future is None:
        return

    def _call_end_callbacks_on_future(self, fut):
        # torch ends the range when fut completes (DDP, RPC), not at the with block's exit:
        # so does cprof's, closed on the opening thread's stack from whichever thread runs
        # the future's callbacks
        token = self.__dict__.pop("_cprof_token", None)
        out = orig_on_future(self, fut)
        if token is not None:
            ident = threading.get_ident()

            def close(_done):
                try:
                    close_range(token, ident)
                except _C.CprofError:  # the window (or the thread) ended first
                    pass

            try:
                fut.add_done_callback(close)
            except Exception:  # noqa: BLE001 - not a torch Future: closed now, as before
                close(None)
        return out

    rf._call_end_callbacks_on_future = _call_end_callbacks_on_future


def _patch_dist(torch):
    """destroy_process_group notes the backend first (_dist.remember_backend): the program
    often ends its group before cprof writes the trace at exit."""
    dist = getattr(torch, "distributed", None)
    destroy = getattr(dist, "destroy_process_group", None)
    if destroy is None or getattr(destroy, "_cprof_patched", False):
        return
    from ._dist import remember_backend

    def destroy_process_group(*args, **kwargs):
        remember_backend()
        return destroy(*args, **kwargs)

    destroy_process_group.__wrapped__ = destroy
    destroy_process_group.__doc__ = destroy.__doc__
    destroy_process_group._cprof_patched = True
    dist.destroy_process_group = destroy_process_group


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
    _patch_nvtx_start_end_mark(nvtx)


# NVTX range_start/range_end ranges open in a window: NVTX id -> (opening thread, cprof token)
_nvtx_started = {}


def _patch_nvtx_start_end_mark(nvtx):
    """range_start / range_end (a range that may end on another thread, and need not nest) and
    mark (a point): CUPTI's NVTX capture is off while torch's NVTX calls are captured here, so
    these would be lost if not captured too."""
    orig_start = getattr(nvtx, "range_start", None)
    orig_end = getattr(nvtx, "range_end", None)
    orig_mark = getattr(nvtx, "mark", None)
    open_range, close_range, push, pop_point = (_C.open_range, _C.close_range, _C.push,
                                                _C.pop_point)
    active, add_arg, get_ident = _C.active, _C.add_arg, threading.get_ident

    if orig_start is not None and orig_end is not None:
        def range_start(msg):
            range_id = orig_start(msg)  # torch's call first: where it raises, nothing recorded
            if active():
                # detached: cprof.range / record_function exits pass over it (it need not nest)
                token = open_range(str(msg), _C.CAT_USER_ANNOTATION, True)
                add_arg("nvtx", 1)
                _nvtx_started[range_id] = (get_ident(), token)
            return range_id

        def range_end(range_id):
            out = orig_end(range_id)
            opened = _nvtx_started.pop(range_id, None)
            if opened is not None:
                try:
                    close_range(opened[1], opened[0])
                except _C.NoOpenRangeError:  # its window (or its thread) ended first
                    pass
            return out

        range_start.__doc__, range_end.__doc__ = orig_start.__doc__, orig_end.__doc__
        nvtx.range_start, nvtx.range_end = range_start, range_end
    if orig_mark is not None:
        def mark(msg):
            out = orig_mark(msg)
            if active():
                push(str(msg))
                add_arg("nvtx", 1)
                add_arg("nvtx mark", 1)
                pop_point()  # a range of no length
            return out

        mark.__doc__ = orig_mark.__doc__
        nvtx.mark = mark
    nvtx._cprof_original_start_end_mark = (orig_start, orig_end, orig_mark)


def nvtx_window_end():
    """After a window's stop (which truncated the NVTX ranges still open): their stack entries
    are taken off their threads and their ids forgotten, so a range_end later does nothing."""
    started = list(_nvtx_started.values())
    _nvtx_started.clear()
    for ident, token in started:
        try:
            _C.close_range(token, ident)
        except _C.NoOpenRangeError:  # its thread has ended
            pass


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
    if not _patched["dist"]:
        _patch_dist(torch)
        _patched["dist"] = True


def python_nvtx_installed():
    """True when torch.cuda.nvtx ranges are captured from Python; CUPTI's NVTX (MARKER)
    capture is then left off, or every range would appear twice."""
    patch_torch()
    return _patched["nvtx"] and sys.modules.get("torch") is not None


class _Installed:
    def __init__(self):
        self.parts = []
        self.ops = None  # the operator capture's note when it is off or unavailable
        self.async_why = "not installed"  # None when torch's async ranges are captured
        self.stack_why = None  # why with_stack could not start (another profiler's hook)
        self.regions_how = None  # compiled regions' metadata when cprof's capture is not on
        self.stack_too_deep = 0  # Python calls the tracer could not record: nested too deep
        # 3.11: (ident, native id, tracer stop ns) of threads where a sys.setprofile
        # replaced the tracer
        self.stack_replaced = []

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
        return self.regions_how

    def ops_note(self):
        """The operator capture's metadata (cprof/_ops.py), or None when not asked for."""
        note = self.ops
        for p in self.parts:
            if hasattr(p, "ops_note"):
                note = p.ops_note()
                break
        if note is not None:
            note = dict(note, async_ranges=self.async_why is None)
            if note.get("reason"):
                note["reason"] = late_torch(note["reason"])
            if self.async_why is not None and sys.modules.get("torch") is not None:
                note["async_ranges_reason"] = late_torch(self.async_why)
        return note

    def remove(self):
        # innermost first, each taken off the list once removed: a removal interrupted by
        # Ctrl-C leaves the rest listed, and the retry (cprof.profile._salvage) finishes them
        while self.parts:
            p = self.parts[-1]
            try:
                p.remove()
                counts = getattr(p, "counts", None) or {}
                self.stack_too_deep += counts.get("overflows", 0)
                self.stack_replaced += [(ident, tid, counts["stop_ns"])
                                        for ident, tid in counts.get("replaced") or ()]
            except Exception as err:  # removal must not lose the window's data
                warnings.warn(f"cprof: removing a capture hook failed: {err}", RuntimeWarning,
                              stacklevel=2)
            self.parts.pop()


# True under cprof run: torch's operators asked for are captured when the program imports
# torch (cprof/_cli_run.py _catch_up_ops), after the window opened
ops_at_torch_import = False


class _Tracer:
    def __init__(self, c_calls, min_duration_us, c_calls_as_ops=True):
        from . import _pystack
        self._pystack = _pystack
        _pystack.start(c_calls=c_calls, min_duration_us=min_duration_us,
                       c_calls_as_ops=c_calls_as_ops)

    def remove(self):
        self.counts = self._pystack.stop()


_ops_warned = set()


def _warn_ops_once(note):
    """record_ops=True that records nothing says so (once per reason), not only in the trace's
    cprof.ops metadata. Without torch imported there is nothing to record: no warning."""
    note = note or {}
    reason = note.get("reason") or "unknown reason"
    if note.get("mode") == "off" or reason in _ops_warned:
        return
    _ops_warned.add(reason)
    _warn.warn(f"cprof: record_ops=True, but torch's operators are not recorded in this "
               f"process: {reason}")


def _warn_once(text):
    if text not in _ops_warned:
        _ops_warned.add(text)
        _warn.warn(text)


def stack_modules(handle, with_modules, record_shapes):
    """with_stack without with_modules or record_shapes: module calls as torch's "nn.Module: "
    Python events (decision 113; the writer writes them as twins of the tracer's
    python_function records) unless CPROF_MODULE_EVENTS=0 turns those events off. Installed
    just before the tracer starts and listed before it, so it is removed after the tracer
    stops: neither putting nn.Module.__call__ in nor taking it out (each clears every
    subclass's type cache, ~100-400 us) is charged to the user's frame holding the `with` as
    self time (decision 168). Returns the part added to handle.parts, or None."""
    if (with_modules or record_shapes or os.environ.get("CPROF_MODULE_EVENTS") == "0"
            or sys.modules.get("torch") is None):
        return None
    from . import _modules
    if _modules._installed is not None:
        return None
    part = _modules.install(record_shapes=False)
    handle.parts.append(part)
    return part


def prewarm(with_stack=False, with_modules=False, record_shapes=False, ops=False):
    """The one-time work of a process's first window (attaching to libtorch, loading
    cprof._torch_ops, importing the capture modules: ~5 ms), done before a window opens:
    inside it, with_stack charged that time to the user's frame holding the `with` (a fake
    hot spot in the first window's key_averages and flame graphs). Called at every start();
    idempotent and cheap after the first. Failures are left for install() to report as it
    always has."""
    import importlib
    try:
        importlib.import_module("cprof._compiled")  # imported now, not in the window
        if with_stack:
            importlib.import_module("cprof._pystack")
        if sys.modules.get("torch") is None:
            return
        patch_torch()
        if with_modules or record_shapes or with_stack:
            importlib.import_module("cprof._modules")
        from . import _ops
        if ops and not _ops.disabled_by_env():  # CPROF_OPS=0 loads nothing of it
            _ops.attach()
            if _ops.capture_choice() != "itt":
                _ops.observer()
    except Exception:  # noqa: BLE001 - install() says what went wrong, in the window
        pass


def install(with_stack=False, with_modules=False, record_shapes=False, c_calls=True,
            min_duration_us=0.0, ops=False, ops_asked=True):
    """Installs the captures asked for; the window must be open. Returns a handle whose
    remove() takes them all away."""
    patch_torch()
    handle = _Installed()
    try:
        if ops:
            from . import _ops
            part, handle.ops = _ops.install(record_shapes=record_shapes)
            if part is not None:
                handle.parts.append(part)
                if part.shapes_note:
                    _warn_once(f"cprof: record_shapes=True, but torch's operators are recorded "
                               f"without their shapes: {part.shapes_note}")
            elif ops_asked:  # by default (not asked for), the trace's cprof.ops says why
                _warn_ops_once(handle.ops)
        from . import _ops
        part, handle.async_why = _ops.install_async()
        if part is not None:
            handle.parts.append(part)
        if with_modules or record_shapes:
            if sys.modules.get("torch") is not None:
                from . import _modules
                # shapes are those of module calls: record_shapes needs the module hooks
                handle.parts.append(_modules.install(record_shapes=record_shapes))
        if with_stack:
            try:
                # torch's operators captured as cpu_op: C calls are python_function, as
                # torch.profiler writes them (decision 124); else they are how torch's ops
                # show at all (torch._C._nn.linear as a cpu_op)
                # (or asked for, torch not imported yet, and cprof run's catch-up will capture
                # them at its import; elsewhere nothing would, and the C calls stay how
                # torch's ops show)
                ops_captured = (any(hasattr(p, "ops_note") for p in handle.parts)
                                or (ops and ops_at_torch_import
                                    and sys.modules.get("torch") is None))
                # the module capture for "nn.Module: " events goes in before the tracer runs
                # (decision 168): installing it clears every subclass's type cache (~100-400
                # us), which under the tracer was self time of the user's frame holding the
                # `with`
                modules = stack_modules(handle, with_modules, record_shapes)
                try:
                    handle.parts.append(_Tracer(c_calls, min_duration_us,
                                                c_calls_as_ops=not ops_captured))
                except _C.CprofError:
                    if modules is not None:  # no tracer, no twins for its events
                        handle.parts.remove(modules)
                        modules.remove()
                    raise
            except _C.CprofError as err:
                # another profiler holds the hook (cProfile on 3.11): the window records the
                # rest, and says so in the trace and once here, rather than failing the program
                handle.stack_why = str(err)
                _warn_once(f"cprof: with_stack is not recorded in this window: {err}")
        # after the tracer: on 3.11 both would want the profile hook, and the tracer wins.
        # With torch's operators captured, torch's own "Torch-Compiled Region" and
        # "CompiledFunction" ranges arrive with them: cprof's copies would only double them.
        from . import _compiled
        if any(hasattr(p, "ops_note") for p in handle.parts):
            handle.regions_how = {"mode": "torch operators",
                                  "reason": "torch's own region ranges come with its operators"}
        else:
            regions = _compiled.install(with_stack=with_stack)
            if regions is not None:
                handle.parts.append(regions)
            elif sys.modules.get("torch") is not None:  # a trace without regions says why
                handle.regions_how = {"mode": "off", "reason": "CPROF_COMPILED_REGIONS=0"}
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


# the CPU memory track: sampled every MEMORY_INTERVAL_US (CPROF_MEMORY_INTERVAL_US); a full
# array of MEMORY_SAMPLES_CAP is halved (each pair keeps its larger sample) at twice the interval
MEMORY_INTERVAL_US = 1000.0
MEMORY_SAMPLES_CAP = 65536


def memory_interval_us():
    raw = os.environ.get("CPROF_MEMORY_INTERVAL_US")
    if raw is None or raw.strip() == "":
        return MEMORY_INTERVAL_US
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 10.0 <= value <= 60e6:
        raise ValueError(f"cprof: CPROF_MEMORY_INTERVAL_US={raw!r}: give the CPU memory "
                         "sampling interval in microseconds, 10 to 60000000 (default 1000)")
    return value


def _sampler_begin(prof):
    """The CPU memory counter track: a C thread samples the resident set and malloc's bytes in
    use (csrc/mem_sampler.c) until memory_end."""
    prof._mem_sampling = False
    interval = memory_interval_us()  # a bad setting raises before anything starts
    if _C.mem_sampler_running():  # left by a window that was never stopped (lost profiler)
        _C.mem_sampler_stop()
    try:
        _C.mem_sampler_start(interval, MEMORY_SAMPLES_CAP)
        prof._mem_sampling = True
    except _C.CprofError as err:  # no /proc (not Linux?) or no thread: the rest still works
        _warn.warn(f"cprof: the CPU memory track is not recorded: {err}")


def _sampler_end(prof, summary):
    """Stops the sampler; returns (samples bytes, has_heap) for the trace, or (None, False)."""
    if not getattr(prof, "_mem_sampling", False):
        return None, False
    prof._mem_sampling = False
    if not _C.mem_sampler_running():  # forked child: the parent's sampler is not ours
        return None, False
    data, info = _C.mem_sampler_stop()
    summary["cpu_peak_rss_window_bytes"] = info["peak_rss_bytes"]
    if info["has_heap"]:
        summary["cpu_peak_malloc_bytes"] = info["peak_heap_bytes"]
    summary["cpu_memory_samples"] = info["samples"]
    summary["cpu_memory_interval_us"] = info["interval_us"]
    return data, info["has_heap"]


# allocation events ("[memory]") a window keeps at most (48 bytes each); the rest are counted
MEMORY_EVENTS_CAP = 4_000_000


# why a capture that needs torch is off at the window's start; said as it is at the end only
# if torch is still not imported (late_torch() otherwise)
NO_TORCH = "torch is not imported"


def late_torch(why):
    """why, or what it has become when torch was imported after the window opened."""
    if why == NO_TORCH and sys.modules.get("torch") is not None:
        return "torch was imported after the window opened"
    return why


def _events_begin(prof):
    """torch's allocation reports ("[memory]" events, as torch.profiler's profile_memory):
    cprof's reporter in the thread's profiler-state slot (csrc/torch_ops.cpp) feeds
    csrc/mem_events.c until memory_end."""
    prof._mem_events = None
    if sys.modules.get("torch") is None:
        prof._mem_events_why = NO_TORCH
        return
    from . import _ops
    if _C.mem_events_active():  # left by a window that was never stopped (lost profiler)
        _C.mem_events_stop()
    _C.mem_events_start(MEMORY_EVENTS_CAP)
    why = _ops.state_push(_ops.MEMORY)
    if why is not None:
        _C.mem_events_stop()
    prof._mem_events = why is None
    prof._mem_events_why = why


def _events_end(prof, summary):
    """Stops the allocation events; returns their bytes for the trace, or None."""
    if not getattr(prof, "_mem_events", None):
        why = getattr(prof, "_mem_events_why", None)
        if why:
            summary["allocation_events"] = f"not recorded: {late_torch(why)}"
        return None
    prof._mem_events = None
    from . import _ops
    _ops.state_pop(_ops.MEMORY)
    if not _C.mem_events_active():  # forked child
        return None
    data, dropped = _C.mem_events_stop()
    n = len(data) // MEM_EVENT.size
    summary["allocation_events"] = n
    if dropped:
        summary["allocation_events_dropped"] = dropped
        _warn.warn(f"cprof: {dropped} allocation events of this window were not recorded "
                   f"(more than {MEMORY_EVENTS_CAP:,}); the trace keeps the first ones")
    peaks = {}
    for ev in MEM_EVENT.iter_unpack(data):
        key = "cpu" if ev[6] == 0 else f"cuda:{ev[7]}" if ev[6] == 1 else f"device{ev[6]}"
        peaks[key] = max(peaks.get(key, 0), ev[3])
    for key, peak in peaks.items():  # exact: the allocator's own total after each report
        summary[f"{key.replace(':', '')}_peak_allocated_bytes_reported"] = peak
    return data


def memory_begin(prof):
    """Starts the CPU memory track, torch's allocation events, and CUDA memory history when
    the window tracks memory and torch has CUDA."""
    prof._memory_recording = False
    if not prof.profile_memory:
        return
    # the allocation reporter first: the sampler's first sample is taken as late as can be,
    # just before the active window's first ProfilerStep opens
    _events_begin(prof)
    try:
        _sampler_begin(prof)
    except BaseException:  # a bad CPROF_MEMORY_INTERVAL_US: take the reporter back out
        _events_end(prof, {})
        raise
    if not _cuda_memory_wanted(prof):
        return  # CPU-only memory, as torch.profiler(activities=[CPU], profile_memory=True)
    torch = sys.modules.get("torch")
    if torch is None and getattr(prof, "_cuda_memory_later", False):
        return  # cprof run: started when the program initialises CUDA (cuda_history_later)
    if not _cuda(torch):
        if "GPU" not in prof.activities and not getattr(prof, "_said_no_cuda_memory", False):
            # (with GPU asked for, GpuUnavailableWarning has said it; verbose=False must not
            # leave the missing snapshot to the trace's metadata alone)
            prof._said_no_cuda_memory = True
            why = ("torch has no CUDA here" if torch is not None else
                   "torch was not imported when the window opened (under cprof run, --delay "
                   "lets the program import it first)")
            _warn.warn(f"cprof: MEM asked for a CUDA memory snapshot, but {why}: none will be "
                       "written; the trace tracks CPU memory only")
        return
    _cuda_history_start(prof, torch)


def _history_enabled(torch):
    """Whether torch's CUDA caching allocator records memory history now (the program's own
    _record_memory_history, or inductor's); None where torch cannot say."""
    enabled = getattr(torch._C, "_cuda_isHistoryEnabled", None)
    try:
        return None if enabled is None else bool(enabled())
    except Exception:
        return None


def _cuda_history_start(prof, torch):
    """Starts CUDA memory history for the window, unless the program records it already: then
    its settings (max_entries, stacks) and its history are left as they are, and the window's
    snapshot is taken from them (the end turns off only what the start turned on: turning the
    history off clears it, which would lose what the program recorded for its own
    _dump_snapshot)."""
    try:
        prof._memory_history_own = not _history_enabled(torch)
        if prof._memory_history_own:
            torch.cuda.memory._record_memory_history(max_entries=100000)
        torch.cuda.reset_peak_memory_stats()
        prof._memory_recording = True
    except Exception as err:
        _warn.warn(f"cprof: CUDA memory history could not be started: {err}")


def cuda_history_later(prof, torch):
    """cprof run: the program imported torch after the window opened. CUDA memory history
    (the snapshot MEM asks for) starts when the program first initialises CUDA, through
    torch.cuda's queue of calls run at its lazy init, if the window is still open then (asking
    torch.cuda.is_available() inside `import torch` would fix the visible devices before the
    program sets them)."""
    if not (prof.profile_memory and _cuda_memory_wanted(prof)) or prof._memory_recording:
        return
    lazy = getattr(getattr(torch, "cuda", None), "_lazy_call", None)
    if lazy is None:
        return
    prof._cuda_history_pending = True

    def start():
        if getattr(prof, "_cuda_history_pending", False):  # the window is still open
            prof._cuda_history_pending = False
            try:
                _cuda_history_start(prof, torch)
            except BaseException:  # noqa: BLE001 - never break the program's CUDA init
                pass

    try:
        lazy(start)
    except Exception as err:
        prof._cuda_history_pending = False
        _warn.warn(f"cprof: CUDA memory history could not be arranged: {err}")


def memory_end(prof):
    """Ends the window's memory tracking. Returns None (memory not tracked) or a dict:
    summary (peak figures, always), samples and samples_heap (the CPU memory track, for the
    trace), snapshot and text (with CUDA). cpu_peak_rss_bytes is the process's peak since it
    began (getrusage); cpu_peak_rss_window_bytes the window's, sampled."""
    if not prof.profile_memory:
        return None
    prof._cuda_history_pending = False  # a CUDA init from now on starts nothing
    summary = {}
    out = {"summary": summary, "snapshot": None, "text": None}
    out["samples"], out["samples_heap"] = _sampler_end(prof, summary)
    out["events"] = _events_end(prof, summary)
    # the kernel's high-water mark lags the live counters /proc/self/statm reads (it is
    # brought up to date only now and then), so the window's sampled peak can exceed it:
    # the process's peak is at least the window's
    summary["cpu_peak_rss_bytes"] = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        summary.get("cpu_peak_rss_window_bytes", 0))
    if not getattr(prof, "_memory_recording", False):
        summary["cuda"] = ("not tracked: CUDA is not among the activities"
                           if not _cuda_memory_wanted(prof)
                           else "not tracked: torch has no CUDA here or it is not in use")
        return out
    prof._memory_recording = False
    # the program's window ended here: the snapshot below is cprof's (Window.stop's end_ns)
    out["end_ns"] = _C.now_ns()
    torch = sys.modules["torch"]
    own = getattr(prof, "_memory_history_own", True)
    if not own:
        summary["cuda_history"] = ("the program's own: it recorded CUDA memory history before "
                                   "the window, so the snapshot holds its settings and its "
                                   "history from before the window too; left on")
    try:
        out["snapshot"] = torch.cuda.memory._snapshot()
        summary["cuda_peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        summary["cuda_peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
        out["text"] = torch.cuda.memory_summary()
    except Exception as err:
        summary["cuda"] = f"snapshot failed: {err}"
        _warn.warn(f"cprof: the CUDA memory snapshot failed: {err}")
    finally:
        try:
            if own:  # the program's own recording stays on, with its history
                torch.cuda.memory._record_memory_history(enabled=None)
        except Exception:
            pass
    return out


def create_temp(path):
    """A new hidden temporary file beside path (.{name}.{pid}.tmp, else .{name}.{pid}.N.tmp):
    created exclusively (O_EXCL, as csrc/sink.c's), so a file or symlink found at the name
    (planted in a shared directory, or another thread's) is never written through. Of a long
    name only the first 200 bytes are used, as sink.c does: the temporary name must fit in
    NAME_MAX (255 bytes) too, or a legal name of 230-255 bytes could not be written. Returns
    (tmp, fd)."""
    name = os.fsencode(os.path.basename(path))
    if len(name) > 200:
        cut = 200
        while cut and name[cut] & 0xC0 == 0x80:  # not inside a UTF-8 character
            cut -= 1
        name = name[:cut]
    stem = os.path.join(os.path.dirname(path) or ".", "." + os.fsdecode(name))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for i in range(1000):
        tmp = f"{stem}.{os.getpid()}.tmp" if i == 0 else f"{stem}.{os.getpid()}.{i}.tmp"
        try:
            return tmp, os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, f"no free temporary name beside it ({stem}.{os.getpid()}.N.tmp "
                  "all exist)")


# what path to retry with, by the error: "a disk with room" was the advice for a directory too
_RETRY_WHERE = {errno.EISDIR: "a file's path (this one is a directory)",
                errno.ENOSPC: "a path on a disk with room",
                errno.EDQUOT: "a path on a disk with room",
                errno.EFBIG: "a path on a disk with room",
                errno.EACCES: "a path you can write to", errno.EPERM: "a path you can write to",
                errno.EROFS: "a path you can write to",
                errno.ENOENT: "a path in a directory that exists",
                errno.ENOTDIR: "a path in a directory that exists",
                errno.ENAMETOOLONG: "a shorter path"}


def retry_advice(retry, err_no):
    """retry (what the caller can do after a failed write) with "{where}" in it made the kind
    of path to try, by the error's errno."""
    return retry.replace("{where}", _RETRY_WHERE.get(err_no, "another path"))


def atomic_write(path, data, what, retry=None):
    """Writes bytes data to path whole or not at all: into a hidden temporary file of its
    own in the same directory (create_temp), renamed over path when complete. On any failure
    the temporary file is removed (on a full disk it would hold the rest of the disk) and an
    OSError becomes cprof.TraceWriteError naming what and path, with retry (what the caller
    can do; "{where}" in it becomes the kind of path to try, by the error) after it;
    interrupts pass unchanged."""
    tmp = None
    try:
        tmp, fd = create_temp(path)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        tmp = None  # renamed: the name may be another writer's from now on
    except BaseException as err:
        if tmp is not None:  # ours (created above): never a file found there
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if not isinstance(err, OSError) or isinstance(err, _C.TraceWriteError):
            raise
        why = err.strerror or str(err)
        if retry:
            retry = retry_advice(retry, err.errno)
        raise _C.TraceWriteError(
            err.errno or 5, f"could not write the {what} {path}: {why}"
            + (f"; {retry}" if retry else "")) from None


def write_memory_snapshot(memory, path, exclusive=False, retry=None):
    """Writes memory["snapshot"] as a pickle at path (for pytorch.org/memory_viz) and
    memory["text"] beside it as .txt. Returns the pickle's path. exclusive: neither file may
    exist (FileExistsError, nothing written): both names are claimed (O_EXCL) before either
    is written, so two writers never replace each other's files. A write that fails raises
    cprof.TraceWriteError naming the file (retry: the advice after it) and leaves no
    temporary file, and with exclusive no file of this call (the pair is whole or absent)."""
    stem = path[:-len(".pickle")] if path.endswith(".pickle") else path
    txt = stem + ".txt" if memory.get("text") else None
    claimed = []
    try:
        if exclusive:
            for p in (path, txt):
                if p is not None:
                    try:
                        os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
                    except FileExistsError:
                        raise
                    except OSError as err:
                        raise _C.TraceWriteError(
                            err.errno or 5, f"could not write the memory snapshot {p}: "
                            f"{err.strerror or err}" + (f"; {retry}" if retry else "")) from None
                    claimed.append(p)
        atomic_write(path, pickle.dumps(memory["snapshot"], protocol=pickle.HIGHEST_PROTOCOL),
                     "memory snapshot", retry)
        if txt is not None:
            atomic_write(txt, memory["text"].encode(), "memory summary", retry)
    except BaseException as err:
        failed = isinstance(err, OSError) and not isinstance(err, FileExistsError)
        for p in claimed:  # an empty claim is not left behind; a written pickle is kept
            try:  # after an interrupt, not after a failed write (the pair is written again)
                if failed or os.path.getsize(p) == 0:
                    os.unlink(p)
            except OSError:
                pass
        raise
    return path
