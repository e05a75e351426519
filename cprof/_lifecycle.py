"""What happens to an open window when the process ends abnormally or forks.

Each started profiler (cprof.profile between start() and stop(); a ProfilerContext runs on
one and is registered in its place, so its own file naming is used) is kept here with what
ends its window, marked partial, on the way out:

- SIGTERM: while a profiler runs, if it was started in the main thread and SIGTERM has the
  default disposition, a handler is installed that ends the window with end "SIGTERM" (the
  trace is written as the owner writes it: ProfilerContext's file, cprof.profile's
  on_trace_ready), restores the default and raises SIGTERM again, so the process dies as it
  would have (status -15, shell 143). It is removed when the last profiler stops. A handler
  the program installed (before or during the window), SIG_IGN and `cprof run`'s own handler
  are left alone; cprof then does nothing on SIGTERM. Python runs signal handlers in the main
  thread only, between bytecodes: a profiler started from another thread gets no handler (the
  process dies of SIGTERM without a trace), and a main thread inside a long C call writes
  (and dies) only when that call returns; SIGKILL is unaffected. A SIGTERM that arrives while
  cprof itself opens, steps into a new window, or closes and writes one waits until that is
  done; a second SIGTERM during the write is ignored (the first one ends the process).
- SIGHUP (a terminal or ssh session gone; torchrun forwards it) and SIGQUIT: the same as
  SIGTERM, the end reason "SIGHUP" / "SIGQUIT", the process then dies of that signal. Each
  signal is taken only where its disposition is the default both in Python's table and in
  the process (a C handler such as faulthandler.register's is left alone). SIGUSR1/2 are not
  taken.
- Interpreter exit with the window still open (start() never stopped, __enter__ without a
  with-block, sys.exit or an uncaught exception outside any with-block): an atexit hook ends
  it with end "exit", or the name of the uncaught exception that ended the program
  (KeyboardInterrupt for Ctrl-C).
- os._exit (a program skipping its teardown, from any thread) and os.exec* (the process image
  replaced) while a window is open: the windows are ended first, end "os._exit" / "exec",
  then the call goes on. While windows are open (only then) os._exit, os.execv and
  os.execve are wrappers; os.execl / execle / execlp / execlpe / execvp / execvpe go through
  the last two. A forked child's call passes straight through (its parent writes), and so
  does one from code cprof runs inside its own stop or step (an on_trace_ready: the window
  is already stopped and that code has it). SIGKILL leaves no trace.
- fork: the child has no window (csrc/events.c forgets it at fork); here its tracer and
  module capture are removed and a SIGTERM handler of ours goes back to the default; the
  profiler's step / stop / exit and the window's write in the child do nothing (profilers
  count forks, windows remember their pid), noted at DEBUG level on the "cprof" logger only.
  GPU state is not touched in the child.

Threads: everything runs with the GIL; critical sections count on any thread (a SIGTERM
pending when a non-main thread leaves the last one is delivered to the main thread again);
installing, removing and acting on the handler happen in the main thread only."""
import atexit
import os
import signal
import sys
import threading
import warnings

from . import _warn

_running = []          # (profile, owner) of each started profiler, oldest first
_unsaved = []          # contexts whose trace could not be written and waits for save()
_pid = None            # the process that registered them
_last_exc_at_open = None
_handler_installed = False
_atexit_registered = False
# thread ident -> how deep it is inside cprof's start / step / stop (only threads inside: the
# dict is empty when none is; each change is one store, so an interrupt never splits it)
_critical_threads = {}
ending = None          # the thread ending the windows before os._exit / exec (ident), or None
_ending_over = threading.Event()  # set when that process end did not happen (a failed exec)
_held = threading.local()  # .n > 0: this thread holds a lock a process end may need (cprof run)
PARK_LIMIT_S = 60.0    # a parked thread goes on after this: a lock cycle through user code
_term_pending = 0      # the ending signal held back while cprof was busy (0: none)
_terminating = False
forks = 0              # forks this process descends from (os.fork children): cheaper than getpid

EXIT_STATUS_SIGTERM = 128 + signal.SIGTERM
# signals whose default action ends the process and that a job gets on purpose: a scheduler
# or torchrun stopping it (SIGTERM; torchrun forwards SIGHUP and SIGQUIT too), a terminal or
# ssh session gone (SIGHUP). Each only where its disposition is the default, in Python's
# table and in the process's (a faulthandler.register(SIGQUIT) is left alone). SIGUSR1/2 are
# not taken: programs give them meanings of their own
ENDING_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP", "SIGQUIT")
                       if hasattr(signal, n))


