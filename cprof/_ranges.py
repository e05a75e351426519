"""User ranges: ``cprof.range`` (C type: context manager and decorator), ``push`` / ``pop``.

The hot path is entirely in ``cprof._C``; this module only supplies the decorator wrapper that
the C type calls when a range is applied to a function."""
import functools
import inspect

from . import _C

range = _C.range  # noqa: A001 - the public name users know from torch.profiler.record_function
push = _C.push
pop = _C.pop


def _decorate(rng, fn):
    """Wraps fn so each call runs inside the range (the range object is reusable)."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args, **kwargs):
            with rng:
                return await fn(*args, **kwargs)

        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with rng:
            return fn(*args, **kwargs)

    return wrapper


_C._set_decorator(_decorate)


def record_function(name, args=None):
    """torch.profiler.record_function's signature on a cprof range (context manager and
    decorator). ``args`` (a string torch attaches to the op) is not recorded by cprof."""
    if not isinstance(name, str):
        raise TypeError(f"cprof.record_function: name must be a str, got {name!r}")
    return _C.range(name)
