"""``cprof run``: profile a Python program without changing it.

    cprof run [options] script.py [args...]
    cprof run [options] -m module [args...]
    python -m cprof run ...                      (the same)
    torchrun --nproc_per_node=N -m cprof run [options] train.py [args...]

The program runs in this process under one cprof.ProfilerContext window, as ``python
script.py`` / ``python -m module`` would run it: ``sys.argv`` is ``[script, args...]`` as typed
(for -m: ``[module file, args...]``), ``__name__`` is ``"__main__"``, ``__file__`` is absolute
and ``sys.path[0]`` is the script's directory (for -m: the current directory). cprof's options
are read only up to the script path or ``-m module``; everything after belongs to the program
(``cprof run train.py --lr 3 -o x`` passes ``--lr 3 -o x`` to train.py). ``--`` ends cprof's
options explicitly. Under torchrun each rank writes NAME-rank{R}.trace.json.gz.

Options
  --activities LIST   comma-separated: CPU, GPU (alias CUDA), MEM, as ProfilerContext takes
                      them. Default: CPU, plus GPU when this machine can record it (see
                      ``cprof features``), so a CPU-only machine gets no warning. Asking for
                      GPU where it cannot be recorded warns and records CPU. MEM: a CPU
                      memory counter track (resident set, malloc'd bytes), its peaks,
                      CUPTI memory records and torch's allocation events (from the
                      program's import of torch on); CUDA memory history and the memory_viz
                      snapshot from the program's first CUDA use on.
  -o, --output-dir D  where the trace goes; default $CPROF_PROFILER_DIR, else
                      $CPROF_TORCH_PROFILER_DIR, else /tmp/cprof_profiles. Created and
                      checked before the program starts.
  --name NAME         the trace's file name prefix (profile_name); default the script's stem
                      (train.py -> train; control characters as _) or the module
                      name. The trace is NAME.trace.json.gz,
                      NAME-rank{R}.trace.json.gz when WORLD_SIZE > 1; an existing file is
                      never overwritten (-1, -2, ... are added).
  --delay S           open the window S seconds after the program starts (default: at once;
                      if the program is importing torch then, once that import is done).
  --duration S        close the window S seconds after it opened; the trace is written then
                      and the program keeps running, unprofiled. If the program ends first,
                      the window closes at its end and the trace is complete (not partial).
  --capture-range R   open the window on an event in the program instead of at its start:
                        cudaProfilerApi  opened by torch.cuda.profiler.start(), closed by
                                         torch.cuda.profiler.stop() (also through the
                                         torch.cuda.profiler.profile() context manager).
                                         cprof acts first, then calls torch's function only
                                         if torch has CUDA (without it torch's call raises;
                                         under cprof run the program goes on). So do
                                         torch.cuda.cudart().cudaProfilerStart() / Stop()
                                         (Megatron-LM's way) on builds with CUDA. Calls of
                                         cudaProfilerStart from C/C++ are not seen.
                        range:NAME       opened when the first range named NAME begins, closed
                                         when that range ends; the range itself and what it
                                         holds are in the trace. Ranges: cprof.range (context
                                         manager or decorator), cprof.record_function,
                                         cprof.push / pop, torch.profiler.record_function (=
                                         torch.autograd.profiler.record_function),
                                         torch.cuda.nvtx.range_push / range_pop and
                                         torch.cuda.nvtx.range. (cprof.range becomes a small
                                         Python factory in this mode: ~0.1 us per range.)
                      One window per run: later starts / NAME ranges are not recorded. With
                      --duration the window closes at whichever comes first. Cannot be
                      combined with --delay.
  --with-stack        record Python calls and C calls (torch ops); default off. The program
                      then runs in a re-executed interpreter (same process id, same
                      interpreter options): cprof's tracer records nothing under cprof's own
                      frames, which `cprof run` would otherwise leave under the program.
  --record-shapes     record nn.Module calls (and, with --record-ops, torch's operators) with
                      their input shapes; default off.
  --record-ops        record torch's operators (aten::*, autograd nodes) as cpu_op ranges,
                      kernels linked to them, as torch.profiler does; default off.
  --gzip / --no-gzip  .trace.json.gz (default) or .trace.json.
  --quiet             no informational "cprof: ..." lines. Errors (the window could not open,
                      the trace could not be written) and cprof's warnings still print.
  --report            after the program, print the per-range summary of the window (heaviest
                      first) to stderr.

What the program sees and what comes back
  - The program's stdout, stderr and exit code pass through unchanged. cprof prints only to
    stderr, each line starting with "cprof: " (errors in the arguments: "cprof run: error:").
  - sys.exit(N) exits N (sys.exit("message") prints it and exits 1); an uncaught exception
    prints its traceback exactly as Python does (through sys.excepthook, no cprof frames) and
    exits 1; KeyboardInterrupt (Ctrl-C, SIGINT) prints its traceback and, the trace written,
    ends the process by SIGINT as python does (status -2 to a parent, 130 in a shell); SIGTERM
    (raised in the main thread as cprof._cli_run.Terminated, a BaseException) likewise ends it
    by SIGTERM (-15, 143 in a shell). A program that catches Terminated and goes on (a bare
    except) is ended 3 s later, or at a second SIGTERM, by SIGTERM, its trace written first
    (partial, "end": "Terminated"), as python would have ended it at the first.
    A program that installs its own SIGTERM handler keeps it, one started with SIGTERM
    ignored keeps ignoring it, and forked children (DataLoader workers) get the default back.
    SIGHUP (a terminal or ssh session gone; torchrun forwards it to its workers) and SIGQUIT,
    which end python at once, write the trace first (partial, "end": "SIGHUP" / "SIGQUIT"),
    say so, and end the process by the same signal (-1 / -3); the same holds for a program's
    own handler and SIG_IGN as for SIGTERM.
  - The trace is written in every one of those cases if the window was open. It is marked
    partial when the program ended with an exception while the window was open: the trace's
    "cprof" metadata has "partial": true and "end": the exception's name (SystemExit for a
    non-zero sys.exit, KeyboardInterrupt, "Terminated" for SIGTERM); sys.exit(0) is a
    normal end. The metadata's "cprof_run" entry records the options and what opened and
    closed the window.
  - At the end: "cprof: trace written to PATH (N events, SIZE, S s to write)", as
    ProfilerContext prints it, or, when the window never
    opened, "cprof: no trace written: the window never opened (the program ended after
    S s, before --delay D s)" or "...: the capture range never started (no range named
    ...)"; the exit code is the program's
    either way. A trace that cannot be written where asked (a full disk, the directory gone)
    is written to the temporary directory ($TMPDIR, else /tmp) instead, and the error says
    where; only if that fails too does it say the trace is lost.
  - torch imported by the program after the window opened (the usual case) is captured as
    if it had been imported before: record_function ranges, NVTX ranges, torch.compile's
    regions (so graph breaks show in `cprof report`) and, with --record-shapes, module calls.
  - The window closes when the program's main code returns (or raises). Threads it leaves
    running and its atexit handlers run after that, unprofiled. os._exit() or os.exec*()
    inside the window writes the trace first (partial, "the program ended with os._exit");
    SIGKILL leaves no trace.
  - One cprof window per process: a program that opens its own ProfilerContext /
    cprof.profile while cprof run's window is open gets cprof.WindowStateError. If its window
    is open when cprof run's would open (--delay, --capture-range), cprof run reports it and
    the program continues unprofiled. If the window cannot open at the program's start (e.g.
    another profiler holds CUPTI), the program is not run: exit 1.

Bad input exits 2 before the program starts: no script, no such file, no such module (or a
package without __main__), an unknown activity, a --capture-range other than cudaProfilerApi /
range:NAME, a negative or non-finite --delay, a --duration that is not positive, a --delay or
--duration past threading.TIMEOUT_MAX (about 292 years), --delay with --capture-range, an
output directory that cannot be created or written, a --name containing '/', a bad
CPROF_GPU_BUFFER_MB, CPROF_MEMORY_INTERVAL_US (with MEM) or CPROF_OPS_CAPTURE (with
--record-ops). A program with a syntax error: Python's message, exit 1.
"""
import argparse
import functools
import importlib.abc
import importlib.util
import math
import os
import runpy
import signal
import sys
import threading
import time
import warnings
import weakref