def debug(msg, *args):
    """A note for the "cprof" logger at DEBUG level; never printed by default. Nothing where
    the program has not imported logging (no handler could print it): importing it takes
    milliseconds, too long in a forked child's at-fork hooks (a Pool worker, decision 152)."""
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.getLogger("cprof").debug(msg, *args)


def _main_thread():
    return threading.current_thread() is threading.main_thread()


def _last_exc():
    return getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)


# ---- registration (cprof.profile start / stop, inside a critical section) ----

def opened(key, owner):
    """key (a cprof.profile) started; owner._lifecycle_end(reason) ends its window."""
    global _pid, _last_exc_at_open, _atexit_registered
    if _pid != os.getpid():
        _running.clear()
        _pid = os.getpid()
    _running.append((key, owner))
    _last_exc_at_open = _last_exc()
    if not _atexit_registered:
        # registered at the first window, so it runs before the handlers registered earlier
        # (atexit is last in, first out), torch's and logging's included
        atexit.register(_at_exit)
        _atexit_registered = True
    _install_sigterm()
    _install_process_end_hooks()


def closed(key):
    """key stopped (also when its stop failed)."""
    _running[:] = [r for r in _running if r[0] is not key]
    if not _running:
        _remove_process_end_hooks()
    if not _critical_threads and not _terminating:
        _sync_sigterm()


UNSAVED_MAX = 4  # failed windows held for save() at once: each holds its whole window


def keep_unsaved(owner):
    """owner's closed window could not be written and waits for save(): if the process ends
    first, owner._write_unsaved("exit") writes it elsewhere (nothing may be lost silently).
    At most UNSAVED_MAX wait: a program that catches the error from one new context after
    another would otherwise hold every failed window until it ends; the oldest is written
    elsewhere now instead."""
    if not any(o is owner for o in _unsaved):
        _unsaved.append(owner)
    owner._unsaved_forks = forks  # a child forked after this has no such trace to write
    while len(_unsaved) > UNSAVED_MAX:  # the newer failure is what the caller is told of
        write_unsaved_anyway(_unsaved.pop(0), f"{UNSAVED_MAX} later windows' writes failed too")


def write_unsaved_anyway(owner, when):
    """owner._write_unsaved(when) where no caller can take an exception: what it says is
    warned, never raised (-W error), and a failure is said, not raised."""
    with _warn.never_raised():
        try:
            owner._write_unsaved(when)
        except Exception as err:  # noqa: BLE001 - said, and the next one is still written
            _warn.warn(f"cprof: an unsaved trace could not be written ({when}): {err}")


def saved(owner):
    """owner's unsaved window was written (or given up by its owner)."""
    _unsaved[:] = [o for o in _unsaved if o is not owner]


def running():
    """The started profilers of this process, oldest first (tests)."""
    return [k for k, _ in _running] if _pid == os.getpid() else []


def park_if_ending():
    """Another thread is ending the windows because the process is about to end (os._exit,
    exec): a start / step / stop / exit from this thread now would race that close (a step
    finding its window gone raised, and the program died of that instead). It waits: the
    process ends meanwhile, or (a failed exec) the wait is over and it goes on."""
    over, t = _ending_over, ending
    if t is None or t == threading.get_ident() or _pid != os.getpid():
        return
    if threading.get_ident() in _critical_threads or getattr(_held, "n", 0):
        # already inside cprof's open / step / close (or holding cprof run's session lock):
        # the ending thread waits for exactly this to finish; parking here would stall it
        return
    # bounded: an on_trace_ready run by the ending thread may want a lock this thread holds
    # around its step(); after the limit this thread goes on (and may find its window gone)
    over.wait(PARK_LIMIT_S)


def hold():
    """This thread holds a lock the ending of windows may need (cprof run's session lock):
    it must not park (park_if_ending) until release()."""
    _held.n = getattr(_held, "n", 0) + 1


def release():
    _held.n = getattr(_held, "n", 0) - 1


def enter_critical(owner=None):
    """cprof's start / step / stop is running (any thread): a SIGTERM waits until it is done,
    so the window is never ended half-opened or half-closed. Returns this thread's depth
    before, for leave_critical. owner (the profile or context): its outermost section's depth
    is kept on it (_critical_at) until that section is left, for leave_left_over."""
    if ending is not None:
        park_if_ending()
    ident = threading.get_ident()
    before = _critical_threads.get(ident, 0)
    if owner is not None and getattr(owner, "_critical_at", None) is None:
        owner._critical_at = before
    _critical_threads[ident] = before + 1
    return before


def critical_depth():
    """How deep this thread is inside cprof's open / step / close (0: not)."""
    return _critical_threads.get(threading.get_ident(), 0)


