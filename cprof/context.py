"""ProfilerContext and profile_function: the seed-000 API on cprof's C engine."""
import functools
import inspect
import os
import pathlib
import threading
import time
import warnings
import weakref

from . import _C
from . import _warn
from . import _glue
from . import _lifecycle
from ._dist import rank_info, shared_stamp
from ._profile import normalize_activities as _normalize
from ._profile import profile
from ._window import (WriteResult, check_buffer_size_mb, check_gpu_buffer_mb, check_output_dir,
                      flag, is_flag, is_stream)
from ._ranges import _async_gen_wrapper

VALID_ACTIVITIES = ("CPU", "GPU", "MEM")
DEFAULT_ACTIVITIES = ("CPU", "GPU")
DEFAULT_DIR = "/tmp/cprof_profiles"
ENV_DIR = "CPROF_PROFILER_DIR"
# the seed's variable (CACHE_DIT_TORCH_PROFILER_DIR) with cprof's prefix: read after ENV_DIR
ENV_DIR_ALIAS = "CPROF_TORCH_PROFILER_DIR"


class OutputDir(str):
    """ProfilerContext.output_dir: a str, as it always was, that also equals the pathlib.Path
    of the same directory, joins with `/` and answers Path's methods (`exists()`, `glob()`...),
    so code written for either (the seed's f-string, `ctx.output_dir == tmp_path`) works."""

    __slots__ = ()

    def __eq__(self, other):
        if isinstance(other, os.PathLike) and not isinstance(other, str):
            return os.path.normpath(os.fspath(other)) == os.path.normpath(str(self))
        return str.__eq__(self, other)

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = str.__hash__

    def __truediv__(self, other):
        return pathlib.Path(self) / other

    def __fspath__(self):
        return str(self)

    def __getattr__(self, name):  # Path's attributes that str has not
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(pathlib.Path(str(self)), name)


def _say(line):
    """A one-line notice on stdout; a closed or broken stdout (`prog | head` after head
    exited) never turns it into an error out of the window's exit."""
    try:
        print(line, flush=True)
    except (OSError, ValueError):
        pass


def check_profile_name(profile_name, what="profile_name"):
    """A ValueError unless profile_name can be the start of a file name in any directory
    (what: the argument's name in the message, ProfilerConfig.run_name for a directory)."""
    if (not isinstance(profile_name, str) or profile_name in ("", ".", "..")
            or "/" in profile_name or any(c < " " or c == "\x7f" for c in profile_name)):
        raise ValueError(
            f"cprof: {what} must be a file name (not '.' or '..', without '/' or "
            f"control characters such as a newline), got {profile_name!r}"
        )
    try:
        os.fsencode(profile_name)
    except UnicodeError:
        raise ValueError(f"cprof: {what} {profile_name!r} cannot be a file name on "
                         "this system (it has characters the file system encoding cannot "
                         "write); pass another") from None
    if len(os.fsencode(profile_name)) > 200:
        raise ValueError(f"cprof: {what} is {len(os.fsencode(profile_name))} bytes; "
                         "file names are limited to 255 bytes with the -rankR-N.trace.json.gz "
                         "suffix, so keep it under 200")


def default_output_dir():
    """$CPROF_PROFILER_DIR when set (read at each call), else $CPROF_TORCH_PROFILER_DIR, else
    /tmp/cprof_profiles."""
    # a value of blanks only is a slip (CPROF_PROFILER_DIR=" "), not a directory named so
    return os.path.expanduser((os.environ.get(ENV_DIR) or "").strip() and os.environ[ENV_DIR]
                              or (os.environ.get(ENV_DIR_ALIAS) or "").strip()
                              and os.environ[ENV_DIR_ALIAS] or DEFAULT_DIR)


def normalize_activities(activities):
    """Canonical activity names (CPU, GPU, MEM; CUDA is GPU); ValueError naming the valid
    ones. None gives seed 000's default, CPU and GPU."""
    return _normalize(activities, default=DEFAULT_ACTIVITIES)


def memory_line(s):
    """The memory summary in words: peak resident set in the window (the process's peak when
    the window's was not sampled), peak malloc'd bytes, peak CUDA allocated / reserved."""
    rss = s.get("cpu_peak_rss_window_bytes", s.get("cpu_peak_rss_bytes", 0))
    parts = [f"peak CPU RSS {_fmt_size(rss)}"]
    if "cpu_peak_malloc_bytes" in s:
        parts.append(f"peak malloc'd {_fmt_size(s['cpu_peak_malloc_bytes'])}")
    if "cuda_peak_allocated_bytes" in s:
        parts.append(f"peak CUDA allocated {_fmt_size(s['cuda_peak_allocated_bytes'])}")
        parts.append(f"reserved {_fmt_size(s['cuda_peak_reserved_bytes'])}")
    elif "cuda" in s:  # why there is no CUDA memory snapshot / peak
        parts.append(f"CUDA memory {s['cuda']} (no memory snapshot)")
    return ", ".join(parts)


