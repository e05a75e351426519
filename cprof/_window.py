"""One profiling window: opens and closes the C event store and writes what it collected.

This is the engine under ProfilerContext (and later cprof.profile): it validates nothing the
user typed (callers do) and keeps the collected snapshot until it has been written, so a failed
write loses nothing."""
import errno
import json
import math
import os
import socket
import stat
import sys
import tempfile
import threading
import time
from collections import namedtuple

from . import _C, _glue, _graphs, _lifecycle, _ops, _warn
from ._dist import rank_info
from ._lifecycle import debug

WriteResult = namedtuple("WriteResult", "path events bytes seconds")

DEFAULT_BUFFER_MB = 256


def _thread_names():
    return {t.ident: t.name for t in threading.enumerate() if t.ident is not None}


def is_stream(path):
    """True for an existing device or FIFO (/dev/null, /dev/full): the trace is written into
    it, so its directory need not be writable and its name is not avoided."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def module_ranges(config):
    """Whether a window's module calls are user_annotation ranges named by path (with_modules,
    and record_shapes, whose shapes they carry), or only torch's "nn.Module: <path>" Python
    events (with_stack alone, as torch.profiler writes module calls then). Module hooks
    installed by hand (cprof._modules.install) record ranges."""
    return bool(config.get("with_modules") or config.get("record_shapes")
                or not config.get("with_stack"))


def _dist_members():
    """distributedInfo's members beside backend, rank and world size (torch's pg_count,
    pg_config), as JSON object members, or None."""
    from ._dist import group_info
    info = group_info()
    if not info:
        return None
    try:
        text = json.dumps(clean_text(info), default=str)
    except (TypeError, ValueError):
        return None
    return text[1:-1] or None


def _memory_mib():
    """This machine's physical memory in MiB (None where the system does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    except (ValueError, OSError, AttributeError):
        return None


# the words a YAML file, a command line or the environment leaves for a flag
TRUE_WORDS = frozenset({"1", "true", "yes", "on", "y", "t"})
FALSE_WORDS = frozenset({"0", "false", "no", "off", "n", "f", "none", ""})


def is_settings(obj):
    """Whether obj holds settings as attributes (an argparse namespace, a dataclass, a
    namedtuple, a config object). A str, number or list does not: getattr finds none of the
    names on it, so every setting would silently take its default."""
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return True
    return not isinstance(obj, (str, bytes, bytearray, int, float, complex, list, tuple, set,
                                frozenset)) and (hasattr(obj, "__dict__") or
                                                 hasattr(obj, "__slots__"))