def leave_left_over(owner):
    """A section owner entered that an interrupt kept from being left: leave it now (called
    from owner's handlers of interrupts, and when its window has closed)."""
    depth = getattr(owner, "_critical_at", None)
    if depth is not None:
        leave_critical(depth, owner)


def leave_critical(depth=None, owner=None):
    """Leaves the section entered by the enter_critical() that returned depth (None: the
    innermost). With depth it is idempotent: a KeyboardInterrupt landing at this call's entry
    (a Ctrl-C at the wrong moment) left the section counted for good, which held back every
    later SIGTERM; owner's handler leaves it again (leave_left_over)."""
    global _term_pending
    ident = threading.get_ident()
    now = _critical_threads.get(ident, 0)
    target = max(now - 1, 0) if depth is None else depth
    if now > target:
        if target > 0:
            _critical_threads[ident] = target
        else:
            _critical_threads.pop(ident, None)
    if owner is not None and depth is not None and getattr(owner, "_critical_at", None) == depth:
        owner._critical_at = None  # (after the store: an interrupt before it leaves it to redo)
    if now <= target:
        return  # left already
    if _critical_threads or _terminating:
        return
    if _term_pending:
        signum, _term_pending = _term_pending, 0
        if _main_thread():
            _terminate(signum)
        else:  # the handler must run in the main thread: deliver it there again
            import _thread
            _thread.interrupt_main(signum)
            return
    _sync_sigterm()


# ---- SIGTERM, SIGHUP, SIGQUIT ----

def _sync_sigterm():
    if not _running:
        _remove_sigterm()


def _install_sigterm():
    """Our handler for each ending signal that has the default disposition (main thread)."""
    global _handler_installed
    if _handler_installed or not _main_thread():
        return
    from . import _C
    for sig in ENDING_SIGNALS:
        try:
            if signal.getsignal(sig) is not signal.SIG_DFL or not _C.signal_default(sig):
                # the program's own handler (or SIG_IGN, or cprof run's), or one installed in
                # C that Python's table does not show (faulthandler.register): left alone
                continue
            signal.signal(sig, _on_sigterm)
        except (ValueError, OSError):  # not the main interpreter, or signals unavailable
            return
        _handler_installed = True


def _restore_defaults():
    for sig in ENDING_SIGNALS:
        try:
            if signal.getsignal(sig) is _on_sigterm:
                signal.signal(sig, signal.SIG_DFL)
        except (ValueError, OSError):
            pass


def _remove_sigterm():
    global _handler_installed
    if not _handler_installed or not _main_thread():
        return  # from another thread it stays until a close in the main thread: harmless
    _handler_installed = False
    _restore_defaults()


def _on_sigterm(signum, frame):
    """SIGTERM, SIGHUP (a closed terminal or ssh session, torchrun stopping its workers) or
    SIGQUIT with the default disposition: the open windows are written, then the process dies
    of that signal as it would have."""
    global _term_pending
    if _terminating:
        return  # a second signal while the trace is written: the first one ends the process
    if _critical_threads:
        _term_pending = signum  # acted on when cprof's start / step / stop is done
        return
    _terminate(signum)


def _terminate(signum=signal.SIGTERM):
    """Ends the windows (marked partial, end "SIGTERM" / "SIGHUP" / "SIGQUIT"), then dies of
    the signal."""
    global _terminating, _handler_installed
    _terminating = True
    try:
        if _pid == os.getpid():
            for _, owner in reversed(list(_running)):
                _end(owner, signal.Signals(signum).name)
    finally:
        _handler_installed = False
        try:
            _restore_defaults()
            signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
            signal.raise_signal(signum)
        finally:
            os._exit(128 + signum)  # only if the signal could not end the process


def end_open_windows():
    """Ends every window this process has open (their traces written, marked partial with end
    "abandoned"); returns how many. For a window nothing else can close: a Ctrl-C that landed
    on the very first instruction of its with block's exit."""
    if _pid != os.getpid():
        return 0
    owners = [owner for _, owner in reversed(list(_running))]
    for owner in owners:
        _end(owner, "abandoned")
    return len(owners)


# ---- os._exit and exec: the process ends, or is replaced, with no atexit ----

_os_originals = {}     # name -> the os function our wrapper replaced (while windows are open)
_PROCESS_END_CALLS = {"_exit": "os._exit", "execv": "exec", "execve": "exec"}
_CRITICAL_WAIT_S = 5.0  # how long os._exit waits for another thread's start / step / stop