from . import _C, _lifecycle

_PROG = "cprof run"
_USAGE = ("cprof run [options] script.py [args...]\n"
          "       cprof run [options] -m module [args...]")
_HELP = "profile a Python script or module, unchanged, and write its trace"
_VALUE_OPTIONS = ("--activities", "-o", "--output-dir", "--name", "--delay", "--duration",
                  "--capture-range")

EXIT_USAGE = 2
EXIT_SIGINT = 130
EXIT_SIGTERM = 143
# SIGHUP (terminal or ssh session gone; torchrun forwards it to its workers) and SIGQUIT end
# python at once: cprof run writes the trace first, then dies of the signal
OTHER_ENDING_SIGNALS = tuple(getattr(signal, n) for n in ("SIGHUP", "SIGQUIT")
                             if hasattr(signal, n))
# after SIGTERM is raised as Terminated, how long the program has to end before cprof run
# writes the trace and ends it by SIGTERM itself (a program that caught Terminated and went on)
TERM_GRACE_S = 3.0


class Terminated(BaseException):
    """Raised in the program's main thread when SIGTERM arrives, so the window closes and the
    trace is written on the way out (a BaseException, like KeyboardInterrupt, so the program's
    ``except Exception`` does not swallow it). The trace's "end" says "Terminated"."""


# ---------------------------------------------------------------- arguments

def _add_options(p):
    p.add_argument("--activities", metavar="LIST",
                   help="comma-separated CPU, GPU (alias CUDA), MEM; default CPU, plus GPU "
                        "when this machine can record it")
    p.add_argument("-o", "--output-dir", metavar="DIR",
                   help="trace directory (default $CPROF_PROFILER_DIR, else "
                        "$CPROF_TORCH_PROFILER_DIR, else /tmp/cprof_profiles)")
    p.add_argument("--name", metavar="NAME",
                   help="trace file name prefix (default: the script's stem or the module name)")
    p.add_argument("--delay", metavar="SECONDS", type=float,
                   help="open the window this long after the program starts")
    p.add_argument("--duration", metavar="SECONDS", type=float,
                   help="close the window (and write the trace) this long after it opened; "
                        "the program keeps running")
    p.add_argument("--capture-range", metavar="RANGE",
                   help="cudaProfilerApi (torch.cuda.profiler.start/stop) or range:NAME (the "
                        "first range named NAME)")
    p.add_argument("--with-stack", action="store_true",
                   help="record Python calls and C calls (default off)")
    p.add_argument("--record-shapes", action="store_true",
                   help="record nn.Module calls (and, with --record-ops, torch's operators) with "
                        "input shapes (default off)")
    p.add_argument("--record-ops", action="store_true",
                   help="record torch's operators (aten::*, autograd nodes) as cpu_op ranges, "
                        "kernels linked to them, as torch.profiler does (default off)")
    p.add_argument("--gzip", action=argparse.BooleanOptionalAction, default=True,
                   help="gzip the trace (default: on)")
    p.add_argument("--quiet", action="store_true",
                   help="no informational cprof messages (errors and warnings still print)")
    p.add_argument("--report", action="store_true",
                   help="print the window's per-range summary to stderr after the program")


def add_parser(sub):
    """Registers `run` with `cprof`'s subcommands, for `cprof --help` and `cprof run --help`
    through argparse. The real parsing is main()'s (argparse would take the program's
    options as cprof's)."""
    p = sub.add_parser("run", help=_HELP, usage=_USAGE, description=_HELP + ".")
    _add_options(p)
    p.add_argument("program", nargs=argparse.REMAINDER,
                   help="script.py [args...] or -m module [args...]: the program and its "
                        "arguments, passed to it unchanged")
    return p


def _parser():
    p = argparse.ArgumentParser(prog=_PROG, usage=_USAGE, description=_HELP + ".",
                                allow_abbrev=False,  # the splitter below knows full names only
                                epilog="Everything after the script (or -m module) is the "
                                       "program's. Documented in docs/usage.md.")
    _add_options(p)
    return p


def _split(argv):
    """(cprof's options, kind, target, program args): kind is "script", "module" or None.
    cprof's options end at the first non-option word, at -m, or after --."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest = argv[i + 1:]
            return argv[:i], ("script" if rest else None), (rest[0] if rest else None), rest[1:]
        if a == "-m":
            rest = argv[i + 1:]
            return argv[:i], "module", (rest[0] if rest else None), rest[1:]
        if a.startswith("-m") and not a.startswith("--"):  # -mpkg.mod, as python accepts
            return argv[:i], "module", a[2:], argv[i + 1:]
        if a.startswith("-") and a != "-":
            takes_value = a in _VALUE_OPTIONS  # "--name=x" and "-ox" carry their value
            i += 2 if takes_value else 1
            continue
        return argv[:i], "script", a, argv[i + 1:]
    return argv, None, None, []


def _strip_prefix(msg):
    """An error's text without cprof's "cprof: " prefix (the caller adds its own) or
    OSError's "[Errno N]"."""
    if isinstance(msg, OSError) and msg.strerror:
        msg = msg.strerror
    msg = str(msg)
    return msg[len("cprof: "):] if msg.startswith("cprof: ") else msg


def _open_error(err):
    """Why the window could not open, for cprof run's message: CUPTI's busy error says to use
    strict=False, which is ProfilerContext's; on the command line the way is --activities CPU."""
    why = _strip_prefix(err)
    if isinstance(err, _C.CuptiBusyError):
        why = why.replace("use cprof with strict=False to record CPU activity only",
                          "run cprof run with --activities CPU to record CPU activity only")
    return why


def _parse_capture(text):
    """("api", None) / ("range", NAME); ValueError with what to write instead."""
    if text.lower() == "cudaprofilerapi":
        return "api", None
    if text.startswith("range:") and len(text) > len("range:"):
        return "range", text[len("range:"):]
    raise ValueError(f"--capture-range must be cudaProfilerApi or range:NAME (a range name "
                     f"after 'range:'), got {text!r}")


def _default_activities():
    from ._features import gpu_unavailable_reason
    try:
        return ["CPU", "GPU"] if gpu_unavailable_reason() is None else ["CPU"]
    except Exception:  # a broken CUDA install must not stop a CPU profile
        return ["CPU"]


class _Usage(Exception):
    pass


def _file_name(name):
    """A script's stem or module name as a trace name profile_name takes: control characters
    (a tab or newline in the file's name) as "_", cut to 200 bytes ("bad\tname.py" made
    ProfilerContext raise a traceback before the program ran)."""
    name = "".join("_" if c < " " or c == "\x7f" else c for c in name)
    while len(os.fsencode(name)) > 200:
        name = name[:-1]
    return name or "program"