def _fmt_size(n):
    """Bytes in decimal units, as their names say (2,550,603 B is 2.6 MB; it used to divide by
    1024 and print 2.4 "MB")."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0


class ProfilerContext:
    """Profiles the code inside ``with`` and writes a Kineto-compatible trace on exit.

    Writes ``{output_dir}/{profile_name}.trace.json.gz`` (``-rank{R}`` before the suffix when
    the world size is above 1); an existing file is never overwritten: ``-1``, ``-2``... are
    added. ``enabled=False`` makes it a no-op that touches nothing.

    Runs on cprof.profile (no schedule): ``with_stack`` records Python calls (and C calls
    such as torch ops) in C, ``record_shapes`` records nn.Module calls with their input
    shapes (``with_modules`` records them without shapes), ``MEM`` tracks memory and, with
    CUDA, writes ``{name}-rank{R}-memory-{ts}.pickle`` (pytorch.org/memory_viz; ``-N``
    added as its trace's, never overwritten; paths in ``memory_paths``) and a ``.txt``
    summary beside the trace. ``ranks`` limits profiling to those ranks.
    ``record_ops`` (with CPU) records torch's operators (``aten::addmm``, autograd nodes) as
    ``cpu_op`` ranges and links kernels to them, as torch.profiler does; it needs cprof
    imported before torch. ``buffer_size_mb`` caps the CPU range buffers and
    ``gpu_buffer_mb`` CUPTI's activity buffer pool (default 128 MiB, or
    ``CPROF_GPU_BUFFER_MB``); what a full buffer loses is counted, warned about and written
    into the trace's metadata.

    An exception, Ctrl-C, SIGTERM (default disposition, window opened in the main thread) or
    the interpreter's exit with the window open still write the trace, marked partial (its
    "cprof" metadata: "partial": true, "end": the exception's name, "SIGTERM" or "exit"). A
    child forked inside the window writes nothing (see cprof/_lifecycle.py). One window per
    process: opening a second raises WindowStateError and leaves the first one as it was.
    """

    def __init__(
        self,
        enabled=True,
        activities=None,
        output_dir=None,
        profile_name=None,
        with_stack=True,
        record_shapes=True,
        gzip=True,
        buffer_size_mb=None,
        verbose=True,
        strict=True,
        with_modules=False,
        min_duration_us=0.0,
        ranks=None,
        record_ops=False,
        gpu_buffer_mb=None,
    ):
        if not is_flag(enabled):
            raise TypeError(f"cprof: ProfilerContext(enabled=...) takes a bool, got {enabled!r}; "
                            "parse it first (e.g. an argparse store_true flag), and pass the "
                            "other arguments by keyword (output_dir=...)")
        self.enabled = bool(enabled)
        self.output_dir = None
        self.trace_path = None
        self.result = None
        self.summary = None
        self._window = None
        self._prof = None
        self.memory_paths = []
        self.memory_summary = None
        self.profile_name = profile_name
        if not (type(with_stack) is bool and type(record_shapes) is bool  # noqa: E721
                and type(with_modules) is bool and type(record_ops) is bool  # noqa: E721
                and type(gzip) is bool and type(verbose) is bool  # noqa: E721
                and type(strict) is bool):  # noqa: E721 - checked once, not per flag
            who = "cprof.ProfilerContext"
            with_stack = flag(with_stack, who, "with_stack")
            record_shapes = flag(record_shapes, who, "record_shapes")
            with_modules = flag(with_modules, who, "with_modules")
            record_ops = flag(record_ops, who, "record_ops")
            gzip = flag(gzip, who, "gzip")
            verbose = flag(verbose, who, "verbose")
            strict = flag(strict, who, "strict")
        self.with_stack = with_stack
        self.record_shapes = record_shapes
        self.with_modules = with_modules
        self.record_ops = record_ops
        self.gzip = gzip
        self.verbose = verbose
        self.strict = strict
        self.collected_activities = None
        if not self.enabled:
            # a no-op that touches nothing (no device check, no directory: output_dir and
            # trace_path stay None, nothing will be written), with the same attributes
            self.activities = list(activities) if isinstance(activities, (list, tuple)) \
                else ([activities] if activities else list(DEFAULT_ACTIVITIES))
            return
        self.activities = normalize_activities(activities)
        self._dir_given = output_dir is not None
        if output_dir is not None and not isinstance(output_dir, (str, bytes, os.PathLike)):
            raise TypeError(f"cprof: output_dir must be a path (str or pathlib.Path), got "
                            f"{output_dir!r}")
        self.output_dir = OutputDir(os.path.expanduser(os.fsdecode(output_dir))
                                    if output_dir is not None else default_output_dir())
        if profile_name is None:  # shared by a torchrun job's ranks where it can be
            profile_name = f"profile_{shared_stamp() or int(time.time())}"
        check_profile_name(profile_name)
        buffer_size_mb = check_buffer_size_mb(buffer_size_mb, "cprof.ProfilerContext")
        gpu_buffer_mb = check_gpu_buffer_mb(gpu_buffer_mb, "cprof.ProfilerContext")
        self.profile_name = profile_name
        self.buffer_size_mb = buffer_size_mb
        self._prof = profile(activities=self.activities, with_stack=self.with_stack,
                             record_shapes=self.record_shapes, with_modules=self.with_modules,
                             min_duration_us=min_duration_us, ranks=ranks,
                             buffer_size_mb=buffer_size_mb, strict=self.strict,
                             record_ops=record_ops, gpu_buffer_mb=gpu_buffer_mb,
                             _api="ProfilerContext")
        if not self._prof.enabled:  # this rank is not profiled
            self.enabled = False
        # SIGTERM / exit with the window open end it through this object: its file naming
        self._prof._lifecycle_owner = weakref.ref(self)

    # -- paths --
    def _dir_fix(self):
        """What the user can change when the output directory is unusable: where it came from."""
        if self._dir_given:
            return "pass another output_dir (--profile-dir)"
        for var in (ENV_DIR, ENV_DIR_ALIAS):
            if os.environ.get(var):
                return f"it comes from ${var}: set it to a writable directory or pass output_dir"
        return f"pass output_dir (--profile-dir) or set ${ENV_DIR}"

    def _stem_suffix(self):
        rank, world, _ = rank_info()
        name = self.profile_name if world <= 1 else f"{self.profile_name}-rank{rank}"
        suffix = ".trace.json.gz" if self.gzip else ".trace.json"
        return os.path.join(self._out_dir(), name), suffix

    def _out_dir(self):
        """output_dir as the window checked it: a relative one is taken from the working
        directory __enter__ saw (a program that changes directory in the window still gets
        its trace where it asked, in the directory that was checked); as given otherwise."""
        cwd = getattr(self, "_cwd", None)
        if cwd is None or os.path.isabs(self.output_dir):
            return self.output_dir
        try:
            if os.getcwd() == cwd:
                return self.output_dir
        except OSError:  # the working directory was removed
            pass
        return os.path.join(cwd, self.output_dir)

    # -- context protocol --
    def __enter__(self):
        if not self.enabled:
            return self
        if _lifecycle.ending is not None:  # another thread is ending the process's windows
            _lifecycle.park_if_ending()
        if self._prof._started and not self._prof._in_other_process():
            # cprof.profile's own "start() called twice" names calls the user never made
            raise _C.WindowStateError(
                "cprof.ProfilerContext: this context is already open (entered again inside "
                "its own with block); one window per context at a time: close it first, or "
                "mark a region inside it with cprof.range(name)")
        # before the window opens: nothing to lose yet
        self._cwd = None
        check_output_dir(self.output_dir, self._dir_fix())
        if self._unsaved_err is not None or self._memory_err is not None:
            self._write_unsaved("this context was entered again")  # never saved
        try:
            self._cwd = os.getcwd()
        except OSError:
            pass
        stem, suffix = self._stem_suffix()
        self.trace_path = pathlib.Path(stem + suffix)
        was_open = self._prof._started  # entered again while open: that window is not ours
        try:
            depth = _lifecycle.enter_critical(self)  # a SIGTERM waits until the window is set up
            try:
                self._prof.start()
                self._window = self._prof._window
                self.collected_activities = list(self._window.config["collected_activities"])
                self._window.config.update({
                    "activities": self.activities,
                    "output_dir": self.output_dir,
                    "profile_name": self.profile_name,
                    "gzip": self.gzip,
                    "buffer_size_mb": self.buffer_size_mb,
                    "strict": self.strict,
                })
            finally:
                _lifecycle.leave_critical(depth, self)
        except BaseException as err:
            _lifecycle.leave_left_over(self)  # the interrupt may have landed as it was left
            # interrupted (Ctrl-C) after the window opened: the with block will not run its
            # __exit__, so the window is closed here (trace written, partial), never left open
            # to refuse every later window
            if not was_open:
                self._salvage(err)
            raise
        return self

    def _salvage(self, err):
        """Ctrl-C (or another exception) inside opening or closing the window: close it (the
        profile's _salvage), write what it holds, marked partial; the data stays for save()
        if that write is interrupted too."""
        p = self._prof
        p._salvage(err)  # (nothing to do if the profile's own exit finished the stop)
        if isinstance(err, _C.TraceWriteError):
            return  # the write itself failed: said by that error; the data stays for save()
        if self.result is not None or p._last is None or p._last.snapshot is None:
            return  # written already, or nothing was stopped
        self._window = p._last
        done = p._last.snapshot.last_write
        if done is not None:  # the interrupt came out of a write that had finished
            self._say_memory()
            self._write_memory(self._written(WriteResult(*done[:4])))
            return
        try:
            self._say_memory()
            result = None
            try:
                result = self._write()
            finally:  # the snapshot is not lost with the trace
                self._write_memory(result)
        except BaseException as again:  # noqa: BLE001 - err is the exception raised
            _warn.warn(f"cprof: the interrupted window's trace was not written ({again!r}); "
                       "call save(path) to write it")

    def _exit(self, exc_type, exc, tb):
        """Closes the window and writes the trace. exc_type: the exception that ended the
        block, or a str ("SIGTERM", "exit") when _lifecycle ends it; the trace is then
        partial. In a process forked inside the window: nothing (the parent writes)."""
        if not self.enabled or self._window is None:
            return False
        if _lifecycle.ending is not None:  # another thread is ending the process's windows
            _lifecycle.park_if_ending()  # (the one that is passes)
            if self._window is None or self._window.snapshot is not None:
                return False
        if self._prof._in_other_process():
            self._prof._forget_in_child()
            self._window = None
            return False
        depth = _lifecycle.enter_critical(self)  # a SIGTERM now waits until the trace is written
        try:
            self._prof.__exit__(exc_type, exc, tb)
            self._window = self._prof._last
            self._say_memory()
            try:
                # the trace first: the snapshot takes its -N (see _write_memory)
                self._write_memory(self._write())
            except _C.TraceWriteError as err:
                self._write_memory(None)
                if self._save_unreachable:  # no one can call save(): written elsewhere
                    self._write_instead(err)
                    return False
                # kept for save(); written elsewhere if the program ends (or the context is
                # entered again) first: a plain `with ctx:` has no one to catch this error
                self._unsaved_err = err
                _lifecycle.keep_unsaved(self)
                if exc_type is None:
                    raise
                # the user's exception wins; the data stays in memory for save(). The error
                # gives the advice already (retry="save(path)"): said once, not twice
                msg = err.strerror or str(err)
                msg = msg[len("cprof: "):] if msg.startswith("cprof: ") else msg
                if "save(path)" not in msg:
                    msg += "; the trace is kept in memory: call save(path) to write it elsewhere"
                if not msg.startswith("could not write the trace"):
                    msg = f"the trace could not be written: {msg}"
                _warn.warn(f"cprof: {msg}")
        finally:
            _lifecycle.leave_critical(depth, self)
        return False

    def _exit_failed(self, err):
        _lifecycle.leave_left_over(self)  # the interrupt may have landed as it was left
        if self.enabled and self._window is not None:
            self._salvage(err)  # interrupted (Ctrl-C) before the window closed

    # called from C (py_guard.c): a Ctrl-C at its very entry is still followed by the salvage
    __exit__ = _C.guarded_exit(_exit, _exit_failed)

    def _lifecycle_end(self, reason):
        """SIGTERM or interpreter exit inside the window: close it and write the trace,
        marked partial with end reason (elsewhere if it cannot be written where asked: the
        process is ending, so no one can call save())."""
        if not self._prof._lost_window():
            self._save_unreachable = True
            self.__exit__(reason, None, None)

    # True where no one can call save() after a failed write: the process is ending, or the
    # window was one call of a profile_function (its caller never sees this object)
    _save_unreachable = False
    _unsaved_err = None  # the error of a failed write whose data waits for save()
    _memory_err = None  # the same for the memory snapshot (save_memory_snapshot())
    _unsaved_forks = 0  # _lifecycle.forks when the write failed (set by keep_unsaved)

    def _write_unsaved(self, when):
        """The last window's trace (or memory snapshot) could not be written and save() did
        not come before `when` (the program's end, the context entered again): it is written
        to the temporary directory, else the current one, with a warning saying where (or
        that it is lost)."""
        err, self._unsaved_err = self._unsaved_err, None
        merr, self._memory_err = self._memory_err, None
        _lifecycle.saved(self)
        if self._unsaved_forks != _lifecycle.forks:  # forked since: the parent writes it
            return None
        mem = self._prof.memory
        if merr is not None and mem and mem.get("pending"):
            self._write_memory_instead(merr)
        if err is None or self._window is None or self._window.snapshot is None:
            return None
        keep = self.output_dir  # the next window still goes where it was asked to
        path, why, failures = save_instead(self, err)
        self.output_dir = keep
        if path is not None:
            _warn.warn(f"cprof: the trace could not be written ({why}) and save() was not "
                       f"called before {when}; it was written to {path} instead")
        else:
            _warn.warn(f"cprof: the trace could not be written ({why}) and save() was not "
                       f"called before {when}; nor in {'; '.join(failures)}: the trace is "
                       "lost")
        return path

    def _write_instead(self, err):
        """The trace could not be written where asked (err) and no one can call save(): it
        is written to the temporary directory, else the current one, and a warning says
        where; or, if neither takes it, that it is lost. Returns the path or None."""
        path, why, failures = save_instead(self, err)
        if path is not None:
            _warn.warn(f"cprof: the trace could not be written ({why}); it was written to "
                       f"{path} instead")
        else:
            _warn.warn(f"cprof: the trace could not be written ({why}); nor in "
                       f"{'; '.join(failures)}: the trace is lost")
        return path

    def _say_memory(self):
        mem = self._prof.memory
        if not mem:
            return
        self.memory_summary = mem.get("summary")
        if self.verbose and self.memory_summary:
            _say("cprof: memory: " + memory_line(self.memory_summary))

    def _trace_index(self, result):
        """N when this window's trace was written as {stem}-N{suffix} in the output directory
        (a name taken), else 0 (the name itself, no trace, or a trace written elsewhere)."""
        if result is None:
            return 0
        stem, suffix = self._stem_suffix()
        path = os.fspath(result.path)
        try:
            if os.path.realpath(os.path.dirname(path)) != os.path.realpath(self._out_dir()):
                return 0
        except OSError:
            return 0
        base, first = os.path.basename(path), os.path.basename(stem)
        if not (base.startswith(first + "-") and base.endswith(suffix)):
            return 0
        n = base[len(first) + 1: len(base) - len(suffix)]
        return int(n) if n.isdigit() else 0

    def _write_memory(self, result):
        """Writes the window's CUDA memory snapshot (if any) beside its trace (result: the
        trace's WriteResult, None if it was not written): {name}-rank{R}-memory-{ts}.pickle,
        with the trace's -N when the trace got one ({...}-{ts}-N.pickle), and the next free
        -N when that is taken: a snapshot is never overwritten (decision 120). A write that
        fails (a full disk) leaves no file and keeps the snapshot for save_memory_snapshot();
        where no one can call that (cprof run, a profile_function call, the process ending)
        it is written to the temporary directory, else the current one (decision 138)."""
        mem = self._prof.memory
        if not mem or mem.get("snapshot") is None or mem.get("written"):
            return
        mem["written"] = True  # once per window, whatever path ends it (exit, salvage)
        base = self._memory_base()
        try:
            path = self._write_memory_in(self._out_dir(), base, self._trace_index(result))
        except OSError as err:
            mem["pending"] = True
            if self._save_unreachable or self._memory_unreachable:
                self._write_memory_instead(err)
                return
            _warn.warn(f"cprof: {_why(err)}; the snapshot is kept in memory: call "
                       "ctx.save_memory_snapshot(path) to write it elsewhere (until the next "
                       "window)")
            self._memory_err = err  # written elsewhere if the program ends first
            _lifecycle.keep_unsaved(self)
            return
        if path is not None:
            self._memory_written(path)

    def _memory_base(self):
        rank, _, _ = rank_info()  # always ranked, as seed 000 names it (one process: rank0)
        return f"{self.profile_name}-rank{rank}-memory-{int(time.time())}"

    def _write_memory_in(self, where, base, n=0):
        """Writes the pending snapshot into directory where as base.pickle (base-N.pickle
        from n, the next free one). Returns the path, or None (warned) when 10,000 names are
        taken; a failed write raises cprof.TraceWriteError."""
        stem = os.path.join(where, base)
        for i in range(n, n + 10000):
            path = f"{stem}-{i}.pickle" if i else f"{stem}.pickle"
            try:
                return _glue.write_memory_snapshot(self._prof.memory, path, exclusive=True)
            except FileExistsError:
                continue
        _warn.warn(f"cprof: the memory snapshot was not written: {stem}.pickle and "
                   f"{stem}-{n + 1}...-{n + 9999}.pickle all exist")
        return None

    def _memory_written(self, path):
        self._prof.memory.pop("pending", None)
        self._memory_err = None
        if self._unsaved_err is None:
            _lifecycle.saved(self)
        self.memory_paths.append(path)
        if self.verbose:
            _say(f"cprof: memory snapshot written to {path} (open it at "
                 "https://pytorch.org/memory_viz)")

    def _write_memory_instead(self, err):
        """The snapshot could not be written where asked (err) and no one can call
        save_memory_snapshot(): the temporary directory, else the current one, as the
        trace's save_instead; a warning says where, or that it is lost."""
        failures = []
        for where in fallback_dirs(self, failures, lambda e: e.strerror or str(e)):
            try:
                path = self._write_memory_in(where, self._memory_base())
            except OSError as again:
                failures.append(f"{where} ({again.strerror or again})")
                continue
            if path is not None:
                _warn.warn(f"cprof: {_why(err)}; it was written to {path} instead")
                self._memory_written(path)
                return path
        _warn.warn(f"cprof: {_why(err)}; nor in {'; '.join(failures) or 'another directory'}: "
                   "the memory snapshot is lost")
        return None

    # True where a failed snapshot write cannot wait for save_memory_snapshot() (cprof run
    # ends with the program); _save_unreachable implies it
    _memory_unreachable = False

    def save_memory_snapshot(self, path, replace=False):
        """Writes the last window's CUDA memory snapshot (and its .txt summary) to path,
        after a write that failed (a full disk) or as a copy. A directory: the snapshot goes
        into it under its usual name. An existing file is refused unless replace=True.
        Returns the pickle's path; it is added to memory_paths."""
        mem = self._prof.memory if self._prof is not None else None
        if not mem or mem.get("snapshot") is None:
            raise _C.WindowStateError(
                "cprof.ProfilerContext: no memory snapshot to save: it needs MEM among the "
                "activities and a program that uses CUDA through torch (kept until the next "
                "window)")
        path = os.fsdecode(path)
        if os.path.isdir(path):
            written = self._write_memory_in(path, self._memory_base())
            if written is None:
                raise FileExistsError(f"cprof: no free snapshot name in {path}")
        elif replace:
            written = _glue.write_memory_snapshot(mem, path)
        else:
            try:
                written = _glue.write_memory_snapshot(mem, path, exclusive=True)
            except FileExistsError:
                raise FileExistsError(
                    f"cprof: {path} (or its .txt) exists: pass replace=True to overwrite it, "
                    "or another path") from None
        self._memory_written(written)
        return written

    def _write(self, path=None, replace=False):
        w = self._window
        if w is not None and w.pid is not None and w.pid != os.getpid():
            raise _C.WindowStateError(
                f"cprof: this window was opened by process {w.pid}; this is a process forked "
                "from it, which does not hold the window: call save() in that process")
        if path is None:
            stem, suffix = self._stem_suffix()
        else:
            path = os.fspath(path)
            suffix = next(
                (s for s in (".pt.trace.json.gz", ".pt.trace.json", ".trace.json.gz",
                             ".trace.json", ".json.gz", ".json") if path.endswith(s)),
                "",
            )
            stem = path[: len(path) - len(suffix)] if suffix else path
        gzip = suffix.endswith(".gz") if path is not None else self.gzip
        try:
            result = self._window.write(stem, suffix, gzip=gzip, replace=replace,
                                        retry="save(path)",
                                        top=self._prof._top_members(self._window))
        except _C.TraceWriteError:
            if self.result is None:  # trace_path must not name a file that was never written
                self.trace_path = None
            raise
        return self._written(result)

    def _written(self, result):
        """The window's trace is written (result: its path, events, bytes, seconds): keep the
        result and summary, release the data, say where it went."""
        self.result = result
        self.summary = self._window.snapshot.summary()
        self.trace_path = pathlib.Path(result.path)
        self.output_dir = OutputDir(self.trace_path.parent)
        self._window.release()
        if self.verbose:
            _say(f"cprof: trace written to {result.path} ({result.events} events, "
                 f"{_fmt_size(result.bytes)}, {result.seconds:.3f} s to write)")
        return result

    def save(self, path, replace=False):
        """Writes the collected data to path (after a failed write, or a second copy is not
        possible: the data is released once written). Suffix .gz means gzip. A directory:
        the trace goes into it under its usual name ({profile_name}.trace.json.gz)."""
        if self._window is None or self._window.snapshot is None:
            raise _C.WindowStateError(
                "cprof: nothing to save: the trace was already written to "
                f"{self.trace_path} and its data released; copy that file for a second copy "
                "(shutil.copy)" if self.result else "cprof: nothing to save: no window ran"
            )
        path = os.fsdecode(path)
        if os.path.isdir(path):
            # a directory: the trace goes into it under its usual file name (it used to be
            # written beside it, as "<dir>-1")
            stem, suffix = self._stem_suffix()
            path = os.path.join(path, os.path.basename(stem) + suffix)
        if not is_stream(path):  # /dev/null: written into, its directory need not be writable
            check_output_dir(os.path.dirname(path) or ".", "pass save() a path in a "
                             "directory you can write to (the data is kept until then)")
        result = self._write(path, replace=replace)
        self._unsaved_err = None
        if self._memory_err is None:
            _lifecycle.saved(self)
        return result

    @property
    def trace_written(self):
        return self.result is not None


def _why(err):
    """A snapshot write's error as the warning's lead: "could not write ... : why"."""
    text = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
    return text[len("cprof: "):] if text.startswith("cprof: ") else text


def fallback_dirs(ctx, failures, clean):
    """Where a file that could not be written in ctx's output directory goes instead: the
    temporary directory, else the current one, never the output directory again nor one
    twice. A directory that cannot even be named is added to failures ("name (why)")."""
    import tempfile

    try:
        tried = {os.path.realpath(ctx._out_dir())}  # never the directory that refused it
    except OSError:
        tried = set()
    for name, get in (("the temporary directory", tempfile.gettempdir),
                      ("the current directory", os.getcwd)):
        try:  # either can fail: a directory removed, a $TMPDIR that is not there
            where = get()
            real = os.path.realpath(where)
        except OSError as again:
            failures.append(f"{name} ({clean(again)})")
            continue
        if real not in tried:
            tried.add(real)
            yield where


def save_instead(ctx, err):
    """After ctx's trace failed to be written where asked (err), when no one can call save()
    (the process ends, a profile_function call returns): writes it into the temporary
    directory, else the current one (never the output directory again). Returns (path or
    None, why the first write failed, ["dir (why)" for each directory that refused it])."""
    def clean(e):  # an error's text without cprof's prefix and its "call save()" advice
        m = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        m = m[len("cprof: "):] if m.startswith("cprof: ") else m
        return m.split("; the trace is kept in memory")[0]

    why = clean(err) if err is not None else ""
    failures = []
    window = getattr(ctx, "_window", None)
    if window is None or window.snapshot is None:
        return None, why, ["(nothing left to write)"]
    for where in fallback_dirs(ctx, failures, clean):
        if not os.path.isdir(where):
            failures.append(f"{where} (not a directory)")
            continue
        try:
            return ctx.save(where).path, why, failures
        except Exception as again:  # noqa: BLE001 - each refusal is reported
            failures.append(f"{where} ({clean(again)})")
    return None, why, failures or ["the temporary and current directories (both are the "
                                   "output directory that refused it)"]


class _CallWindow:
    """One call of a profile_function-decorated function: its own ProfilerContext, or a range
    in the window already open. A class, not a contextlib generator: with_stack traces every
    frame outside cprof's own files, and contextlib's would appear in the user's trace.
    suspends: the call is a generator or coroutine, which other code runs between the parts
    of: its range is then a detached one closed by its token on the thread that opened it (a
    plain pop closes the innermost range of the thread it runs on, which, after a yield or an
    await, can be another call's or on another thread)."""

    __slots__ = ("enabled", "marker", "name", "suspends", "kwargs", "ctx", "token", "ident",
                 "joined", "host")

    def __init__(self, enabled, marker, name, suspends, kwargs):
        self.enabled, self.marker, self.name, self.suspends = enabled, marker, name, suspends
        self.kwargs, self.ctx, self.token, self.ident = kwargs, None, None, None
        self.joined, self.host = 0, None  # calls in this call's window / the call whose it is

    def __enter__(self):
        if not self.enabled:
            return self
        if not _C.active():
            ctx = ProfilerContext(**self.kwargs)
            # a failed write cannot be left for save(): the caller never sees ctx, and the
            # function's result must not be lost to it
            ctx._save_unreachable = True
            with _calls_lock:  # before the window is open: a call that finds it open counts
                _calls["opener"] = self
            try:
                ctx.__enter__()
                self.ctx = ctx
            except _C.WindowStateError:
                if not _C.active():
                    raise
                # another thread opened a window since the check above: a range in it
            finally:
                if self.ctx is None:
                    with _calls_lock:
                        if _calls["opener"] is self:
                            _calls["opener"] = None
        if self.ctx is None:  # a range in an open window: if a call's, counted in it
            with _calls_lock:
                host = _calls["opener"]
                if host is not None and host.ctx is not None:
                    host.joined += 1
                    self.host = host
        if self.suspends:
            self.token = _C.open_range(self.name, _C.CAT_USER_ANNOTATION, True)
            self.ident = threading.get_ident()
        else:
            self.marker.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self.enabled:
            return False
        try:
            if self.suspends:
                try:
                    _C.close_range(self.token, self.ident)
                except _C.NoOpenRangeError:  # its window ended first, or its thread did
                    pass
            else:
                self.marker.__exit__(exc_type, exc, tb)
        finally:
            if self.host is not None:
                with _calls_lock:
                    self.host.joined -= 1
            if self.ctx is not None:
                with _calls_lock:
                    running = self.joined
                    if _calls["opener"] is self:
                        _calls["opener"] = None
                if running:
                    # concurrent calls (threads, asyncio tasks) ran in this call's window:
                    # their ranges end with it, marked "cprof truncated" in the trace
                    _warn.warn(
                        f"cprof.profile_function({self.name!r}): the window of one call closed "
                        "while other calls that started during it were still running (threads "
                        "or asyncio tasks); their ranges are cut at the window's end (marked "
                        "'cprof truncated') and the rest of them is not recorded. Profile the "
                        "code that makes the concurrent calls with one ProfilerContext to "
                        "record them whole")
                if exc_type is GeneratorExit:  # a generator closed before its end: normal
                    exc_type = exc = tb = None
                self.ctx.__exit__(exc_type, exc, tb)
        return False


# the profile_function call whose window is open (the others are ranges in it): it warns when
# it closes its window under calls still running in it (concurrent ones; decision 123)
_calls_lock = threading.Lock()
_calls = {"opener": None}


def _callable_name(fn):
    """The name a profiled callable gives its trace: a function's own, a functools.partial's
    underlying function's, a callable object's class name."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) and name else type(fn).__name__


def profile_function(
    enabled=True,
    activities=None,
    output_dir=None,
    profile_name=None,
    with_stack=False,
    record_shapes=True,
    **kwargs,
):
    """Decorator: each call of the function runs inside a ProfilerContext (one trace per
    call). The name defaults to the function's. If a cprof window is already open (a profiled
    function called from another, recursion, a call inside a ProfilerContext or cprof.profile,
    or another thread's window opened first), the call is recorded as a range in that window
    instead of opening a second one. ``async def`` functions are profiled until their result
    is ready, generator functions until they are exhausted or closed (the window spans the
    consumer's code between items too). Used bare (``@profile_function``), it takes the
    defaults. Concurrent calls (threads, asyncio tasks) are ranges in the first call's window
    and are cut when it closes, with a RuntimeWarning."""
    if callable(enabled) and not isinstance(enabled, bool):
        # @cprof.profile_function without parentheses: the function came as `enabled`
        return profile_function()(enabled)
    if not is_flag(enabled):
        raise TypeError(f"cprof.profile_function: enabled (the first argument) must be a bool, "
                        f"got {enabled!r}; pass the others by keyword (output_dir=...)")

    def decorator(fn):
        if not callable(fn):
            raise TypeError(f"cprof.profile_function decorates a function, got {fn!r}")
        name = profile_name or _callable_name(fn)
        marker = _C.range(name)
        if enabled:
            # the arguments are checked now, where the decorator is applied: a typo or a bad
            # value is not found only at the first call, after the program did its work
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ProfilerContext(enabled=True, activities=activities, output_dir=output_dir,
                                profile_name=name, with_stack=with_stack,
                                record_shapes=record_shapes, **kwargs)

        def window(suspends=False):
            return _CallWindow(enabled, marker, name, suspends, dict(
                enabled=True, activities=activities, output_dir=output_dir, profile_name=name,
                with_stack=with_stack, record_shapes=record_shapes, **kwargs))

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def async_wrapper(*args, **kw):
                with window(suspends=True):
                    return await fn(*args, **kw)
            return async_wrapper
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def gen_wrapper(*args, **kw):
                with window(suspends=True):
                    return (yield from fn(*args, **kw))
            return gen_wrapper
        if inspect.isasyncgenfunction(fn):
            return _async_gen_wrapper(fn, window)

        @functools.wraps(fn)
        def wrapper(*args, **kw):
            with window():
                return fn(*args, **kw)

        return wrapper

    return decorator
