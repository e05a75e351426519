"""Warnings attributed to the user's code: the first frame outside the cprof package (the
``with`` line, ``stop()``, ``step()``, the decorated call), however deep inside cprof the
warning is raised. A fixed ``stacklevel`` pointed at cprof's own files whenever a public
entry point reached the warning through another depth, so ``-W`` / ``filterwarnings`` by
module missed it and the message did not say where the window was."""
import os
import sys
import threading
import warnings

_PKG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")


def _internal(filename):
    # frames warnings.warn does not count either (importlib's bootstrap)
    return "importlib" in filename and "_bootstrap" in filename


def _own(filename):
    return _internal(filename) or os.path.abspath(filename).startswith(_PKG)


def user_stacklevel():
    """The ``stacklevel`` with which the caller of this function makes ``warnings.warn`` name
    the first frame outside the cprof package (the outermost frame when every one is
    cprof's)."""
    f, level = sys._getframe(1), 1
    while f.f_back is not None and _own(f.f_code.co_filename):
        f = f.f_back
        if not _internal(f.f_code.co_filename):
            level += 1
    return level


_local = threading.local()


def warn(message, category=RuntimeWarning):
    """warnings.warn(message, category) at the user's frame (see user_stacklevel). Inside
    `never_raised()` a filter that makes it an error (-W error) gets it on stderr instead."""
    try:
        warnings.warn(message, category, stacklevel=user_stacklevel())
    except Exception:  # noqa: BLE001 - inside never_raised no caller can take it: said anyway
        if not getattr(_local, "quiet", 0):
            raise
        try:
            sys.stderr.write(f"{category.__name__}: {message}\n")
        except Exception:  # noqa: BLE001 - stderr closed at exit: nothing more to do
            pass


class never_raised:  # noqa: N801 - used as a with statement, like contextlib's helpers
    """Where no caller can be raised to (the program's end, a window written elsewhere to
    make room for a newer one), the warnings of `warn` are said, never raised: with -W error
    the first would have stopped what comes after it (the other unsaved traces)."""

    def __enter__(self):
        _local.quiet = getattr(_local, "quiet", 0) + 1
        return self

    def __exit__(self, *exc):
        _local.quiet -= 1
        return False