def _check_program(kind, target):
    """Raises _Usage when the script / module cannot be run; returns the default name."""
    if kind is None or not target:
        raise _Usage("no program given: cprof run [options] script.py [args...] or "
                     "cprof run [options] -m module [args...]")
    if kind == "script":
        if not os.path.exists(target):
            if target.strip().upper() in ("CPU", "GPU", "CUDA", "MEM"):
                # --activities CPU GPU train.py, in the form of seed 000's --profile-activities
                raise _Usage(f"no such file: {target}; --activities takes one comma-separated "
                             f"list (--activities CPU,{target.strip().upper()}), not several "
                             "words")
            if os.path.basename(os.path.normpath(target)) in ("torchrun", "torchrun.py"):
                # `cprof run torchrun ...` as `nsys profile torchrun ...` is written: a script
                # is a path (as for python), and the launcher's ranks would be unprofiled anyway
                raise _Usage(f"no such file: {target}; torchrun is torch's launcher and its "
                             "ranks are other processes: to profile each rank run `torchrun "
                             "[its options] -m cprof run [cprof's options] prog.py [args]`")
            raise _Usage(f"no such file: {target}")
        if os.path.isdir(target) and not os.path.isfile(os.path.join(target, "__main__.py")):
            raise _Usage(f"{target} is a directory without __main__.py; pass the script to run")
        return os.path.splitext(os.path.basename(os.path.normpath(target)))[0] or "program"
    try:
        spec = importlib.util.find_spec(target)
    except (ModuleNotFoundError, ValueError):
        spec = None
    except Exception:  # importing its package failed: runpy will show the program's error
        return target
    if spec is None:
        raise _Usage(f"no module named {target!r} (sys.path[0] is the current directory, as "
                     "for python -m)")
    if spec.submodule_search_locations is not None:
        try:
            main_spec = importlib.util.find_spec(target + ".__main__")
        except Exception:
            main_spec = None
        if main_spec is None:
            raise _Usage(f"{target!r} is a package without __main__; pass one of its modules")
    return target


# ---------------------------------------------------------------- the window