def _process_end_hook(name, original, reason):
    def hook(*args, **kwargs):
        if reason == "exec" and not _can_exec(args[0] if args else kwargs.get("path")):
            return original(*args, **kwargs)  # it fails: the program goes on, window and all
        ended = _end_before_process_end(reason)
        try:
            return original(*args, **kwargs)
        finally:  # only reached when exec failed after all (os._exit never returns)
            if ended:
                _process_end_over()
    hook.__name__ = hook.__qualname__ = name
    hook.__doc__ = original.__doc__
    hook._cprof_original = original
    return hook


def _install_process_end_hooks():
    if _os_originals:
        return
    for name, reason in _PROCESS_END_CALLS.items():
        original = getattr(os, name, None)
        if original is not None:
            _os_originals[name] = original
            setattr(os, name, _process_end_hook(name, original, reason))


def _remove_process_end_hooks():
    """Back to os's own functions; one that someone wrapped since (theirs calls ours) stays
    wrapped, ours then passing straight through."""
    for name, original in _os_originals.items():
        if getattr(getattr(os, name, None), "_cprof_original", None) is original:
            setattr(os, name, original)
    _os_originals.clear()


def _can_exec(path):
    """False when exec(path) is sure to fail (no such file, not executable): the window then
    stays open, as the program goes on. A failure past this check (ENOEXEC, E2BIG) still
    ends it."""
    if isinstance(path, int):
        return True  # fexecve
    try:
        path = os.fsdecode(path)
        return os.path.isfile(path) and os.access(path, os.X_OK)
    except (TypeError, ValueError):
        return True  # let exec say what is wrong with it


def _end_before_process_end(reason):
    """os._exit / exec with windows open: they are ended and written first (never raises:
    the program's call goes on whatever happens here). True if this thread ended them (other
    threads' start / step / stop wait meanwhile: park_if_ending)."""
    global ending
    if _pid != os.getpid() or not _running or _terminating or ending is not None:
        return False  # a forked child (its parent writes), nothing open, or already ending
    if threading.get_ident() in _critical_threads:
        # called by user code cprof runs inside its own stop or step (on_trace_ready): the
        # window is already stopped and that code has its data
        debug("cprof: %s from inside cprof's stop / step: passed through", reason)
        return False
    ending = threading.get_ident()  # from here other threads' cprof calls wait
    if _critical_threads:  # another thread is opening, stepping or closing: let it finish
        import time
        deadline = time.monotonic() + _CRITICAL_WAIT_S
        while _critical_threads and time.monotonic() < deadline:
            time.sleep(0.001)
    for _, owner in reversed(list(_running)):
        _end(owner, reason)
    return True


def _process_end_over():
    """The exec failed: the process goes on; threads parked meanwhile go on too."""
    global ending, _ending_over
    ending = None
    _ending_over.set()
    _ending_over = threading.Event()


# ---- exit ----

def _end(owner, reason):
    """Ends owner's window marked partial with reason; never raises (at exit, in a handler)."""
    try:
        owner._lifecycle_end(reason)
    except Exception as err:  # noqa: BLE001 - the process is ending: say so, do not raise
        warnings.warn(f"cprof: the open window could not be closed at {reason}: {err}",
                      RuntimeWarning, stacklevel=2)


def _at_exit():
    if _pid != os.getpid():
        return
    exc = _last_exc()
    reason = "exit" if exc is None or exc is _last_exc_at_open else type(exc).__name__
    for _, owner in reversed(list(_running)):
        _end(owner, reason)
    for owner in list(_unsaved):  # failed writes no save() came for: written elsewhere
        write_unsaved_anyway(owner, "the program's end")
    _unsaved.clear()


# ---- fork ----

def _after_fork_child():
    global _pid, _handler_installed, _term_pending, forks, ending
    forks += 1
    running = list(_running) if _pid is not None else []
    _running.clear()
    _unsaved.clear()  # the parent's unsaved traces are the parent's to write
    _pid = None
    _term_pending = 0
    for ident in [i for i in _critical_threads if i != threading.get_ident()]:
        del _critical_threads[ident]  # the parent's other threads are not in the child
    ending = None
    if _handler_installed:
        _handler_installed = False
        _restore_defaults()  # workers end as without cprof
    with warnings.catch_warnings():  # nothing printed in the child (one thread: safe here)
        warnings.simplefilter("ignore")
        for key, _ in running:
            try:
                key._forget_in_child()
            except Exception as err:  # noqa: BLE001 - the child goes on unprofiled
                debug("cprof: clearing a profiler in a forked child failed: %r", err)
        try:
            from . import _C
            if _C.tracer_active():
                from . import _pystack
                _pystack.stop()
        except Exception as err:  # noqa: BLE001
            debug("cprof: stopping the tracer in a forked child failed: %r", err)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_child)
