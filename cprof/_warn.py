"""Warnings attributed to the user's code: the first frame outside the cprof package (the
``with`` line, ``stop()``, ``step()``, the decorated call), however deep inside cprof the
warning is raised. A fixed ``stacklevel`` pointed at cprof's own files whenever a public
entry point reached the warning through another depth, so ``-W`` / ``filterwarnings`` by
module missed it and the message did not say where the window was."""
import os
import sys
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


def warn(message, category=RuntimeWarning):
    """warnings.warn(message, category) at the user's frame (see user_stacklevel)."""
    warnings.warn(message, category, stacklevel=user_stacklevel())