class _Session:
    """The one window of a run and what opens and closes it.

    Threads: --delay and --duration are timed by one daemon thread that opens / closes the
    ProfilerContext itself. That is safe: the C event store serialises start, stop and every
    push / pop through the GIL and closes the ranges other threads have open at stop (they end
    at the window's end, marked truncated), the tracer and module capture install on every
    thread whichever thread starts them, and GPU collection is process-wide. It was checked
    with ranges, with_stack and record_shapes on the main thread while a second thread opened
    and closed the window. The alternative, signal.setitimer with a handler, would run only
    when the main thread returns to Python (late during a long C call or CUDA sync), would
    take SIGALRM from programs that use it, and would run cprof's window code re-entrantly in
    the middle of arbitrary program code. The timer thread is started before the window opens
    and runs only cprof code, so the tracer does not record it.

    A lock serialises open / close between that thread, capture hooks on program threads and
    the close at the program's end. SIGTERM arrives as Terminated in the main thread; while
    the main thread is inside open / close (or the program has ended and the trace is being
    written) it is held back until that is done, so a half-written window never results."""

    def __init__(self, ctx, opts, out):
        self.ctx = ctx
        self.opts = opts
        self.out = out
        self.lock = threading.RLock()
        self.state = "waiting"  # -> "open" -> "closed"; "failed" if it could not open
        self.opened_by = self.closed_by = None
        self.open_at = None
        self.trigger = None      # range:NAME: (thread ident, range depth before the range)
        self.finished = threading.Event()  # the program has ended: timers stop
        self.opened = threading.Event()
        self.term_pending = False
        self.signal_pending = 0  # SIGHUP / SIGQUIT that came while the window opened or closed
        self.terminated = False  # Terminated was raised once (a second SIGTERM ends it)
        self._critical = 0
        self.t0 = time.monotonic()
        self.summary = None
        self.pid = os.getpid()  # a child forked from the program closes nothing (the parent's)
        self.held_by_import = False  # the timer waited for the program's import of torch

    # -- SIGTERM, SIGHUP, SIGQUIT --
    def _in_child(self, signum):
        """A signal the handler got in a process forked from the program before forked() ran
        (its at-fork hooks run in order; a Pool's terminate() can come that early): the
        child's default action, as without cprof. True when so."""
        if os.getpid() == self.pid:
            return False
        self.forked()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return True

    def forked(self):
        if signal.getsignal(signal.SIGTERM) == self.on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for sig in OTHER_ENDING_SIGNALS:
            if signal.getsignal(sig) == self.on_ending_signal:
                signal.signal(sig, signal.SIG_DFL)

    def on_ending_signal(self, signum, frame):
        """SIGHUP (a terminal or ssh session gone, torchrun stopping its workers) or SIGQUIT:
        python would die at once, so the trace is written first (partial, end "SIGHUP"),
        said, and the process dies of the signal as it would have."""
        if self._in_child(signum):
            return
        if self._critical:
            self.signal_pending = signum  # acted on once open / close is done
            return
        self._end_by_signal(signum)

    def _end_by_signal(self, signum):
        name = signal.Signals(signum).name
        self.finished.set()  # the timer stops; nothing opens the window any more
        self.opened.set()
        try:
            # the lock first: a close another thread (--duration's timer) has begun finishes
            # writing before the process ends (its state already says "closed")
            with self.lock:
                self.close(f"{name} received", name)
        finally:  # whatever happened to the write, the process ends
            self.out.info(f"terminated by {name}")
            _flush_stdio()
            try:
                signal.signal(signum, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
                os.kill(os.getpid(), signum)
                time.sleep(1)  # the signal is delivered before this returns
            finally:
                os._exit(128 + signum)

    def on_sigterm(self, signum, frame):
        if self._in_child(signum):
            return
        if self._critical or self.finished.is_set():
            self.term_pending = True  # raised (or reported) once open / close is done
            return
        if self.terminated:
            # Terminated was raised and the program is still running: it caught it (a bare
            # except, a task loop). Python would have died at the first SIGTERM: write the
            # trace and die by SIGTERM now, so a scheduler's SIGTERM is never ignored
            self._die_by_sigterm()
        self.terminated = True
        threading.Thread(target=self._term_watchdog, name="cprof-run-sigterm",
                         daemon=True).start()
        raise Terminated()

    def _term_watchdog(self):
        """After Terminated was raised: a program that has not ended TERM_GRACE_S later caught
        it; SIGTERM again, and on_sigterm ends it."""
        if not self.finished.wait(TERM_GRACE_S):
            try:
                os.kill(self.pid, signal.SIGTERM)
            except OSError:
                pass

    def _die_by_sigterm(self):
        self.out.info("the program caught Terminated (SIGTERM) and went on; writing the trace "
                      "and ending by SIGTERM, as python would have")
        self.finished.set()
        self.opened.set()
        try:
            with self.lock:
                if self.state == "open":
                    self._close("SIGTERM caught by the program", Terminated)
        finally:  # whatever happened to the write, the process ends
            _flush_stdio()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the signal is delivered before this returns
            os._exit(EXIT_SIGTERM)

    def _enter_critical(self):
        if _lifecycle.ending is not None:  # the program's os._exit / exec on another thread
            _lifecycle.park_if_ending()    # is closing the window: never wait on its lock
        self.lock.acquire()
        _lifecycle.hold()  # holding the lock: never parked (the ending thread may need it)
        if threading.current_thread() is threading.main_thread():
            self._critical += 1

    def _leave_critical(self):
        main = threading.current_thread() is threading.main_thread()
        if main:
            self._critical -= 1
        _lifecycle.release()
        self.lock.release()
        if main and not self._critical and self.signal_pending:
            signum, self.signal_pending = self.signal_pending, 0
            self._end_by_signal(signum)
        if main and not self._critical and self.term_pending and not self.finished.is_set():
            self.term_pending = False
            raise Terminated()

    # -- open / close --
    def open(self, why, trigger=None):
        """Opens the window unless it already opened (or the program ended). From any
        thread; never raises into the program (a failure is reported and the program goes
        on unprofiled)."""
        if self.state != "waiting":  # fast path for capture hooks after the window
            return False
        self._enter_critical()
        try:
            if self.state != "waiting" or self.finished.is_set():
                return False
            try:
                self.ctx.__enter__()
            except Exception as err:
                self.state = "failed"
                self.out.error(f"the profiling window could not open ({why}): "
                               f"{_open_error(err)}; the program continues unprofiled")
                return False
            self.state = "open"
            self.opened_by = why
            self.trigger = trigger
            self.open_at = time.monotonic()
            self.opened.set()
            if self.opts.delay or self.opts.capture:
                self.out.info(f"window opened at +{self.open_at - self.t0:.2f} s ({why})")
            return True
        finally:
            self._leave_critical()

    def opened_at_start(self):
        """The whole-run window, opened by main() before the program starts."""
        self.state = "open"
        self.opened_by = "program start"
        self.open_at = time.monotonic()
        self.opened.set()

    def close(self, why, exc_type=None):
        """Closes the window and writes the trace, if it is open. Never raises into the
        program."""
        if self.state != "open":
            return
        self._enter_critical()
        try:
            if self.state == "open":
                self._close(why, exc_type)
        finally:
            self._leave_critical()

    def _close(self, why, exc_type):
        self.state = "closed"
        self.closed_by = why
        if os.getpid() != self.pid:
            return
        o = self.opts
        window = getattr(self.ctx, "_window", None)
        if window is not None:  # in the trace's metadata: how this window came about
            window.notes["cprof_run"] = {
                "delay_s": o.delay, "duration_s": o.duration,
                "capture_range": o.capture_range, "opened_by": self.opened_by,
                "closed_by": why,
                "window_s": round(time.monotonic() - self.open_at, 6),
            }
        if o.delay or o.duration or o.capture:
            self.out.info(f"window closed at +{time.monotonic() - self.t0:.2f} s ({why})")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self.ctx.__exit__(exc_type, None, None)
        except Exception as err:
            self._save_elsewhere(err)
            return
        for w in caught:  # re-issued, but not ProfilerContext's "call save(path)" (ours below)
            if self.ctx.result is not None or "save(path)" not in str(w.message):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if self.ctx.result is None and caught:
            self._save_elsewhere(next((w.message for w in caught
                                       if "save(path)" in str(w.message)), None))
            return
        self._report_written(exc_type)

    def _save_elsewhere(self, err):
        """The trace could not be written where it was asked for (a full disk, a directory
        gone): the program has ended and no one can call save(), so cprof run writes it to
        the temporary directory instead (the current one if that refuses it too), or says
        plainly that it is lost."""
        from .context import save_instead
        why = _strip_prefix(err) if err is not None else "see the warning above"
        why = why.split("; the trace is kept in memory")[0].split("); call save(path)")[0]
        why = why.split("; call save(path)")[0]
        lead = "the trace could not be written ("  # ProfilerContext's warning, when it wrapped it
        why = why[len(lead):] if why.startswith(lead) else why
        window = getattr(self.ctx, "_window", None)
        if window is None or window.snapshot is None:
            self.out.error(f"the trace could not be written: {why}")
            return
        path, _, failures = save_instead(self.ctx, None)
        if path is None:
            self.out.error(f"the trace could not be written: {why}; nor in "
                           f"{'; '.join(failures)}: the trace is lost")
            return
        self.summary = self.ctx.summary
        self.out.error(f"the trace could not be written: {why}; it was written to {path} "
                       "instead")

    def _report_written(self, exc_type):
        ctx, out = self.ctx, self.out
        from .context import _fmt_size, memory_line
        summary = getattr(ctx, "memory_summary", None)
        if summary:
            out.info("memory: " + memory_line(summary))
        for path in ctx.memory_paths:
            out.info(f"memory snapshot written to {path} (open it at "
                     "https://pytorch.org/memory_viz)")
        r = ctx.result
        if r is None:  # ProfilerContext warned why (the program's exception took precedence)
            out.error("the trace could not be written (see the warning above)")
            return
        self.summary = ctx.summary
        out.info(f"trace written to {r.path} ({r.events} events, {_fmt_size(r.bytes)}, "
                 f"{r.seconds:.3f} s to write)")
        if exc_type is not None:
            out.info("the trace is partial: the program ended with "
                     f"{getattr(exc_type, '__name__', exc_type)} while the window was open")

    def hand_over(self):
        """The program opens a cprof window of its own (ProfilerContext, cprof.profile) while
        this one is open, from any thread: this one closes and its trace is written, so that the
        program's window opens and the program runs as it would without cprof run, rather
        than failing with WindowStateError (decision 178). Nothing reopens it afterwards."""
        if os.getpid() != self.pid:
            return
        # the lock first, whatever the state says: an open another thread has begun (--delay's
        # timer, a capture hook; CUPTI's enabling takes ms) holds it with the C window open and
        # the state still "waiting", a close with the state "closed" already and the C window
        # still open; the program's window would have been refused either way
        self._enter_critical()
        try:
            if self.state != "open":
                return
            self.out.info("the program opens a cprof window of its own: cprof run's window "
                          "closes here and its trace is written; the program's window records "
                          "from now on")
            self._close("the program opened its own cprof window", None)
        finally:
            self._leave_critical()

    def _lifecycle_end(self, reason):
        """The program called os._exit or exec (or the interpreter is exiting) with the
        window open (cprof/_lifecycle.py): closed and written now, partial, end reason."""
        self.finished.set()  # the timer stops; nothing opens the window any more
        self.opened.set()
        with self.lock:  # a close --duration's timer has begun finishes first (it is never
            # parked holding the lock: _lifecycle.hold)
            self.close(f"{reason} called by the program" if reason in ("os._exit", "exec")
                       else reason, reason)

    # -- timers --
    def start_timer(self):
        """--delay / --duration: one daemon thread, started before the window opens."""
        if not (self.opts.delay or self.opts.duration):
            return
        t = threading.Thread(target=self._timer, name="cprof-run-timer", daemon=True)
        t.start()

    def _timer(self):
        o = self.opts
        if o.delay:
            if self.finished.wait(o.delay):
                return
            if not self._after_torch_imports():
                return
            self.open(f"--delay {o.delay:g} s reached" +
                      ("; opened once the program's import of torch had finished"
                       if self.held_by_import else ""))
        if not o.duration:
            return
        self.opened.wait()  # a capture range may open it late, or never (finish() sets it)
        if self.finished.is_set() or self.open_at is None:
            return
        remaining = self.open_at + o.duration - time.monotonic()
        if remaining > 0 and self.finished.wait(remaining):
            return
        if self._after_torch_imports():
            self.close(f"--duration {o.duration:g} s reached")

    def _after_torch_imports(self):
        """Waits (on the timer thread) until no torch module is half imported. Opening or
        closing the window imports torch's modules; done while the program's thread is inside
        `import torch`, the two threads take the module locks in opposite orders and Python
        raises _DeadlockError into the program's import. held_by_import says it waited.
        Returns False when the program ended meanwhile."""
        while _torch_importing():
            self.held_by_import = True
            if self.finished.wait(0.005):
                return False
        return not self.finished.is_set()

    # -- the end --
    def finish(self, exc_type):
        """The program ended: close the window if it is still open (the trace is partial if
        exc_type is an exception that ended the program)."""
        self.finished.set()  # before the lock: the timer stops, SIGTERM is held back
        self.opened.set()
        with self.lock:
            if self.state == "open":  # a --duration or capture range cut short is normal
                why = "program end"
                if self.opts.capture:
                    why += f"; {self._capture_desc(ended=True)}"
                elif self.opts.duration:
                    why += f", before --duration {self.opts.duration:g} s"
                self._close(why, exc_type)
            elif self.state == "waiting":
                what = "the capture range never started" if self.opts.capture else \
                    "the window never opened"
                self.out.info(f"no trace written: {what} ({self._never_reason()})")

    def _capture_desc(self, ended=False):
        kind, name = self.opts.capture or (None, None)
        if kind == "api":
            return ("torch.cuda.profiler.stop() was not called" if ended
                    else "torch.cuda.profiler.start() was never called")
        return (f"range {name!r} still open" if ended
                else f"no range named {name!r} began")

    def _never_reason(self):
        if self.opts.capture:
            return self._capture_desc()
        if self.held_by_import:
            return (f"the program ended after {time.monotonic() - self.t0:.2f} s, while "
                    f"--delay {self.opts.delay:g} s waited for its import of torch to finish")
        return (f"the program ended after {time.monotonic() - self.t0:.2f} s, before "
                f"--delay {self.opts.delay:g} s")


def _torch_importing():
    """True while a thread is executing the import of torch or of one of its modules."""
    for name, module in list(sys.modules.items()):
        if (name == "torch" or name.startswith("torch.")) and \
                getattr(getattr(module, "__spec__", None), "_initializing", False):
            return True
    return False


class _Out:
    """cprof's messages: stderr only, "cprof: "-prefixed; --quiet drops the informational
    ones. sys.stderr is looked up at each message (the program may have redirected it)."""

    def __init__(self, quiet):
        self.quiet = quiet

    def _print(self, text):
        for stream in (sys.stderr, sys.__stderr__):
            if stream is None:  # print(file=None) would write to stdout
                continue
            try:
                print(text, file=stream, flush=True)
                return
            except Exception:  # closed or broken by the program: try the original
                continue

    def info(self, msg):
        if not self.quiet:
            self._print("cprof: " + msg)

    def error(self, msg):
        self._print("cprof: error: " + msg)


# ---------------------------------------------------------------- capture hooks

class _RangeCapture:
    """range:NAME. The window opens when a range named NAME begins (before cprof records its
    start, so the range is in the trace) and closes when the range depth of the thread that
    began it falls back below it (after cprof recorded its end). Depth is the C store's
    per-thread count of open ranges (_C.depth()), shared by cprof ranges, record_function and
    NVTX ranges, so one test covers every kind of range and recursion."""

    def __init__(self, session, name):
        self.session = session
        self.name = name

    def begin(self, name):
        s = self.session
        if s.state == "waiting" and name == self.name:
            s.open(f"range {name!r} began", trigger=(threading.get_ident(), _C.depth()))

    def check_end(self):
        s = self.session
        t = s.trigger
        if s.state == "open" and t is not None and t[0] == threading.get_ident() \
                and _C.depth() <= t[1]:
            s.close(f"range {self.name!r} ended")

    # -- cprof's own ranges: cprof.range is a C type (its __enter__ cannot be wrapped), so
    # the module-level names are replaced by factories that return a wrapper for NAME only;
    # other names get the C range itself, at the cost of one Python call while creating it.
    def install_cprof(self):
        from . import _ranges
        pkg = sys.modules[__package__]
        real_range, real_rf = _ranges.range, _ranges.record_function
        real_push, real_pop = _ranges.push, _ranges.pop
        cap = self

        @functools.wraps(real_range, assigned=("__doc__",), updated=())
        def range(name, *args, **kwargs):  # noqa: A001 -- replaces cprof.range
            r = real_range(name, *args, **kwargs)
            return _TriggerRange(cap, name, r) if name == cap.name else r

        @functools.wraps(real_rf)
        def record_function(name, args=None):
            r = real_rf(name, args)
            return _TriggerRange(cap, name, r) if name == cap.name else r

        @functools.wraps(real_push, assigned=("__doc__",), updated=())
        def push(name, *args, **kwargs):
            cap.begin(name)
            try:
                return real_push(name, *args, **kwargs)
            except BaseException:
                cap.check_end()
                raise

        @functools.wraps(real_pop, assigned=("__doc__",), updated=())
        def pop(*args, **kwargs):
            try:
                return real_pop(*args, **kwargs)
            finally:
                cap.check_end()

        for mod in (pkg, _ranges):
            mod.range, mod.record_function, mod.push, mod.pop = range, record_function, push, pop

    # -- torch's: wrapped outside cprof's own record_function / NVTX glue (see
    # _install_torch_hooks)
    def install_torch(self, torch):
        cap = self
        rf = torch.autograd.profiler.record_function
        if not getattr(rf, "_cprof_run_patched", False):
            prev_enter, prev_exit = rf.__enter__, rf.__exit__

            def __enter__(self):
                cap.begin(self.name)
                try:
                    return prev_enter(self)
                except BaseException:
                    cap.check_end()
                    raise

            def __exit__(self, exc_type, exc_value, traceback):
                try:
                    return prev_exit(self, exc_type, exc_value, traceback)
                finally:
                    cap.check_end()

            rf.__enter__, rf.__exit__ = __enter__, __exit__
            rf._cprof_run_patched = True
        nvtx = torch.cuda.nvtx
        if not getattr(nvtx, "_cprof_run_patched", False):
            prev_push, prev_pop = nvtx.range_push, nvtx.range_pop

            @functools.wraps(prev_push)
            def range_push(msg):
                cap.begin(str(msg))
                try:
                    return prev_push(msg)
                except BaseException:
                    cap.check_end()
                    raise

            @functools.wraps(prev_pop)
            def range_pop():
                try:
                    return prev_pop()
                finally:
                    cap.check_end()

            nvtx.range_push, nvtx.range_pop = range_push, range_pop
            nvtx._cprof_run_patched = True


class _TriggerRange:
    """A cprof range named NAME under --capture-range range:NAME: the C range inside, with the
    capture's begin / end checks around it. Context manager and decorator, like cprof.range."""

    __slots__ = ("_cap", "_name", "_range")

    def __init__(self, cap, name, rng):
        self._cap, self._name, self._range = cap, name, rng

    def __enter__(self):
        self._cap.begin(self._name)
        try:
            return self._range.__enter__()
        except BaseException:
            self._cap.check_end()
            raise

    def __exit__(self, exc_type, exc_value, traceback):
        try:
            return self._range.__exit__(exc_type, exc_value, traceback)
        finally:
            self._cap.check_end()

    def __call__(self, fn):
        from ._ranges import _decorate
        return _decorate(self, fn)

    def __getattr__(self, name):
        return getattr(self._range, name)


def _install_cuda_profiler_api(session, torch):
    """cudaProfilerApi: torch.cuda.profiler.start / stop (and profile(), which calls them
    through the module) open / close the window first and then call torch's function only if
    torch has CUDA: without CUDA torch's call raises (AssertionError on CPU builds, a CUDA
    error without a GPU), and the program would have failed for a reason that is not its own
    under a profiler. With CUDA, torch's call runs as before, so other tools listening to
    cudaProfilerStart/Stop see it. The CUDA runtime module's own cudaProfilerStart / Stop
    (`torch.cuda.cudart().cudaProfilerStart()`, as Megatron-LM and NeMo call it) open / close
    it too, on builds with CUDA; called from C/C++ it is not seen."""
    _install_cudart_profiler_api(session, torch)
    prof = torch.cuda.profiler
    if getattr(prof, "_cprof_run_patched", False):
        return
    prev_start, prev_stop = prof.start, prof.stop

    def cuda_ok():
        try:
            return torch.cuda.is_available()
        except Exception:
            return False

    @functools.wraps(prev_start)
    def start():
        session.open("torch.cuda.profiler.start()")
        if cuda_ok():
            return prev_start()
        return None

    @functools.wraps(prev_stop)
    def stop():
        session.close("torch.cuda.profiler.stop()")
        if cuda_ok():
            return prev_stop()
        return None

    prof.start, prof.stop = start, stop
    prof._cprof_run_patched = True


def _install_cudart_profiler_api(session, torch):
    """torch.cuda.cudart()'s cudaProfilerStart / cudaProfilerStop (torch._C._cudart, None on
    CPU builds) open / close the window before the runtime's call. torch.cuda.profiler's
    start / stop call them too, after opening / closing: the second open or close is a no-op."""
    rt = getattr(torch.cuda, "_cudart", None)
    if rt is None or getattr(rt, "_cprof_run_patched", False):
        return
    prev_start = getattr(rt, "cudaProfilerStart", None)
    prev_stop = getattr(rt, "cudaProfilerStop", None)
    if prev_start is None or prev_stop is None:
        return

    def cudaProfilerStart(*args, **kwargs):
        session.open("cudaProfilerStart()")
        return prev_start(*args, **kwargs)

    def cudaProfilerStop(*args, **kwargs):
        session.close("cudaProfilerStop()")
        return prev_stop(*args, **kwargs)

    try:
        rt.cudaProfilerStart, rt.cudaProfilerStop = cudaProfilerStart, cudaProfilerStop
        rt._cprof_run_patched = True
    except (AttributeError, TypeError):  # a runtime module that takes no attributes
        rt.cudaProfilerStart, rt.cudaProfilerStop = prev_start, prev_stop


class _OnTorchImport(importlib.abc.MetaPathFinder):
    """Calls callback(torch) once ``import torch`` has completed (torch.cuda.profiler,
    torch.cuda.nvtx and torch.autograd.profiler are imported by it). The capture hooks need
    torch's functions, but importing torch here would change the program (it may set
    CUDA_VISIBLE_DEVICES or other environment before its own import), so the hooks are put
    in when the program imports torch."""

    def __init__(self, callback):
        self.callback = callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        try:
            sys.meta_path.remove(self)  # once; and find_spec below must not find us again
        except ValueError:
            pass
        spec = importlib.util.find_spec("torch")
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module, callback = loader.exec_module, self.callback

        def exec_then_hook(*args, **kwargs):
            # (*args, **kwargs): a pass-through wrapper to the tracer, which then records
            # torch's import under it (it records nothing under other cprof code)
            exec_module(*args, **kwargs)
            _safe_hook(callback, args[0] if args else kwargs["module"])

        loader.exec_module = exec_then_hook
        return spec


def _safe_hook(callback, torch):
    try:
        callback(torch)
    except Exception as err:  # a capture hook must never break the program's import
        warnings.warn(f"cprof run: the capture hooks could not be installed in torch: {err}",
                      RuntimeWarning, stacklevel=2)


def _catch_up_torch(session, torch):
    """What the window would have captured had torch been imported when it opened. cprof's
    torch glue (cprof/_glue.py) is installed when a window opens, and only if torch is
    imported then; cprof run usually opens its window before the program imports torch, which
    would lose every record_function range and, with --record-shapes, every module call.
    Runs inside `import torch`, on the importing thread. The glue's patch functions are called
    directly (they are idempotent per class / module): a window opened by the timer thread
    while torch was half imported has marked them done without patching anything."""
    from . import _glue, _graphs
    _graphs.install(torch)  # the timer thread's closing synchronize waits for a capture
    _glue._patch_record_function(torch)  # records only while a window is open: always safe
    _glue._patched["record_function"] = True
    _glue._patch_dist(torch)  # the backend outlives the program's destroy_process_group
    _glue._patched["dist"] = True
    # Not blocking here: the timer thread may hold the lock while opening the window and wait
    # for this import to finish (the module capture imports torch.nn); that window then sets
    # itself up with torch, which is in sys.modules already.
    if not session.lock.acquire(blocking=False):
        return
    try:
        window, prof = session.ctx._window, session.ctx._prof
        if session.state != "open" or window is None or not window.gpu:
            # NVTX from Python, unless an open window records it through CUPTI: both would
            # record each NVTX range twice
            _glue._patch_nvtx(torch)
            _glue._patched["nvtx"] = True
        if session.state != "open" or prof._glue is None:
            return
        from . import _modules
        if (prof.record_shapes or prof.with_modules) and _modules._installed is None:
            # removed with the rest of the window's glue when the window closes
            prof._glue.parts.append(_modules.install(record_shapes=prof.record_shapes))
        elif prof.with_stack and prof._glue.stack_why is None:
            _glue.stack_modules(prof._glue, prof.with_modules, prof.record_shapes)
        _catch_up_ops(prof._glue, prof.record_ops, prof.record_shapes)
        _catch_up_compiled(prof._glue, prof.with_stack)
        _catch_up_async(prof._glue)
        _catch_up_memory_events(prof)
    finally:
        session.lock.release()


def _catch_up_async(glue):
    """Collectives' gloo: / nccl: ranges from now on in the open window, as a window opened
    with torch imported records them (_glue.install: _ops.install_async)."""
    if glue.async_why is None:  # captured already
        return
    from . import _ops
    part, glue.async_why = _ops.install_async()
    if part is not None:
        glue.parts.append(part)


def _catch_up_memory_events(prof):
    """torch's allocation reports ("[memory]" events) from now on in the open window, when it
    tracks memory: what memory_begin does with torch imported (_glue._events_begin), on this,
    the importing thread; and CUDA memory history from the program's first CUDA use
    (_glue.cuda_history_later: asking torch.cuda.is_available() inside `import torch` would
    fix the visible devices before the program sets them)."""
    if not prof.profile_memory:
        return
    from . import _glue
    if not getattr(prof, "_mem_events", None) and \
            getattr(prof, "_mem_events_why", None) == _glue.NO_TORCH:
        _glue._events_begin(prof)
    torch = sys.modules.get("torch")
    if torch is not None:
        _glue.cuda_history_later(prof, torch)


def _catch_up_compiled(glue, with_stack):
    """torch.compile's regions (and so graph breaks) from now on in the open window: the
    capture needs torch, which the program imports after the window opened. Not with torch's
    operators captured: their own compiled-region ranges come with them."""
    if any(hasattr(p, "ops_note") or hasattr(p, "note") for p in glue.parts):
        return
    from . import _compiled
    regions = _compiled.install(with_stack=with_stack)
    if regions is not None:
        glue.parts.append(regions)


def _catch_up_ops(glue, record_ops, record_shapes=False):
    """torch's operators from now on in the open window (cprof/_ops.py); torch's own compiled
    region ranges then come with them, so cprof's region capture steps aside."""
    if not record_ops or any(hasattr(p, "ops_note") for p in glue.parts):
        return
    from . import _ops
    part, glue.ops = _ops.install(record_shapes=record_shapes)
    if part is None:
        return
    for p in [p for p in glue.parts if hasattr(p, "note")]:  # cprof/_compiled.py's capture
        glue.parts.remove(p)
        p.remove()
    glue.parts.append(part)
    # as _glue.install says it when torch came first: a trace without cprof's region capture
    # says why, so no region is never read as no graph break (docs/usage.md)
    glue.regions_how = {"mode": "torch operators",
                        "reason": "torch's own region ranges come with its operators"}


def _install_torch_hooks(session, capture):
    """cprof's torch glue and the capture hooks, now if torch is imported, else when the
    program imports it. The capture's wrappers go on after the glue: outermost, the window
    is open before the glue records a range's start and closes after it recorded its end."""
    range_capture = None
    if capture is not None and capture[0] == "range":
        range_capture = _RangeCapture(session, capture[1])
        range_capture.install_cprof()

    def hook(torch):
        _catch_up_torch(session, torch)
        if range_capture is not None:
            range_capture.install_torch(torch)
        elif capture is not None:
            _install_cuda_profiler_api(session, torch)

    torch = sys.modules.get("torch")
    if torch is None:
        from . import _glue
        _glue.ops_at_torch_import = True  # _catch_up_ops: the window's C calls are no ops
    if torch is not None:
        _safe_hook(hook, torch)
    else:
        sys.meta_path.insert(0, _OnTorchImport(hook))


# ---------------------------------------------------------------- running the program

# --with-stack runs the program from this bootstrap, in a fresh interpreter image (os.execv:
# same process id, so torchrun, kill and a shell's job control see one process). Why: the
# tracer records nothing under cprof's own frames (cprof/_pystack.py), and a program started
# from cprof/__main__.py and main() below would run entirely under them. Here the program's
# code is called straight from this `-c` module, which is not cprof's; the trace then starts
# at the program's "<module>" as torch.profiler's does. Without --with-stack nothing is
# traced per call and the program runs in this process directly.
_BOOTSTRAP = """\
import sys
from cprof._cli_run import _Run
_run = _Run(sys.argv[1:], reexec=False)
if _run.program is not None:
    try:
        _run.program()
    except BaseException as _exc:
        _run.ended(_exc)
    else:
        _run.ended(None)
_run.exit()
"""


def _cprof_lines_for_cprof_warnings():
    """cprof run prints only `cprof: ` lines of its own: its warnings (a GPU asked for and not
    there, ...) are raised from inside the program's frames (runpy's, the program's), which
    Python would print as `<frozen runpy>:88: GpuUnavailableWarning: cprof: ...`. The program's
    own warnings are shown as Python shows them."""
    shown = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        text = str(message)
        if text.startswith("cprof: "):
            try:
                (file or sys.stderr).write(text + "\n")
            except (OSError, ValueError):
                pass
            return
        shown(message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning


def main(argv):
    """`cprof run` with the arguments after `run`; returns the exit code."""
    _cprof_lines_for_cprof_warnings()
    run = _Run(list(argv), reexec=True)
    if run.program is not None:
        try:
            run.program()
        except BaseException as exc:  # noqa: B036 -- everything the program can raise
            run.ended(exc)
        else:
            run.ended(None)
    run.die_by_signal()
    return run.exit_code


class _Run:
    """One `cprof run`: parses and checks the arguments, sets the process up as python would
    for the program, and opens (or arms) the window. Then the caller calls program() (the
    program's module code as a function, so no cprof frame sits between the caller and the
    program) and ended() with what it raised. exit_code is set when program is None (bad
    input: 2, --help: 0, the window could not open: 1) and after ended()."""

    def __init__(self, argv, reexec):
        self.program = None
        self.exit_code = None
        self.session = None
        try:
            opts, kind, target, prog_args = _configure(argv)
        except SystemExit as exc:  # argparse: usage errors (2) and --help (0)
            self.exit_code = exc.code if isinstance(exc.code, int) else EXIT_USAGE
            return
        if opts.with_stack and reexec:
            _reexec(argv)  # returns only if exec failed
        self.opts = opts
        out = self.out = _Out(opts.quiet)
        if _is_launcher(kind, target):
            out.info("the program is torch's launcher: this profiles the launcher only, not the "
                     "ranks it starts (other processes); to profile each rank run "
                     "`torchrun [its options] -m cprof run [cprof's options] prog.py [args]`")
        from . import _pystack
        from .context import ProfilerContext
        _pystack.record_running_frames = False  # what runs under the program is cprof's
        ctx = ProfilerContext(activities=opts.activities, output_dir=opts.output_dir,
                              profile_name=opts.name or opts.default_name,
                              with_stack=opts.with_stack, record_shapes=opts.record_shapes,
                              record_ops=opts.record_ops,
                              gzip=opts.gzip, verbose=False)  # cprof run prints, to stderr
        # a snapshot that cannot be written where asked goes to $TMPDIR: the program ends
        # with the window, so no one can call save_memory_snapshot() (decision 138)
        ctx._memory_unreachable = True
        # torch is usually imported after the window opens: CUDA memory history then starts
        # at the program's first CUDA use (_catch_up_memory_events), not refused at the start
        ctx._prof._cuda_memory_later = True
        _set_nvtx_injection(opts.activities)
        _set_sys_path(kind, target)
        try:  # compiled (and for -m, found) before the window: python does so too
            self.code, self.module = _load_program(kind, target, prog_args)
        except Exception as exc:  # a SyntaxError, or -m's package failed to import
            _print_exception(exc, None)
            self.exit_code = 1
            return
        session = self.session = _Session(ctx, opts, out)
        # the program's os._exit / exec (or an exit with the window open) closes the window
        # through the session, so cprof run's lock, messages and fallback write apply
        ctx._prof._lifecycle_owner = weakref.ref(session)
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
                and _C.signal_default(signal.SIGTERM)):  # no C handler either
            # SIGTERM (torchrun, schedulers, kill) would end the process without writing the
            # trace: raise Terminated in the main thread instead. Not in forked children
            # (DataLoader workers, multiprocessing pools): they write no trace, and a
            # terminate() must end them as it would without cprof.
            signal.signal(signal.SIGTERM, session.on_sigterm)
            os.register_at_fork(after_in_child=session.forked)
        if threading.current_thread() is threading.main_thread():
            for sig in OTHER_ENDING_SIGNALS:  # left alone where the program set them up
                if signal.getsignal(sig) is signal.SIG_DFL and _C.signal_default(sig):
                    signal.signal(sig, session.on_ending_signal)
        from . import _window
        _window.yield_to_program = session.hand_over
        session.t0 = time.monotonic()  # --delay counts from here: the program starts next
        session.start_timer()  # before the window opens, so the tracer never sees its thread
        _install_torch_hooks(session, opts.capture)
        if not opts.capture and not opts.delay:
            try:
                ctx.__enter__()  # the whole run: if the window cannot open, do not run
            except Exception as err:
                session.finished.set()
                session.opened.set()
                out.error(f"the profiling window could not open: {_open_error(err)}; the "
                          "program was not run")
                self.exit_code = 1
                return
            session.opened_at_start()
        import types
        self._saved_main = sys.modules.get("__main__")
        sys.modules["__main__"] = self.module
        # a module's code called as a function runs with its globals as locals, as exec does
        self.program = types.FunctionType(self.code, self.module.__dict__)

    def die_by_signal(self):
        """Ends the process by the signal that ended the program (its trace already written),
        as python itself does, so the exit status is the same as without cprof."""
        sig = getattr(self, "exit_signal", None)
        if sig is None:
            return
        _flush_stdio()
        try:
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):  # not the main thread, or not allowed: the 128+N status
            return

    def exit(self):
        self.die_by_signal()
        sys.exit(self.exit_code)

    def ended(self, exc):
        """The program returned (exc None) or raised exc: close the window, write the trace,
        print what python would, set exit_code."""
        code, exc_type, shown = 0, None, None
        if isinstance(exc, SystemExit):
            code = _exit_code(exc)
            exc_type = SystemExit if code != 0 else None
        elif isinstance(exc, KeyboardInterrupt):
            code, exc_type, shown = EXIT_SIGINT, KeyboardInterrupt, exc
        elif isinstance(exc, Terminated):
            code, exc_type = EXIT_SIGTERM, Terminated
        elif exc is not None:
            code, exc_type, shown = 1, type(exc), exc
        session = self.session
        session.finish(exc_type)  # the trace first: printing the traceback is not the program's
        sys.modules["__main__"] = self._saved_main
        if shown is not None:
            _print_exception(shown, self.code)
        if exc_type is Terminated or session.term_pending:  # pending: it came during the write
            self.out.info("terminated by SIGTERM")
            code = EXIT_SIGTERM
        # python ends by the signal itself after an uncaught KeyboardInterrupt (and SIGTERM
        # kills it): the parent sees -2 / -15, not 130 / 143; so does cprof run's
        self.exit_signal = {EXIT_SIGINT: signal.SIGINT, EXIT_SIGTERM: signal.SIGTERM}.get(code) \
            if exc_type in (KeyboardInterrupt, Terminated) or code == EXIT_SIGTERM else None
        if self.opts.report and session.summary is not None:
            from ._summary import format_summary
            self.out._print(format_summary(session.summary, top=20,
                                           title="cprof: CPU ranges of the window"))
        self.exit_code = code