def is_flag(value):
    """True for what a bool argument can be: a bool, an int, numpy's bool_, None (off)."""
    return (value is None or isinstance(value, (bool, int))
            or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool")))


def flag(value, who, arg):
    """A bool argument (is_flag) as a bool; anything else (a "false" string from a YAML file or
    the environment, which bool() would take as true) is a TypeError naming who and arg."""
    if value is True or value is False:  # the usual case first: seven of these per context
        return value
    if is_flag(value):
        return bool(value)
    raise TypeError(f"{who}: {arg} takes a bool, got {value!r}; parse it first (a string such "
                    "as 'false' would count as true)")


def _positive_mib(mb, who, arg, what):
    """None, or mb as a finite positive float; ValueError naming who, arg and what it caps."""
    if mb is None:
        return None
    if isinstance(mb, (str, bytes, bool)):
        raise ValueError(f"{who}: {arg} must be a number of MiB, got {mb!r}")
    try:
        mb = float(mb)
    except (TypeError, ValueError):
        raise ValueError(f"{who}: {arg} must be a number of MiB, got {mb!r}") from None
    if not (mb > 0 and math.isfinite(mb)):
        raise ValueError(f"{who}: {arg} must be a finite positive number of MiB ({what}), "
                         f"got {mb!r}")
    return mb


def write_target(path):
    """Where a write to path goes: a symlink's target (replaced, the link kept), else path (a
    device or FIFO is written into; a regular file is replaced by a renamed temporary)."""
    return os.path.realpath(path) if os.path.islink(path) and not is_stream(path) else path


def check_buffer_size_mb(mb, who):
    """None, or a finite positive number of MiB for the CPU range buffers' cap (ValueError
    naming who otherwise). A cap above the machine's memory is allowed: it is only a cap."""
    mb = _positive_mib(mb, who, "buffer_size_mb", "the cap of the CPU range buffers")
    chunk = _C.memory()["chunk_bytes"]
    if mb is not None and mb * (1 << 20) < chunk:
        # said exactly: a chunk is 64 KiB of ranges plus its header, so 0.0625 (64 KiB) is
        # just short of one, and a rounded size read as equal to the one given
        least = math.ceil(chunk / (1 << 20) * 1e5) / 1e5
        raise ValueError(f"{who}: buffer_size_mb={mb:g} is less than one buffer chunk "
                         f"({chunk:,} bytes = {chunk / (1 << 20):.7f} MiB: 64 KiB of ranges "
                         f"and its header); pass at least {least:g}, or None for the default "
                         "cap (256 MiB)")
    return mb


def check_gpu_buffer_mb(mb, who, arg="gpu_buffer_mb"):
    """None, or a positive number of MiB no larger than the machine's memory (CUPTI's buffer
    pool is reserved whole when a GPU window opens); ValueError naming who otherwise."""
    mb = _positive_mib(mb, who, arg, "CUPTI's buffer pool; default 128")
    if mb is None:
        return None
    total = _memory_mib()
    if total is not None and mb > total:
        raise ValueError(f"{who}: {arg}={mb:g} is more than this machine's memory "
                         f"({total:.0f} MiB); CUPTI's buffer pool is reserved whole when a GPU "
                         "window opens, so ask for less (default 128)")
    return mb


def env_gpu_buffer_mb():
    """$CPROF_GPU_BUFFER_MB as MiB (None: unset or empty); a ValueError saying what is wrong.
    Checked when a profiler is made, and read again when its GPU window opens."""
    env = os.environ.get("CPROF_GPU_BUFFER_MB") or None
    try:  # text from the environment: a number of MiB (the argument itself may not be)
        env = float(env) if env is not None else None
    except ValueError:
        raise ValueError(f"cprof: CPROF_GPU_BUFFER_MB must be a number of MiB, got {env!r} "
                         "(unset it for the default, 128)") from None
    return check_gpu_buffer_mb(env, "cprof", "CPROF_GPU_BUFFER_MB")


def _dangling_link(path):
    """The deepest of path and its parents that is a symbolic link to nothing, or None."""
    p = os.path.abspath(path)
    while not (os.path.islink(p) and not os.path.exists(p)):
        parent = os.path.dirname(p)
        if parent == p:
            return None
        p = parent
    return p


def check_output_dir(path, fix="pass another output_dir or set CPROF_PROFILER_DIR"):
    """Creates path if needed and checks a file can be created in it; raises a clear error
    ending with fix (what the caller's user can change)."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        if os.path.exists(path) and not os.path.isdir(path):
            raise _C.TraceWriteError(
                20, f"cprof: the output directory {path!r} is a file, not a directory; {fix}"
            ) from None
        link = _dangling_link(path)
        if link:  # makedirs says "File exists" of it, or "No such file" of a path under it
            raise _C.TraceWriteError(
                errno.ENOENT, f"cprof: the output directory {path!r} cannot be created: "
                f"{link!r} is a symbolic link to {os.readlink(link)!r}, which does not exist; "
                f"create that directory, or {fix}") from None
        raise _C.TraceWriteError(
            exc.errno,
            f"cprof: the output directory {path!r} cannot be created ({exc.strerror}); {fix}",
        ) from None
    if not os.path.isdir(path):
        raise _C.TraceWriteError(
            20, f"cprof: the output directory {path!r} is a file, not a directory; {fix}"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise _C.TraceWriteError(
            13, f"cprof: the output directory {path!r} is not writable; {fix}",
        )
    # os.access answers from the mode bits, and root passes them where no file can be made
    # (/proc, /sys, a read-only mount): the trace would be lost only at the window's end
    try:
        try:
            # an unnamed file (Linux O_TMPFILE): nothing is left in the directory whatever
            # interrupts this (a Ctrl-C left ".cprof-probe-*" files behind between create and
            # unlink)
            os.close(os.open(path, os.O_TMPFILE | os.O_WRONLY, 0o600))
            return
        except (AttributeError, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EROFS,
                                                          errno.ENOSPC, errno.EDQUOT):
                raise
        fd, probe = tempfile.mkstemp(prefix=".cprof-probe-", dir=path)  # no O_TMPFILE there
    except OSError as exc:
        raise _C.TraceWriteError(
            exc.errno or 13,
            f"cprof: no file can be created in the output directory {path!r} "
            f"({exc.strerror}); {fix}",
        ) from None
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass



def clean_text(obj):
    """obj with every string made valid UTF-8, for the trace's JSON: a program started with a
    non-UTF-8 argument has it in sys.argv as surrogate escapes, which JSON cannot carry. Bytes
    that came in as surrogate escapes become U+FFFD each; other lone surrogates too."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
            return obj
        except UnicodeEncodeError:
            return "".join(c if not 0xD800 <= ord(c) <= 0xDFFF else "\ufffd" for c in obj)
    if isinstance(obj, dict):
        return {clean_text(k) if isinstance(k, str) else k: clean_text(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_text(v) for v in obj]
    return obj

_open = None  # the Window open in this process (one at a time), for torch_profiler_starts
# Set by `cprof run` (cprof/_cli_run.py) while it profiles a program: called when a window is
# about to open while one is open, so that cprof run's own window gives way to the program's
# ProfilerContext / cprof.profile instead of failing the program (decision 178).
yield_to_program = None


class Window:
    """Start, stop, write. One window at a time per process (the C store enforces it)."""

    def __init__(self, config, buffer_mb=None, gpu=False, memory=False, strict=True, nvtx=True,
                 gpu_buffer_mb=None):
        self.config = dict(config)
        self.buffer_mb = DEFAULT_BUFFER_MB if buffer_mb is None else buffer_mb
        self.gpu_buffer_mb = gpu_buffer_mb
        self.gpu_failure = None  # why GPU collection could not start (it will not next time)
        self.gpu_refused = None  # why CUPTI refused this window (the next one asks again)
        self.gpu = gpu
        self.memory = memory
        self.strict = strict
        self.nvtx = nvtx
        self.gpu_snapshot = None
        self.mem_samples = None  # the CPU memory track (profile_memory): mem_sampler_stop bytes
        self.mem_heap = False
        self.mem_events = None  # torch's allocation reports (profile_memory): mem_events_stop bytes
        self.notes = {}
        # one GPU end / restart at a time (the window's thread, torch.profiler starting on
        # another): a claim taken under _turn_lock, the C calls made outside it (decision 183)
        self._turn_lock = threading.Lock()
        self._gpu_busy = None  # threading.Event of the thread whose turn it is, if any
        self._stack_stopped = {}  # native id -> when the tracer stopped (stack_replaced)
        self.dropped_extra = {}  # losses counted in Python, added to the metadata's "dropped"
        self.snapshot = None
        # _results' events of this window, built on first use (events(), key_averages()): every
        # call gives the same objects, as torch's function_events (ids counted from first_id)
        self.results = None  # (first_id, (everything, cpu, gpu), EventList of everything)
        self.start_time = None
        self.partial = False
        self.end_reason = None
        self.pid = None  # the process that opened it: elsewhere (a forked child) it is not ours
        self.names_refused_at_start = 0  # _C.names_refused() when it opened
        # toggle_collection_dynamic: CPU collection off; CUDA off since (cprof clock ns, 0 =
        # the window's start) and the closed intervals it was off, [(off_ns, on_ns)]
        self.cpu_off = False
        self.cuda_off_since = None
        self.cuda_off = []
        self.toggles = []  # what was toggled when, for the trace's metadata
        self.off_at_start = []

    def foreign(self, what):
        """True (with a debug note) in a process other than the one that opened the window: a
        child forked inside it, where stop / write must do nothing (the child's store forgot
        the window at fork, and the files are the parent's to write)."""
        if self.pid is None or self.pid == os.getpid():
            return False
        debug("cprof: %s of a window opened by process %d ignored in process %d (a forked "
              "child)", what, self.pid, os.getpid())
        return True

    def start(self):
        # twice at most: another thread's window may open between the check and _C.start
        # (cprof run's --delay timer or a capture hook as the program opens its own): then
        # cprof run's gives way as it would have at the check (decision 178)
        for attempt in (0, 1):
            if _C.active() and yield_to_program is not None:
                yield_to_program()  # cprof run's window closes, if it is the open one
            if _C.active():
                raise self._already_open()
            _ops.release_env()
            try:
                _C.set_buffer_cap(int(self.buffer_mb * (1 << 20)))  # this window's (decision 137)
                self.names_refused_at_start = _C.names_refused()
                try:
                    _C.start(cpu_on=not self.cpu_off)  # (a Ctrl-C may be raised as it returns)
                except _C.WindowStateError:
                    raise
                except BaseException:
                    self._close_failed_start()
                    raise
            except _C.WindowStateError:
                # another thread's window opened since the check: the store is that window's,
                # not this start's to close (closing it lost that window's data, and its own
                # stop then raised "no cprof window is open")
                if attempt or yield_to_program is None:
                    raise self._already_open() from None
                continue
            break
        global _open
        try:
            self._set_up()
            _open = self
        except BaseException:
            self._close_failed_start()
            raise

    @staticmethod
    def _already_open():
        return _C.WindowStateError(
            "a cprof window is already open in this process; close it (exit its "
            "ProfilerContext / call stop()) before opening another; if nothing can close "
            "it (a Ctrl-C landed on its with block's exit), cprof.end_open_window() ends it "
            "and writes its trace, marked partial")

    @staticmethod
    def _close_failed_start():
        """Whatever raised once this start opened the store (a Ctrl-C included): the window
        it opened is closed, so a later one can open; it holds nothing of value yet."""
        if _C.gpu_active():
            try:
                _C.gpu_stop(host_stop_ns=_C.now_ns(), toggled_off=[])
            except _C.CprofError:
                pass
        if _C.active():
            _C.stop().close()

    def _set_up(self):
        self.pid = os.getpid()
        self.start_time = time.time()
        self._note_off_at_start()
        if self.gpu:
            # before CUPTI is asked: torch.profiler's entry points, patched, say when it takes
            # CUPTI from this window, and whether a session runs on another thread
            _ops.patch_torch_profiler()
            _graphs.install_loaded()  # before this window ever synchronizes CUDA
            try:
                _C.gpu_start(memory=self.memory, nvtx=self.nvtx, share=_kineto_idle(),
                             pool_bytes=self._pool_bytes())
            except _C.CuptiBusyError as err:
                if self.strict:
                    raise  # start closes the window
                self.gpu = False
                self.notes["gpu_unavailable"] = str(err)
                _warn.warn(f"{err} -- recording CPU activity only (strict=False)")
            except _C.CprofError as err:
                self._gpu_refused(err)
            except MemoryError as err:
                # the buffer pool could not be had (start closes the window, so a later one
                # can open): say what to lower
                raise MemoryError(f"{err}; ask for a smaller CUPTI buffer pool (gpu_buffer_mb "
                                  "or CPROF_GPU_BUFFER_MB; default 128)") from None
            else:
                if self.nvtx:
                    _set_nvtx_injection()
                # the window's span starts once CUPTI collects (enabling it takes ms), not
                # before: the report's window and utilisation would count that time
                _C.mark_start()

    def _gpu_refused(self, err):
        """CUPTI refused this window (decision 147). No GPU, no driver, no permission
        (GpuUnavailableError): the same fallback as a machine without CUDA; the profiler warns
        once and stops asking in later windows (gpu_failure). Any other CUPTI error
        (CUPTI_ERROR_UNKNOWN, ...) says nothing of the next window: this one records CPU only,
        the profiler warns, later windows ask again (gpu_refused)."""
        self.gpu = False
        self.notes["gpu_unavailable"] = str(err)
        if isinstance(err, _C.GpuUnavailableError):
            self.gpu_failure = str(err)
        else:
            self.gpu_refused = str(err)

    def _pool_bytes(self):
        """CUPTI's buffer pool cap: gpu_buffer_mb, else CPROF_GPU_BUFFER_MB, else the C
        default (128 MiB); at least two 64 KiB buffers (a cap under two 8 MiB buffers makes
        them smaller: the pool never holds more than asked)."""
        mb = self.gpu_buffer_mb
        if mb is None:
            mb = env_gpu_buffer_mb()
        return 0 if mb is None else max(int(mb * (1 << 20)), 128 << 10)

    def restart(self):
        """Discards what the window collected so far (a schedule's warmup) and goes on
        collecting: the CPU store and CUPTI are closed and reopened."""
        if self.foreign("restart"):
            return
        self._gpu_turn()
        try:
            self._restart()
        finally:
            self._gpu_turn_done()

    def _restart(self):
        gpu_on = self.gpu and _C.gpu_active()
        if gpu_on:
            _sync_cuda()
            try:
                _C.gpu_stop().close()
            except _C.CprofError:
                pass
        elif self.gpu_snapshot is not None:  # ended when torch.profiler took CUPTI: warmup's
            self.gpu_snapshot.close()
            self.gpu_snapshot = None
            self.notes.pop("gpu", None)
        _C.stop().close()
        _C.start(cpu_on=not self.cpu_off)
        self.start_time = time.time()
        self.cuda_off = []
        self.toggles = []
        self._note_off_at_start()
        if gpu_on:
            try:
                _C.gpu_start(memory=self.memory, nvtx=self.nvtx, share=_kineto_idle(),
                             pool_bytes=self._pool_bytes())
                _C.mark_start()  # as at a start: the span leaves CUPTI's enabling out
            except _C.CprofError as err:
                # as at a start, a held CUPTI included (it was ours a moment ago: nothing to
                # raise mid-step for); the profiler warns (decision 147)
                self._gpu_refused(err)
            except MemoryError as err:
                self.gpu = False
                self.notes["gpu_unavailable"] = str(err)
                _warn.warn(f"cprof: GPU collection could not be restarted after warmup: "
                           f"{str(err).removeprefix('cprof: ')}; ask for a smaller CUPTI "
                           "buffer pool (gpu_buffer_mb or CPROF_GPU_BUFFER_MB; default 128) -- "
                           "recording CPU activity only")

    def _note_off_at_start(self):
        if self.cuda_off_since is not None:
            self.cuda_off_since = 0  # off from the window's start
        self.off_at_start = [a for a, off in (("CPU", self.cpu_off),
                                              ("CUDA", self.cuda_off_since is not None)) if off]

    def toggle(self, enable, cpu=False, cuda=False):
        """toggle_collection_dynamic: turns CPU range collection and / or CUDA activity off
        (enable False) or back on from now on. Before start(), it sets how the window opens."""
        now = _C.now_ns()
        if cpu and self.cpu_off == bool(enable):
            self.cpu_off = not enable
            if self.pid is not None and _C.active():
                _C.toggle_cpu(bool(enable))
        if cuda:
            if not enable and self.cuda_off_since is None:
                self.cuda_off_since = now
            elif enable and self.cuda_off_since is not None:
                if self.pid is not None:
                    self.cuda_off.append((self.cuda_off_since, now))
                self.cuda_off_since = None
        if self.pid is not None:
            self.toggles.append({"enable": bool(enable),
                                 "activities": [a for a, on in (("CPU", cpu), ("CUDA", cuda))
                                                if on],
                                 "ts_us": int(now + _C.unix_offset_ns()) // 1000})

    def _cuda_off_intervals(self):
        if self.cuda_off_since is None:
            return self.cuda_off
        return self.cuda_off + [(self.cuda_off_since, None)]

    def stack_replaced(self, threads):
        """3.11 with_stack: another profile function (a sys.setprofile inside the window:
        cProfile.enable(), a debugger) replaced the tracer on these live threads ((ident,
        native id, tracer stop ns), from _pystack.stop), so their python_function events ended
        there.
        cprof leaves the user's hook alone; the trace's metadata says so
        (cprof.with_stack_replaced) and stop warns once, when it knows the time."""
        names = _thread_names()
        # the tracer's stop ends the frames still running: those ends are not the thread's
        self._stack_stopped = {tid: stop_ns for ident, tid, stop_ns in threads}
        self.notes["with_stack_replaced"] = [
            {"thread": names.get(ident) or f"thread {tid}", "tid": tid, "until_ms": None,
             "why": "another profile function (sys.setprofile: cProfile.enable(), a debugger) "
                    "replaced cprof's on this thread inside the window: its python_function "
                    "events end at its last one (until_ms: ms after the window's start) and do "
                    "not resume when that function is removed"}
            for ident, tid, stop_ns in threads]

    def _time_stack_replaced(self, snap):
        replaced = self.notes.get("with_stack_replaced")
        if not replaced:
            return
        said = []
        for r in replaced:
            last = snap.last_event_ns(r["tid"], _C.CAT_PYTHON_FUNCTION,
                                      self._stack_stopped[r["tid"]])
            if last is not None:  # ms, not ns: the metadata's numbers are doubles
                r["until_ms"] = round((last - snap.start_ns) / 1e6, 3)
            at = (f"after {r['until_ms']:.3f} ms of the window" if last is not None
                  else "before its first event")
            said.append(f"'{r['thread']}' (tid {r['tid']}) {at}")
        _warn.warn(
            "cprof: with_stack: another profile function (sys.setprofile: cProfile.enable(), a "
            "debugger) replaced cprof's inside the window on thread(s) "
            + ", ".join(said) + "; their python_function events end there and do not resume "
            "when that function is removed (cprof leaves it alone; Python 3.12+ runs both). "
            "The trace's cprof.with_stack_replaced says so")

    def stop(self, exc_type=None, end_ns=None):
        """Closes the window. exc_type: the exception that ended it (or a str: "SIGTERM",
        "exit"), if any. end_ns: where the program's window ended, when cprof's own work at
        the stop came before this call (the memory snapshot); default: now. Returns the
        snapshot (None in a forked child: nothing is closed)."""
        if self.foreign("stop"):
            return None
        global _open
        if _open is self:
            _open = None
        user_end = end_ns or 0
        self._gpu_turn()  # a takeover under way on another thread finishes first
        try:
            if self.gpu and _C.gpu_active():
                user_end = end_ns or _C.now_ns()  # the sync below is cprof's, not the program's
                self._end_gpu(user_end)
        finally:
            self._gpu_turn_done()
        # the span ends where the program's window did, not after cprof's sync and CUPTI flush
        snap = _C.stop(span_stop_ns=user_end)
        _glue.nvtx_window_end()  # NVTX ranges still open were closed by the stop
        snap.rename_threads(_thread_names())
        self.snapshot = snap
        self._time_stack_replaced(snap)
        if exc_type is not None:
            self.partial = True
            self.end_reason = exc_type if isinstance(exc_type, str) else exc_type.__name__
        refused = _C.names_refused() - self.names_refused_at_start
        if refused:
            self.notes["names_refused"] = refused
            shapes = (self.notes.get("ops") or {}).get("shape_errors")
            lost_shapes = (f"; {shapes:,} operator calls of this window lost their shapes "
                           "(ops.shape_errors)" if shapes else "")
            _warn.warn(
                f"cprof: {refused:,} name(s) could not be stored: cprof's name table is full "
                f"(it keeps every distinct name for the process's life, up to {1 << 22:,}). "
                "It is filled by distinct range names (an id or step number in the name "
                "makes one per call), by operator input shapes under record_shapes (each "
                "distinct set of shapes, strides and scalar arguments, such as alpha=i, is "
                "one), by the ProfilerStep#N name of every recorded step of a long schedule, "
                "and by GPU kernel names. What was refused is in the trace as '[cprof: name "
                "table full]' (ranges and steps: cprof report then finds no steps) or as ops "
                f"without shapes{lost_shapes}; the metadata counts them (names_refused). Give "
                "ranges a fixed name and put the varying part in the range's args, use "
                "record_shapes in short windows, and profile long runs in a fresh process.")
        if snap.dropped:
            _warn.warn(
                f"cprof: {snap.dropped} of {snap.dropped + snap.ranges} ranges were dropped "
                f"because the window's range buffer cap ({self.buffer_mb} MiB) was reached; "
                "the trace says so in its metadata. Raise buffer_size_mb to keep them.")
        return snap

    def _gpu_turn(self):
        """Waits until no other thread is ending or restarting this window's GPU collection,
        then takes the turn (give it back with _gpu_turn_done). The window's thread stops and
        restarts it, and torch.profiler starting on any thread ends it (torch_profiler_starts):
        two ends at once made the loser's gpu_stop fail ("GPU records ... lost" when none
        were), and a stop could write the trace between the other's gpu_stop and its notes.
        _turn_lock guards only the claim; the sync, flush and decode run outside it, and a
        thread waiting its turn waits on the holder's Event (decision 183)."""
        while True:
            with self._turn_lock:
                busy = self._gpu_busy
                if busy is None:
                    self._gpu_busy = threading.Event()
                    return
            busy.wait()

    def _gpu_turn_done(self):
        with self._turn_lock:
            busy, self._gpu_busy = self._gpu_busy, None
        busy.set()

    def _end_gpu(self, host_stop_ns):
        """Ends GPU collection (at the stop, or when torch.profiler takes CUPTI): launched
        work finishes first, so its records are complete; then flushed and decoded into
        gpu_snapshot, losses said. The caller holds the GPU turn (_gpu_turn)."""
        _sync_cuda()
        try:
            self.gpu_snapshot = _C.gpu_stop(host_stop_ns=host_stop_ns,
                                            toggled_off=self._cuda_off_intervals())
        except _C.CprofError as err:
            self.notes["gpu_error"] = str(err)
            _warn.warn(f"cprof: GPU records of this window are lost: {err}")
        else:
            self._check_gpu_drops()

    def _check_gpu_drops(self):
        counts = self.gpu_snapshot.counts()
        self.notes["gpu"] = counts
        d = counts["dropped"]
        lost = d["cupti"] + d["decode"]
        if d["buffers_refused"]:
            pool_mb = counts["pool_bytes"] / (1 << 20)
            _warn.warn(
                f"cprof: CUPTI's GPU activity buffers ({pool_mb:.0f} MiB) filled up during "
                f"the window: {d['buffers_refused']} requests for another buffer were "
                "refused, so GPU records from that point on are missing"
                + (f" ({d['cupti']} counted by CUPTI)" if d["cupti"] else "")
                + "; the trace says so in its metadata. Raise gpu_buffer_mb (or "
                "CPROF_GPU_BUFFER_MB) or shorten the window.")
        elif lost:
            _warn.warn(
                f"cprof: {lost} GPU activity records were dropped (CUPTI buffers full or out "
                "of memory); the trace says so in its metadata. Shorten the window or raise "
                "gpu_buffer_mb (or CPROF_GPU_BUFFER_MB).")
        u = counts["unrecovered"]
        if u["flush_error"]:
            _warn.warn(
                f"cprof: CUPTI could not flush its activity buffers when the window closed "
                f"(CUPTI error {u['flush_error']}): GPU records still held in them are missing "
                "from this trace, in numbers CUPTI does not report; the trace says so in its "
                "metadata (dropped.gpu_flush_error). Another CUPTI client or a broken CUDA "
                "context is the usual cause.")
        if u["buffers_undecoded"]:
            _warn.warn(
                f"cprof: {u['buffers_undecoded']} CUPTI activity buffer(s) could not be read "
                f"to their end (CUPTI error {u['undecoded_error']}): the GPU records after that "
                "point are missing from this trace; the trace says so in its metadata "
                "(dropped.gpu_buffers_undecoded). A libcupti other than the one the driver "
                "expects (CPROF_CUPTI_PATH) can cause it.")
        if u.get("buffers_unkept"):
            _warn.warn(
                f"cprof: {u['buffers_unkept']} completed CUPTI activity buffer(s) could not be "
                f"kept: {u.get('foreign_buffers', 0)} buffer(s) another CUPTI client had left "
                "with CUPTI (torch.profiler's, say) were completed into this window and took "
                "their places; the GPU records in them are missing, in numbers nobody knows; "
                "the trace says so in its metadata (dropped.gpu_buffers_unkept). Run "
                "torch.profiler and cprof one after the other, not at once.")
        if u["disable_error"]:
            _warn.warn(
                f"cprof: CUPTI would not stop collecting when the window closed (CUPTI error "
                f"{u['disable_error']}): GPU work between windows is still recorded, and the "
                "next window leaves it out as outside_window (counted in its metadata).")
        if u["unsubscribe_error"]:
            _warn.warn(
                f"cprof: CUPTI would not release cprof's subscriber when the window closed "
                f"(CUPTI error {u['unsubscribe_error']}): cprof still holds it (another "
                "profiler started now cannot attach); the next cprof window takes it back.")
        if u["drop_count_errors"]:
            _warn.warn(
                f"cprof: CUPTI would not say how many GPU records it dropped for "
                f"{u['drop_count_errors']} activity buffer(s): records may be missing from this "
                "trace in numbers nobody knows; the trace says so in its metadata "
                "(dropped.gpu_drop_count_errors).")
        if d["incomplete"]:
            nvtx = u["nvtx_open"]
            other = d["incomplete"] - nvtx
            parts = []
            if other:
                parts.append(f"{other} GPU activity record(s) had no end time, no start "
                             "time, or ended before they began (work still running when the "
                             "window closed on a device cprof does not synchronise)")
            if nvtx:
                parts.append(f"{nvtx} NVTX range(s) were pushed and never popped in the window")
            _warn.warn("cprof: " + "; ".join(parts) + ": left out of the trace, which "
                       "counts them in its metadata (dropped.gpu_incomplete).")

    def metadata(self, extra=None):
        rank, world, backend = rank_info()
        meta = {
            "config": self.config,
            "partial": self.partial,
            "end": self.end_reason or "normal",
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "argv": list(sys.argv),
        }  # rank and world size live in distributedInfo only: HTA takes the first "rank" key
        torch = sys.modules.get("torch")
        if torch is not None:
            meta["torch"] = getattr(torch, "__version__", None)
        meta.update(self.notes)
        if self.toggles or self.off_at_start:
            meta["toggle_collection_dynamic"] = {"off_at_start": self.off_at_start,
                                                 "toggles": self.toggles}
        if self.gpu_snapshot is not None:
            d = self.notes["gpu"]["dropped"]
            u = self.notes["gpu"]["unrecovered"]
            meta["dropped"] = {"gpu_cupti": d["cupti"], "gpu_decode": d["decode"],
                               "gpu_incomplete": d["incomplete"],
                               "gpu_buffers_refused": d["buffers_refused"],
                               "gpu_flush_error": u["flush_error"],
                               "gpu_buffers_undecoded": u["buffers_undecoded"],
                               "gpu_buffers_unkept": u.get("buffers_unkept", 0),
                               "gpu_drop_count_errors": u["drop_count_errors"]}
        if self.dropped_extra:
            meta["dropped"] = dict(meta.get("dropped", {}), **self.dropped_extra)
        if extra:
            meta.update(extra)
        return meta, rank, world, backend

    def write(self, stem, suffix, gzip=True, replace=False, extra=None, retry=None, top=None):
        """Writes the snapshot to stem+suffix (stem-N+suffix if taken). The snapshot is kept
        if the write fails, so it can be retried elsewhere; retry names the call that does
        that, for the error message. top: {key: JSON text} written as top-level members of the
        trace (trace_id, add_metadata), in order."""
        if self.foreign("write"):
            return None
        if self.snapshot is None:
            raise _C.WindowStateError("cprof: nothing to write: the window has not been stopped")
        meta, rank, world, backend = self.metadata(extra)
        try:
            path, events, nbytes, seconds, _ = self.snapshot.write(
                stem,
                suffix,
                gzip=6 if gzip else 0,
                pid=os.getpid(),
                process_name="python",
                rank=rank,
                world_size=world,
                backend=backend,
                dist_json=_dist_members(),
                extra_json=json.dumps(clean_text(meta), default=str),
                replace=replace,
                gpu=self.gpu_snapshot,
                top_json=",".join(f"{json.dumps(k)}:{v}" for k, v in top.items())
                if top else None,
                mem=self.mem_samples,
                mem_heap=self.mem_heap,
                mem_events=self.mem_events,
                # with_modules: kernels link to the innermost module, not an op inside it
                link_modules=bool(self.config.get("with_modules")),
                # with_stack alone: module calls are only their "nn.Module: " Python events
                module_ranges=module_ranges(self.config),
            )
        except _C.TraceWriteError as err:
            if retry is None or err.errno is None:
                raise
            raise _C.TraceWriteError(
                err.errno, f"{err.strerror}; the trace is kept in memory: call {retry} to "
                "write it elsewhere") from None
        return WriteResult(path, events, nbytes, seconds)

    def release(self):
        self.results = None
        self.mem_samples = None
        self.mem_events = None
        if self.snapshot is not None:
            self.snapshot.close()
            self.snapshot = None
        if self.gpu_snapshot is not None:
            self.gpu_snapshot.close()
            self.gpu_snapshot = None


def torch_profiler_starts(activities):
    """torch.profiler (Kineto) is about to set up CUDA collection (torch's _prepare_profiler /
    _enable_profiler with ProfilerActivity.CUDA) while a cprof window collects GPU activity.
    CUPTI serves one client at a time: Kineto registers its own buffer callbacks, so cprof's
    records from then on, and those still in a buffer CUPTI was filling, would go to Kineto,
    and Kineto's stop switches the activity kinds off. So the window's GPU collection ends
    here, before Kineto's setup: flushed and decoded as at a stop (the records up to now are
    kept), CUPTI released for torch.profiler; the window goes on with its CPU ranges. A
    warning and the trace's metadata (gpu_taken_by_torch_profiler) say when (decision 177)."""
    w = _open
    if w is None or not w.gpu or w.pid != os.getpid() or "gpu_taken_by_torch_profiler" in w.notes:
        return
    try:
        if not _C.gpu_active() or not any("CUDA" in str(a) for a in activities or ()):
            return
    except TypeError:  # activities not iterable: not torch's call as cprof knows it
        return
    end = _C.now_ns()
    # torch.profiler may start on any thread: the window's stop, a schedule's restart or
    # another takeover may be ending its GPU collection now; after them, asked again. A
    # SIGTERM waits until this end is done, as it waits for a stop: its handler's stop on this
    # thread would otherwise wait for this thread's own turn for ever
    depth = _lifecycle.enter_critical()
    w._gpu_turn()
    try:
        if _open is not w or "gpu_taken_by_torch_profiler" in w.notes or not _C.gpu_active():
            return  # the window stopped (or was taken) meanwhile: nothing to take
        w.notes["gpu_taken_by_torch_profiler"] = {
            "since_s": round(time.time() - w.start_time, 6) if w.start_time else None,
            "why": "torch.profiler started CUDA collection inside this window: CUPTI serves "
                   "one profiler at a time, so this window's GPU collection ended there (its "
                   "records up to then are kept; torch.profiler's trace has the GPU work after)"}
        w._end_gpu(end)  # as at a stop
    finally:
        w._gpu_turn_done()
        _lifecycle.leave_critical(depth)
    _warn.warn(
        "cprof: torch.profiler started CUDA collection inside a cprof window that collects "
        "GPU activity. CUPTI serves one profiler at a time, so this window's GPU collection "
        "ended here, before torch.profiler's: its GPU records up to now are kept, the GPU "
        "work after is in torch.profiler's trace, and its CPU ranges go on; the metadata says "
        "when (gpu_taken_by_torch_profiler). To have both in one trace, profile with one tool: "
        "cprof.profile is a drop-in for torch.profiler.profile.")


def _kineto_idle():
    """True when torch is loaded and no torch.profiler (Kineto) session is running. Kineto
    subscribes to CUPTI at its first session and never unsubscribes; once that session is over
    cprof may collect without the subscriber (the C side still refuses a holder that names
    Nsight). During a session the two would take each other's records: then cprof refuses.
    torch's profiler state is per thread (_profiler_type() is NONE on every other thread), so
    a session on another thread (a cprof run timer thread's window, a worker's) is known from
    torch's patched entry points (_ops.torch_profiler_elsewhere)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        if str(torch._C._autograd._profiler_type()).endswith("KINETO"):
            return False
    except Exception:
        return False
    return not _ops.torch_profiler_elsewhere()


def _sync_cuda():
    """torch.cuda.synchronize() on every device the program has used, when it has initialised
    CUDA through torch. Not the current device alone: work still running on another one at
    stop (a model split across GPUs, DataParallel) would reach CUPTI's forced flush without an
    end and be dropped as incomplete. A device without a primary context ran nothing, and
    synchronizing it would create one (hundreds of MiB of GPU memory). Not while this
    thread's stream captures a CUDA graph: a synchronize would fail and invalidate the
    user's capture (the work in flight is then counted incomplete, as without a sync); nor
    while another thread has a global-mode capture open, where it would fail the same way
    (waited for, decision 189)."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return
        if _capturing(torch):
            return
        has_ctx = getattr(torch._C, "_cuda_hasPrimaryContext", None)
        devices = None if has_ctx is None else \
            [i for i in range(torch.cuda.device_count()) if has_ctx(i)]
    except Exception:  # a broken CUDA context must not lose the CPU trace
        return
    with _graphs.sync_allowed() as allowed:
        if allowed:
            _sync_devices(torch, devices)


def _sync_devices(torch, devices):
    if devices is None:
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - its kernels are counted incomplete, not lost quietly
            pass
        return
    for i in devices:  # one device's sticky error (an illegal address) spares the others'
        try:
            torch.cuda.synchronize(i)
        except Exception:  # noqa: BLE001 - its kernels are counted incomplete, not lost quietly
            pass


def _capturing(torch):
    """Whether this thread's current CUDA stream is capturing a graph (False where torch
    cannot say)."""
    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except Exception:
        return False


def _set_nvtx_injection():
    """NVTX sends ranges to CUPTI only if NVTX_INJECTION64_PATH names libcupti when the
    process makes its first NVTX call. Set it (if unset) once GPU collection works, so NVTX
    ranges are captured whenever NVTX initialises after this point; `cprof run` sets it before
    the program starts."""
    if "NVTX_INJECTION64_PATH" not in os.environ:
        path = _C.cuda_info()["cupti"]["path"]
        if path:
            os.environ["NVTX_INJECTION64_PATH"] = path
