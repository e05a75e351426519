"""User ranges: ``cprof.range`` (C type: context manager and decorator), ``push`` / ``pop``.

The hot path is entirely in ``cprof._C``; this module only supplies the decorator wrapper that
the C type calls when a range is applied to a function."""
import functools
import inspect

from . import _C

range = _C.range  # noqa: A001 - the public name users know from torch.profiler.record_function
push = _C.push
pop = _C.pop


def _async_gen_wrapper(fn, window):
    """fn's async generator inside a call window, doing what `yield from` does for a generator:
    asend values, athrow exceptions and aclose reach fn's; its finally runs. The wrapper stays
    an async generator function (inspect.isasyncgenfunction) as fn is."""

    @functools.wraps(fn)
    async def agen_wrapper(*args, **kw):
        inner = fn(*args, **kw)
        call = window(suspends=True)
        call.__enter__()
        exc_info = (None, None, None)
        try:
            to_send, to_throw = None, None
            while True:
                try:
                    if to_throw is not None:
                        item = await inner.athrow(to_throw)
                    else:
                        item = await inner.asend(to_send)
                except StopAsyncIteration:
                    return
                to_send, to_throw = None, None
                try:
                    to_send = yield item
                except GeneratorExit:
                    raise
                except BaseException as err:  # athrow(): into inner
                    to_throw = err
        except BaseException as err:
            exc_info = (type(err), err, err.__traceback__)
            raise
        finally:
            try:
                await inner.aclose()
            finally:
                call.__exit__(*exc_info)

    return agen_wrapper


def _decorate(rng, fn):
    """Wraps fn so each call runs inside the range (the range object is reusable: its exit
    ends the innermost open range of its name on the thread, so concurrent calls, recursion
    and asyncio tasks interleaving on one thread each end their own). A generator function's
    range spans the generator's life, first item to exhaustion or close (the consumer's code
    between items too), as profile_function's window does; an async function's, its await."""
    if inspect.isasyncgenfunction(fn):
        return _async_gen_wrapper(fn, lambda suspends=False: rng)
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen_wrapper(*args, **kwargs):
            with rng:
                return (yield from fn(*args, **kwargs))

        return gen_wrapper
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