def _flush_stdio():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _reexec(argv):
    """Replaces this process by `python <same interpreter flags> -c _BOOTSTRAP argv...`."""
    import subprocess
    try:
        flags = subprocess._args_from_interpreter_flags()  # -X, -W, -E, -I, ... as given
    except Exception:
        flags = []
    if getattr(sys.stdout, "write_through", False) and "PYTHONUNBUFFERED" not in os.environ:
        flags.append("-u")  # not among sys.flags
    _flush_stdio()
    try:
        os.execv(sys.executable, [sys.executable, *flags, "-c", _BOOTSTRAP, *argv])
    except OSError as err:
        warnings.warn(f"cprof run: could not restart Python for --with-stack ({err}); the "
                      "program runs under cprof's frames and its calls are not recorded",
                      RuntimeWarning, stacklevel=2)


def _is_launcher(kind, target):
    """torchrun / python -m torch.distributed.run (or .launch): its workers are other
    processes, which a cprof run of the launcher never sees."""
    if kind == "module":
        return target in ("torch.distributed.run", "torch.distributed.launch")
    return kind == "script" and os.path.basename(str(target)) == "torchrun"


def _load_program(kind, target, prog_args):
    """(code, module) of the program, with sys.argv set, as python sets them up. A script
    (python 3.9+): sys.argv[0] as given, __file__ and the code's file name absolute, so
    tracebacks (and a program that changes directory) see what they see without cprof.
    -m: runpy's own lookup (as pdb uses it): __spec__, __file__ = sys.argv[0] = the module's
    file. A directory or zip file: runpy.run_path runs its __main__.py."""
    import builtins
    import types
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = builtins
    if sys.version_info < (3, 14):  # the interpreter's __main__ has it (lazy from 3.14 on)
        module.__dict__["__annotations__"] = {}
    if kind == "module":
        _, spec, code = runpy._get_module_details(target)
        module.__dict__.update(__file__=spec.origin, __cached__=spec.cached,
                               __loader__=spec.loader, __package__=spec.parent, __spec__=spec)
        sys.argv = [spec.origin] + list(prog_args)
        return code, module
    sys.argv = [target] + list(prog_args)
    if not os.path.isfile(target) or target.endswith((".pyc", ".zip", ".pyz")):
        module.__dict__.update(__file__=target, __package__=None, __spec__=None)
        code = compile(f"import runpy\nrunpy.run_path({target!r}, run_name='__main__')\n",
                       "<cprof run>", "exec")
        return code, module
    import importlib.machinery
    import io
    path = os.path.abspath(target)
    with io.open_code(path) as f:
        source = f.read()
    code = compile(source, path, "exec", dont_inherit=True)
    module.__dict__.update(__file__=path, __cached__=None, __package__=None, __spec__=None,
                           __loader__=importlib.machinery.SourceFileLoader("__main__", path))
    return code, module


def _print_exception(exc, code):
    """As python prints an uncaught exception: through sys.excepthook (the program may have
    set its own), which prints the exception's own __traceback__, here from the program's
    first frame (code) on: cprof's frames (and the bootstrap's) are not shown. code None (the
    program could not be loaded): cprof's, runpy's and the import system's frames are not."""
    tb = exc.__traceback__
    if code is not None:
        while tb is not None and tb.tb_frame.f_code is not code:
            tb = tb.tb_next
    else:
        ours = (__file__, runpy.run_module.__code__.co_filename)
        while tb is not None and (tb.tb_frame.f_code.co_filename in ours or
                                  tb.tb_frame.f_code.co_filename.startswith("<frozen importlib")):
            tb = tb.tb_next
    if tb is not None or code is None:
        exc.__traceback__ = tb
    try:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    except Exception:
        import traceback
        traceback.print_exception(type(exc), exc, exc.__traceback__)


def _exit_code(exc):
    """The exit status Python gives a SystemExit (printing a non-integer code, as it does)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    try:
        print(code, file=sys.stderr, flush=True)
    except Exception:
        pass
    return 1


def _set_nvtx_injection(activities):
    """NVTX reaches CUPTI only if NVTX_INJECTION64_PATH names libcupti when the process makes
    its first NVTX call, which may be in the program before the window opens: set it now
    (unless set) when GPU activity is recorded."""
    if "GPU" not in activities or "NVTX_INJECTION64_PATH" in os.environ:
        return
    try:
        from ._features import cuda_info, gpu_unavailable_reason
        if gpu_unavailable_reason() is None:
            path = cuda_info()["cupti"]["path"]
            if path:
                os.environ["NVTX_INJECTION64_PATH"] = path
    except Exception:
        pass


def _configure(argv):
    """Parses argv; returns (opts, kind, target, program args) or raises SystemExit(2) with
    argparse's usage message."""
    parser = _parser()
    own, kind, target, prog_args = _split(argv)
    opts = parser.parse_args(own)  # -h exits 0, unknown options exit 2
    try:
        if opts.activities is not None:
            names = [a.strip() for a in opts.activities.split(",") if a.strip()]
            if not names:
                raise _Usage("--activities is empty; pass one or more of CPU, GPU, MEM "
                             "separated by commas")
            from .context import normalize_activities
            opts.activities = normalize_activities(names)
        else:
            opts.activities = _default_activities()
        for flag, value in (("--delay", opts.delay), ("--duration", opts.duration)):
            if value is not None and not math.isfinite(value):
                raise _Usage(f"{flag} must be a finite number of seconds, got {value}")
            if value is not None and value > threading.TIMEOUT_MAX:  # the timer waits that long
                raise _Usage(f"{flag} must be at most {threading.TIMEOUT_MAX:.0f} seconds "
                             f"(threading.TIMEOUT_MAX, the longest wait Python allows), got "
                             f"{value:g}")
        if opts.delay is not None and opts.delay < 0:
            raise _Usage(f"--delay must be 0 or more seconds, got {opts.delay:g}")
        if opts.duration is not None and opts.duration <= 0:
            raise _Usage(f"--duration must be more than 0 seconds, got {opts.duration:g}")
        opts.capture = _parse_capture(opts.capture_range) if opts.capture_range else None
        if opts.capture and opts.delay:
            raise _Usage("--delay cannot be combined with --capture-range: the capture range "
                         "decides when the window opens")
        if opts.name is not None:
            from .context import check_profile_name
            try:
                check_profile_name(opts.name)
            except ValueError as err:
                raise _Usage("--name " + _strip_prefix(err).replace("profile_name ", "", 1)
                             ) from None
        if opts.output_dir is not None and not opts.output_dir.strip():
            raise _Usage("--output-dir is empty; pass a directory (or leave the option out "
                         "for $CPROF_PROFILER_DIR, else $CPROF_TORCH_PROFILER_DIR, else "
                         "/tmp/cprof_profiles)")
        if kind == "module":
            _set_sys_path(kind, target)  # find_spec must search where the program will
        opts.default_name = _file_name(_check_program(kind, target))
        from .context import default_output_dir
        from ._window import check_output_dir
        opts.output_dir = os.path.abspath(opts.output_dir or default_output_dir())
        # now, not after an hour of the program
        check_output_dir(opts.output_dir, "pass another --output-dir or set CPROF_PROFILER_DIR")
        # the variables cprof.profile checks when it is made: a typo in one is bad input too,
        # said as such (it was a traceback from inside ProfilerContext)
        from ._window import env_gpu_buffer_mb
        env_gpu_buffer_mb()
        if "MEM" in opts.activities:
            from ._glue import memory_interval_us
            memory_interval_us()
        if opts.record_ops:
            from ._ops import capture_choice
            capture_choice()
    except (_Usage, ValueError, OSError) as err:
        parser.error(_strip_prefix(err))
    return opts, kind, target, prog_args


def _set_sys_path(kind, target):
    """sys.path[0] as python sets it: the script's directory (symlinks resolved), the current
    directory for -m. sys.path[0] is the entry python put there for `python -m cprof` or the
    `cprof` console script; with -P / PYTHONSAFEPATH python adds none and neither do we."""
    if getattr(sys.flags, "safe_path", False):  # -P, Python 3.11+
        return
    if kind == "module":
        entry = os.getcwd()
    elif os.path.isdir(target) or not os.path.isfile(target):
        entry = None  # a directory or zip file: runpy.run_path puts it first itself
    else:
        entry = os.path.dirname(os.path.realpath(target))
    if entry is None:
        if sys.path:
            del sys.path[0]
    elif sys.path:
        sys.path[0] = entry
    else:
        sys.path.insert(0, entry)
