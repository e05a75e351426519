"""with_stack: the C Python-function tracer (csrc/py_tracer.c, cprof/_pystack.py).

Python 3.12+ runs the sys.monitoring backend, 3.11 the PyEval_SetProfile one; the tests are the
same for both except where marked."""
import _thread
import collections
import math
import os
import re
import sys
import threading
import time

import pytest

import cprof
from cprof import _C, _pystack
from conftest import load_trace, ranges_of

MONITORING = sys.version_info >= (3, 12)
PYF = _C.CAT_PYTHON_FUNCTION
CPU = _C.CAT_CPU_OP
USER = _C.CAT_USER_ANNOTATION

Rec = collections.namedtuple("Rec", "tid name cat begin end depth truncated")


@pytest.fixture(autouse=True)
def _no_tracer_left():
    yield
    if _C.tracer_active():
        _pystack.stop()
        pytest.fail("a test left the tracer running")
    if not MONITORING:
        assert sys.getprofile() is None


def short_path(path):
    """A file as python_function names have it: relative to its sys.path / site-packages entry
    (as torch.profiler names it)."""
    for prefix in _pystack.strip_prefixes():
        if path.startswith(prefix) and len(path) > len(prefix):
            return path[len(prefix):]
    return path


def pyname(fn):
    co = fn.__code__
    return f"{short_path(co.co_filename)}({co.co_firstlineno}): {co.co_name}"


def pyname_at(fn, offset):
    """A frame of fn running at its first line + offset when the window opened."""
    co = fn.__code__
    return f"{short_path(co.co_filename)}({co.co_firstlineno + offset}): {co.co_name}"


def running(recs, fn):
    """The records of fn's frames, at whatever line each was named (frames running when the
    window opened are named by their current line, as torch.profiler names them)."""
    co = fn.__code__
    pat = re.compile(re.escape(short_path(co.co_filename)) + r"\(\d+\): " +
                     re.escape(co.co_name) + "$")
    return [r for r in recs if pat.match(r.name)]


def records(snap):
    return [Rec(*r) for r in snap.records()]


def run_traced(body, **kw):
    """Runs body with the tracer on inside a window; returns (records, tracer counts)."""
    _C.start()
    try:
        _pystack.start(**kw)
        try:
            body()
        finally:
            counts = _pystack.stop()
    finally:
        snap = _C.stop()
    recs = records(snap)
    snap.close()
    return recs, counts


def named(recs, fn_or_name):
    name = fn_or_name if isinstance(fn_or_name, str) else pyname(fn_or_name)
    return [r for r in recs if r.name == name]


def one(recs, fn_or_name):
    got = named(recs, fn_or_name)
    assert len(got) == 1, (fn_or_name, got)
    return got[0]


def inside(child, parent):
    return parent.begin <= child.begin <= child.end <= parent.end


def spin(seconds):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pass


# ---- workloads (module level so their names are stable) ----

def leaf(x):
    return x * 2


def parent():
    return leaf(1) + leaf(2)


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


# ---- names and nesting ----

def test_call_tree_names_and_nesting():
    recs, counts = run_traced(parent)
    p = one(recs, parent)
    leaves = named(recs, leaf)
    assert len(leaves) == 2
    assert p.cat == PYF and not p.truncated
    assert p.name.endswith("): parent") and short_path(__file__) in p.name
    for lf in leaves:
        assert lf.cat == PYF and not lf.truncated
        assert lf.depth == p.depth + 1
        assert inside(lf, p)
    assert leaves[0].end <= leaves[1].begin
    assert counts["calls"] >= 3 and counts["errors"] == 0
    assert counts["backend"] == ("sys.monitoring" if MONITORING else "setprofile")


def test_recursion_depths():
    recs, _ = run_traced(lambda: fib(6))
    fibs = named(recs, fib)
    assert len(fibs) == 25  # calls of fib(6)
    top = min(fibs, key=lambda r: r.depth)
    assert max(r.depth for r in fibs) - top.depth == 5
    for r in fibs:
        assert inside(r, top)


def _recurse(n):
    return 0 if n == 0 else _recurse(n - 1) + 1


def _recurse_on_big_stack(depth):
    """_recurse(depth) on a threading thread with a 512 MiB stack, which the tracer follows as
    any other: Python 3.10's eval loop takes C stack for every Python call, and 70,000 of them
    overflow the main thread's 8 MiB with or without cprof."""
    old = threading.stack_size(512 << 20)
    try:
        t = threading.Thread(target=_recurse, args=(depth,))
        t.start()
    finally:
        threading.stack_size(old)
    t.join()


def test_calls_past_the_depth_limit_are_counted_and_warned_about(tmp_path):
    """Past 65,535 nested ranges on one thread the tracer cannot record a call: it used to
    count that only internally, so the trace looked complete."""
    depth = 70_000
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 1_000)
    try:
        with pytest.warns(RuntimeWarning, match=r"4,4\d\d Python calls were not recorded"):
            with cprof.ProfilerContext(output_dir=str(tmp_path), profile_name="deep",
                                       activities=["CPU"], verbose=False, with_stack=True) as c:
                # on this thread from 3.11: its running frames are in the figure matched above
                if sys.version_info >= (3, 11):
                    _recurse(depth)
                else:
                    _recurse_on_big_stack(depth)
    finally:
        sys.setrecursionlimit(limit)
    t = load_trace(c.trace_path)
    recorded = sum(1 for e in t["traceEvents"]
                   if e.get("ph") == "X" and e["name"].endswith(": _recurse"))
    assert recorded + t["cprof"]["dropped"]["python_calls_too_deep"] == depth + 1
    assert t["cprof"]["dropped"]["cpu_ranges"] == 0


def test_trace_file_has_python_function_events(tmp_path):
    _C.start()
    _pystack.start()
    parent()
    _pystack.stop()
    snap = _C.stop()
    path, *_ = snap.write(str(tmp_path / "stack"), ".trace.json", gzip=0)
    snap.close()
    evs = ranges_of(load_trace(path), "python_function")
    names = [e["name"] for e in evs]
    assert names.count(pyname(leaf)) == 2 and names.count(pyname(parent)) == 1


def test_many_code_objects_keep_their_names():
    """Thousands of distinct functions: the name cache grows and every name stays right."""
    fns = []
    for i in range(3000):
        ns = {}
        exec(compile(f"def fn_{i}():\n    return {i}\n", f"<gen{i}>", "exec"), ns)
        fns.append(ns[f"fn_{i}"])

    def body():
        for _ in range(2):
            for fn in fns:
                fn()

    recs, counts = run_traced(body)
    got = collections.Counter(r.name for r in recs if r.name.startswith("<gen"))
    assert len(got) == 3000
    assert all(n == 2 for n in got.values())
    assert got["<gen1234>(1): fn_1234"] == 2


# ---- C calls ----

def test_c_calls_name_torch_ops_and_builtins():
    torch = pytest.importorskip("torch")
    x, w = torch.ones(2, 3), torch.ones(4, 3)

    def model():
        y = torch.nn.functional.linear(x, w)
        y.add(1)
        out = []
        out.append(len(out))
        return y

    recs, _ = run_traced(model, c_calls=True)
    m = one(recs, model)
    lin = one(recs, "torch._C._nn.linear")
    assert lin.cat == CPU and lin.depth == m.depth + 1 and inside(lin, m)
    assert one(recs, "builtins.len").cat == CPU
    assert one(recs, "list.append").cat == CPU
    assert one(recs, "torch._C.TensorBase.add").cat == CPU


def test_c_calls_off_records_no_cpu_ops():
    def body():
        len([1, 2])
        math.sqrt(4.0)
        leaf(1)

    recs, _ = run_traced(body)
    assert [r for r in recs if r.cat == CPU] == []
    assert len(named(recs, leaf)) == 1


def test_c_call_that_raises_is_closed():
    def body():
        try:
            math.sqrt(-1.0)
        except ValueError:
            pass
        leaf(1)

    recs, _ = run_traced(body, c_calls=True)
    b = one(recs, body)
    sq = one(recs, "math.sqrt")
    lf = one(recs, leaf)
    assert not sq.truncated and inside(sq, b) and sq.end <= lf.begin
    assert lf.depth == sq.depth == b.depth + 1


def test_cprof_own_functions_are_not_recorded():
    def body():
        cprof.push("mine")
        cprof.pop()
        with cprof.range("r"):
            pass

    recs, _ = run_traced(body, c_calls=True)
    assert not [r for r in recs if r.cat == CPU and "cprof" in r.name]
    assert {r.name for r in recs if r.cat == USER} == {"mine", "r"}


# ---- min_duration ----

def fast():
    return 1


def slow():
    spin(0.004)


def slow_parent_of_fast_children():
    for _ in range(3):
        fast()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.004:
        pass


def short_with_user_range():
    with cprof.range("user inside short"):
        pass


def test_min_duration_filters_short_calls_only():
    def body():
        fast()
        slow()
        slow_parent_of_fast_children()
        short_with_user_range()

    recs, counts = run_traced(body, min_duration_us=1000)
    assert named(recs, fast) == []
    s = one(recs, slow)
    assert s.end - s.begin >= 1_000_000
    assert one(recs, spin).depth == s.depth + 1  # a long child is kept with its parent
    p = one(recs, slow_parent_of_fast_children)
    assert p.end - p.begin >= 1_000_000
    # a short call with a user range inside is kept: the user range is recorded after it
    sw = one(recs, short_with_user_range)
    u = one(recs, "user inside short")
    assert inside(u, sw) and u.depth == sw.depth + 1
    assert counts["discarded"] >= 4
    # no hole: every record left is complete and the snapshot's depths are consistent
    assert all(r.end >= r.begin > 0 for r in recs)


def test_min_duration_validation():
    with pytest.raises(ValueError, match="min_duration_us must be >= 0"):
        _pystack.start(min_duration_us=-1)
    with pytest.raises(ValueError, match="min_duration_us"):
        _pystack.start(min_duration_us=float("nan"))
    with pytest.raises(ValueError, match="finite"):
        _pystack.start(min_duration_us=float("inf"))
    with pytest.raises(TypeError, match="min_duration_us"):
        _pystack.start(min_duration_us="5")
    with pytest.raises(ValueError, match="min_duration_ns"):
        _C.tracer_start(min_duration_ns=-5)
    assert not _C.tracer_active()


# ---- generators, exceptions ----

def gen3():
    yield 1
    yield 2
    yield 3


def consume():
    out = []
    for x in gen3():
        out.append(x)
    return out


def test_generator_runs_are_separate_ranges():
    recs, _ = run_traced(consume)
    c = one(recs, consume)
    runs = named(recs, gen3)
    assert len(runs) == 4  # to each yield, then to the return
    for a, b in zip(runs, runs[1:]):
        assert a.end <= b.begin
    for r in runs:
        assert inside(r, c) and r.depth == c.depth + 1 and not r.truncated


def gen_cleanup():
    try:
        yield 1
    finally:
        leaf(0)


def test_generator_throw_and_close():
    def body():
        g = gen3()
        next(g)
        with pytest.raises(ValueError):
            g.throw(ValueError("in"))
        # close() runs the frame only when the yield is inside a handler (3.13 skips it
        # otherwise), hence the finally
        g2 = gen_cleanup()
        next(g2)
        g2.close()
        leaf(1)

    recs, _ = run_traced(body)
    b = one(recs, body)
    runs = named(recs, gen3) + named(recs, gen_cleanup)
    assert len(runs) == 4  # g: start, throw; g2: start, close
    assert all(inside(r, b) and r.depth == b.depth + 1 and not r.truncated for r in runs)
    cleanup = named(recs, gen_cleanup)[1]
    l0, l1 = named(recs, leaf)
    assert inside(l0, cleanup) and l0.depth == b.depth + 2
    assert l1.depth == b.depth + 1


def raiser():
    raise KeyError("deep")


def middle():
    raiser()


def catcher():
    try:
        middle()
    except KeyError:
        pass
    return leaf(3)


def test_exception_unwinding_through_frames():
    recs, _ = run_traced(catcher)
    c, m, r, lf = one(recs, catcher), one(recs, middle), one(recs, raiser), one(recs, leaf)
    assert inside(r, m) and inside(m, c) and inside(lf, c)
    assert (m.depth, r.depth, lf.depth) == (c.depth + 1, c.depth + 2, c.depth + 1)
    assert m.end <= lf.begin
    assert not any(x.truncated for x in (c, m, r, lf))


def test_exception_escaping_the_traced_region():
    def body():
        middle()

    with pytest.raises(KeyError):
        run_traced(body)
    # the tracer was stopped by run_traced's finally; the next run is clean
    recs, _ = run_traced(parent)
    assert len(named(recs, leaf)) == 2


# ---- user ranges and the tracer's own stack ----

def opener():
    cprof.push("user span")


def closer():
    cprof.pop()


def test_user_range_pushed_in_one_function_popped_in_another():
    def body():
        opener()
        leaf(1)
        closer()
        leaf(2)

    recs, _ = run_traced(body)
    u = one(recs, "user span")
    o, cl = one(recs, opener), one(recs, closer)
    l1, l2 = named(recs, leaf)
    assert not any(x.truncated for x in (u, o, cl, l1, l2))
    assert o.begin <= u.begin <= o.end  # opened inside opener ...
    assert cl.begin <= u.end <= cl.end  # ... closed inside closer
    assert inside(l1, u) and not inside(l2, u)
    assert _C.depth() == 0


def test_user_range_left_open_in_function_closed_outside():
    def body():
        opener()
        leaf(1)
        cprof.pop()  # in the caller, after opener returned
        leaf(2)

    recs, _ = run_traced(body)
    u, o, b = one(recs, "user span"), one(recs, opener), one(recs, body)
    assert not u.truncated and not o.truncated
    assert o.end <= u.end <= b.end  # the tracer closed opener, not the user's range
    assert u.depth == o.depth + 1


def test_range_entered_and_exited_in_different_frames():
    """The ProfilerStep / record_function pattern: __enter__ in one call, __exit__ in the next."""
    held = []

    def begin():
        r = cprof.range("step")
        r.__enter__()
        held.append(r)

    def end():
        held.pop().__exit__(None, None, None)

    def body():
        begin()
        leaf(1)
        end()

    recs, _ = run_traced(body)
    s = one(recs, "step")
    assert not s.truncated
    assert one(recs, begin).begin <= s.begin and s.end <= one(recs, end).end
    assert inside(one(recs, leaf), s)


def test_tracer_does_not_change_user_depth():
    seen = []

    def body():
        seen.append(_C.depth())
        with cprof.range("a"):
            seen.append(_C.depth())

    recs, _ = run_traced(body)
    assert seen == [0, 1]
    a, b = one(recs, "a"), one(recs, body)
    assert a.depth == b.depth + 1 and inside(a, b)


def test_user_pop_never_closes_a_tracer_range():
    def body():
        with pytest.raises(cprof.NoOpenRangeError):
            cprof.pop()  # only tracer ranges are open: nothing of the user's to close
        leaf(1)

    recs, _ = run_traced(body)
    b, lf = one(recs, body), one(recs, leaf)
    assert not b.truncated and inside(lf, b) and lf.depth == b.depth + 1


def test_frames_running_at_start_are_recorded_as_torch_does():
    """torch.profiler's tracer records the frames running when it starts (the function holding
    `with profile(...)`, main, <module>) as beginning then: stacks and flame graphs keep their
    outer frames. cprof records them at the thread's first event when the thread has no record
    yet in the window; cprof's own frames (start itself) stay out."""
    def starter():
        _pystack.start()
        leaf(1)

    def body():
        starter()
        leaf(2)

    _C.start()
    body()
    _pystack.stop()
    snap = _C.stop()
    recs = records(snap)
    snap.close()
    # named as torch names frames running at its start: by the line each one is at when the
    # thread's first event seeds them (starter: its leaf(1) call, the first after start)
    b, s = one(recs, pyname_at(body, 1)), one(recs, pyname_at(starter, 2))
    l1, l2 = named(recs, leaf)
    assert inside(l1, s) and inside(s, b) and inside(l2, b) and not inside(l2, s)
    assert s.depth == b.depth + 1 and l1.depth == s.depth + 1 and l2.depth == b.depth + 1
    assert not s.truncated and not b.truncated and s.end <= l2.begin
    me = named(recs, pyname_at(test_frames_running_at_start_are_recorded_as_torch_does, 14))
    assert len(me) == 1 and inside(b, me[0]) and me[0].depth == b.depth - 1
    assert not named(recs, body) and not named(recs, starter)  # not by their first lines
    assert not any("cprof/" in r.name for r in recs)  # cprof's own frames are not recorded


def test_frames_entered_before_start_pop_nothing():
    """A thread that already recorded in the window (here a user range) gets no ranges for
    the frames running at start: they would begin after their own child."""
    def starter():
        _pystack.start()
        leaf(1)

    def body():
        starter()  # returns with the tracer on: nothing of the tracer's to close
        leaf(2)

    _C.start()
    cprof.push("outer")
    body()
    _pystack.stop()
    cprof.pop()
    snap = _C.stop()
    recs = records(snap)
    snap.close()
    outer = one(recs, "outer")
    assert not outer.truncated
    leaves = named(recs, leaf)
    assert len(leaves) == 2 and all(inside(x, outer) and x.depth == 1 for x in leaves)
    assert named(recs, starter) == [] and named(recs, body) == []


# ---- threads ----

def worker(out):
    out.append(leaf(5))


def test_thread_started_after_start_is_traced():
    out = []

    def body():
        t = threading.Thread(target=worker, args=(out,))
        t.start()
        t.join()

    recs, _ = run_traced(body)
    assert out == [10]
    w = one(recs, worker)
    me = one(recs, body).tid
    assert w.tid != me
    lf = one(recs, leaf)
    assert lf.tid == w.tid and inside(lf, w)


def test_thread_started_and_ended_in_the_window_keeps_its_name(tmp_path):
    """3.12: sys.monitoring records a new thread's first call inside Thread._bootstrap, before
    the thread is in threading._active, and stop names only the threads still alive: a thread
    that ran and ended inside the window was "thread N (python)". Its name is read from its
    bootstrap frame at its first record."""
    out = []
    with cprof.ProfilerContext(output_dir=tmp_path, profile_name="tn", activities=["CPU"],
                               with_stack=True, gzip=False, verbose=False) as c:
        t = threading.Thread(target=worker, args=(out,), name="my-worker")
        t.start()
        t.join()
    assert out == [10]
    tr = load_trace(c.trace_path)
    names = {e["tid"]: e["args"]["name"] for e in tr["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    lf = [e for e in tr["traceEvents"] if e.get("name") == pyname(leaf)]
    assert len(lf) == 1 and names[lf[0]["tid"]] == "my-worker", names


class _EarlyThread(threading.Thread):
    """Records a range from Thread._bootstrap, before _bootstrap_inner puts the thread in
    threading._active (as 3.12's sys.monitoring records a call there)."""

    def _bootstrap_inner(self):
        with cprof.range("early-range"):
            pass
        super()._bootstrap_inner()


def test_thread_unknown_to_threading_is_named_from_its_bootstrap_frame(tmp_path):
    """A thread's first record made before threading._active has it is named from the `self`
    of its Thread._bootstrap frame (module.c bootstrapping_thread: the frame's globals and
    locals, which Python 3.10 reads through py_binding.h's compat functions). No with_stack: it
    runs on every Python."""
    with cprof.ProfilerContext(output_dir=tmp_path, profile_name="early", activities=["CPU"],
                               with_stack=False, gzip=False, verbose=False) as c:
        t = _EarlyThread(name="early-bird")
        t.start()
        t.join()
    tr = load_trace(c.trace_path)
    names = {e["tid"]: e["args"]["name"] for e in tr["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    (r,) = [e for e in tr["traceEvents"] if e.get("name") == "early-range"]
    assert names[r["tid"]] == "early-bird", names


def test_thread_existing_before_start_is_traced():
    """3.12+: sys.monitoring covers every thread. 3.11: the profile function is set on every
    thread that exists at start, so a thread started earlier is traced from then on."""
    go, done = threading.Event(), threading.Event()
    out = []

    def waiter():
        go.wait()
        worker(out)
        done.set()

    t = threading.Thread(target=waiter)
    t.start()
    try:
        _C.start()
        _pystack.start()
        go.set()
        assert done.wait(10)
        counts = _pystack.stop()
        snap = _C.stop()
    finally:
        go.set()
        t.join()
    recs = records(snap)
    snap.close()
    w = one(recs, worker)
    assert w.tid != threading.get_native_id()
    assert inside(one(recs, leaf), w)
    if not MONITORING:
        assert counts["threads"] >= 1
    assert out == [10]


def test_threading_profile_hook_restored():
    if MONITORING:
        pytest.skip("3.12+ needs no threading hook")

    def mine(frame, event, arg):
        pass

    threading.setprofile(mine)
    try:
        _C.start()
        _pystack.start()
        assert threading.getprofile() is _C._tracer_thread_hook
        _pystack.stop()
        _C.stop().close()
        assert threading.getprofile() is mine
    finally:
        threading.setprofile(None)


# ---- start / stop ----

def test_stop_removes_everything():
    _C.start()
    _pystack.start(c_calls=True)
    if not MONITORING:
        assert sys.getprofile() is _C._tracer_thread_hook
    leaf(1)
    counts = _pystack.stop()
    assert not _pystack.active() and not _C.tracer_active()
    leaf(2)
    len([])
    snap = _C.stop()
    recs = records(snap)
    snap.close()
    assert len(named(recs, leaf)) == 1
    assert named(recs, "builtins.len") == []
    if MONITORING:
        assert sys.monitoring.get_tool(counts["tool_id"]) is None
    else:
        assert sys.getprofile() is None
        assert threading.getprofile() is None
    assert _pystack.stop() is None  # stopping again is a no-op


def test_start_outside_a_window_raises():
    with pytest.raises(cprof.WindowStateError, match="open cprof window"):
        _pystack.start()
    assert not _C.tracer_active()
    if not MONITORING:
        assert sys.getprofile() is None and threading.getprofile() is None


def test_start_twice_raises_and_keeps_the_first():
    _C.start()
    try:
        _pystack.start()
        with pytest.raises(cprof.WindowStateError, match="already running"):
            _pystack.start()
        assert _pystack.active()
        leaf(1)
        _pystack.stop()
    finally:
        snap = _C.stop()
    recs = records(snap)
    snap.close()
    assert len(named(recs, leaf)) == 1


def test_window_stopped_before_the_tracer():
    """_C.stop() while tracing: open tracer ranges are truncated into that window, calls with
    no window open are not recorded, and tracer_stop still cleans up."""
    snaps = []

    def inner():
        snaps.append(_C.stop())
        leaf(1)

    def outer():
        inner()
        leaf(2)

    _C.start()
    _pystack.start(c_calls=True)
    outer()
    counts = _pystack.stop()
    recs = records(snaps[0])
    snaps[0].close()
    o, i = one(recs, outer), one(recs, inner)
    assert o.truncated and i.truncated and inside(i, o)
    assert named(recs, leaf) == []
    assert counts["errors"] == 0 and _C.depth() == 0
    # a new session afterwards is clean
    recs3, _ = run_traced(parent)
    assert len(named(recs3, leaf)) == 2 and not one(recs3, parent).truncated


def test_window_restarted_under_the_tracer():
    """A schedule's warmup -> active transition closes and reopens the window with the tracer
    running: the tracer records into the new window, and a frame still running (step) is
    recorded again there from the reopening on, so what it runs nests in it in both."""
    snaps = []

    def restart():
        snaps.append(_C.stop())
        _C.start()

    def step():
        leaf(1)
        restart()
        leaf(2)

    _C.start()
    _pystack.start()
    step()
    leaf(3)
    _pystack.stop()
    snap2 = _C.stop()
    recs1, recs2 = records(snaps[0]), records(snap2)
    snaps[0].close()
    snap2.close()
    assert len(named(recs1, leaf)) == 1 and one(recs1, step).truncated
    l2, l3 = named(recs2, leaf)
    s2 = one(recs2, step)
    assert inside(l2, s2) and not inside(l3, s2) and not s2.truncated
    assert l2.depth == s2.depth + 1 and l3.depth == s2.depth
    assert not l2.truncated and not l3.truncated


def test_frames_open_at_stop_are_closed_at_stop():
    def body():
        leaf(1)
        _pystack.stop()
        leaf(2)

    _C.start()
    _pystack.start()
    body()
    snap = _C.stop()
    recs = records(snap)
    snap.close()
    b = one(recs, body)
    assert not b.truncated
    assert len(named(recs, leaf)) == 1 and inside(one(recs, leaf), b)


def test_summary_self_time_excludes_traced_children():
    def body():
        slow()

    _C.start()
    _pystack.start()
    body()
    _pystack.stop()
    snap = _C.stop()
    rows = {r["name"]: r for r in snap.summary()}
    snap.close()
    b = rows[pyname(body)]
    assert b["category"] == "python_function"
    assert b["self_ns"] < b["total_ns"] / 2


@pytest.mark.skipif(not MONITORING, reason="sys.monitoring is 3.12+")
def test_monitoring_tool_ids():
    mon = sys.monitoring
    mon.use_tool_id(mon.PROFILER_ID, "other")
    try:
        _C.start()
        try:
            _pystack.start()
            ids = [i for i in range(6) if mon.get_tool(i) == "cprof"]
            assert len(ids) == 1 and ids[0] != mon.PROFILER_ID
            leaf(1)
            counts = _pystack.stop()
            assert counts["tool_id"] == ids[0] and mon.get_tool(ids[0]) is None
            taken = [i for i in range(6) if mon.get_tool(i) is None]
            for i in taken:
                mon.use_tool_id(i, "filler")
            try:
                with pytest.raises(cprof.CprofError, match="'other'"):
                    _pystack.start()
            finally:
                for i in taken:
                    mon.free_tool_id(i)
        finally:
            snap = _C.stop()
    finally:
        mon.free_tool_id(mon.PROFILER_ID)
    recs = records(snap)
    snap.close()
    assert len(named(recs, leaf)) == 1


@pytest.mark.skipif(not MONITORING, reason="sys.monitoring is 3.12+")
def test_monitoring_coexists_with_setprofile():
    seen = []

    def other(frame, event, arg):
        if event == "call" and frame.f_code is leaf.__code__:
            seen.append(event)

    _C.start()
    sys.setprofile(other)
    try:
        _pystack.start()
        leaf(1)
        _pystack.stop()
    finally:
        sys.setprofile(None)
        snap = _C.stop()
    recs = records(snap)
    snap.close()
    assert seen == ["call"] and len(named(recs, leaf)) == 1


@pytest.mark.skipif(MONITORING, reason="the 3.10/3.11 setprofile backend")
def test_another_setprofile_profiler_is_refused():
    def other(frame, event, arg):
        pass

    _C.start()
    sys.setprofile(other)
    try:
        with pytest.raises(cprof.CprofError, match="another profile function"):
            _pystack.start()
    finally:
        sys.setprofile(None)
        _C.stop().close()
    assert not _C.tracer_active() and threading.getprofile() is None


@pytest.mark.skipif(MONITORING, reason="the 3.10/3.11 setprofile backend")
def test_with_stack_under_another_profiler_records_the_rest_and_says_why(tmp_path):
    """python -m cProfile with a with_stack profile: torch.profiler runs (taking cProfile's
    hook); cprof leaves the other profiler's hook alone, records everything but the Python
    functions, warns once and says why in the trace, rather than failing the program."""
    from cprof import _glue

    calls = []

    def other(frame, event, arg):
        calls.append(event)

    _glue._ops_warned.discard(next((w for w in _glue._ops_warned if "with_stack" in w), None))
    sys.setprofile(other)
    try:
        with pytest.warns(RuntimeWarning, match="with_stack is not recorded in this window"):
            with cprof.profile(activities=["CPU"], with_stack=True, record_ops=False) as p:
                with cprof.range("kept"):
                    parent()
        assert sys.getprofile() is other
    finally:
        sys.setprofile(None)
    assert calls
    path = p.export_chrome_trace(str(tmp_path / "t.json"))
    t = load_trace(path)
    names = [e["name"] for e in t["traceEvents"] if e.get("ph") == "X"]
    assert "kept" in names and not any(e.get("cat") == "python_function"
                                       for e in t["traceEvents"])
    assert "another profile function" in t["cprof"]["with_stack_unavailable"]



def before_hook():
    return leaf(1)


def after_hook():
    return leaf(2)


@pytest.mark.skipif(MONITORING, reason="the 3.10/3.11 setprofile backend")
def test_a_setprofile_inside_the_window_is_reported(tmp_path):
    """A sys.setprofile inside the window (cProfile.enable(), a debugger) replaces the tracer
    on that thread for the rest of the window, even once removed: cprof leaves the user's hook
    alone, but says so (warning, cprof.with_stack_replaced with when) instead of silently
    ending the thread's python_function events."""
    def other(frame, event, arg):
        pass

    with pytest.warns(RuntimeWarning, match=r"replaced cprof's inside the window on "
                                            r"thread\(s\) 'MainThread'"):
        with cprof.ProfilerContext(output_dir=tmp_path, profile_name="sp", activities=["CPU"],
                                   with_stack=True, gzip=False, verbose=False) as c:
            before_hook()
            sys.setprofile(other)
            leaf(3)
            sys.setprofile(None)
            after_hook()
    t = load_trace(c.trace_path)
    names = {e["name"] for e in t["traceEvents"] if e.get("cat") == "python_function"}
    assert pyname(before_hook) in names and pyname(after_hook) not in names
    (r,) = t["cprof"]["with_stack_replaced"]
    assert r["thread"] == "MainThread" and r["tid"] == threading.get_native_id()
    assert "python_function events end" in r["why"]
    # until_ms: the end of before_hook, its last python_function event, from the window start
    (b,) = [e for e in t["traceEvents"] if e.get("name") == pyname(before_hook)]
    end_ms = (t["baseTimeNanoseconds"] + (b["ts"] + b["dur"]) * 1000
              - t["cprof"]["window"]["start_unix_ns"]) / 1e6
    assert abs(r["until_ms"] - end_ms) < 0.01, (r, end_ms)


@pytest.mark.skipif(MONITORING, reason="the 3.10/3.11 setprofile backend")
def test_a_setprofile_on_another_thread_is_reported_and_others_are_not(tmp_path):
    """Only threads the tracer was on and lost are named: not a thread that had its own
    profile function before the window (skipped at start), nor one left traced."""
    hooked, release, ready = threading.Event(), threading.Event(), threading.Event()

    def other(frame, event, arg):
        pass

    taker_tid = []

    def takes_over():
        taker_tid.append(threading.get_native_id())
        before_hook()
        sys.setprofile(other)
        hooked.set()
        release.wait(10)
        sys.setprofile(None)

    def had_one_before():
        sys.setprofile(other)
        ready.set()
        release.wait(10)
        sys.setprofile(None)

    pre = threading.Thread(target=had_one_before, name="had-one-before")
    pre.start()
    plain = threading.Thread(target=release.wait, args=(10,), name="plain")
    plain.start()
    assert ready.wait(10)
    try:
        with pytest.warns(RuntimeWarning, match="'taker'"):
            with cprof.ProfilerContext(output_dir=tmp_path, profile_name="sp2",
                                       activities=["CPU"], with_stack=True, gzip=False,
                                       verbose=False) as c:
                th = threading.Thread(target=takes_over, name="taker")
                th.start()
                assert hooked.wait(10)
                parent()
    finally:
        release.set()
        for x in (pre, plain):
            x.join()
    th.join()
    t = load_trace(c.trace_path)
    assert [r["thread"] for r in t["cprof"]["with_stack_replaced"]] == ["taker"]
    # its trace tid (on 3.10, whose thread states lack it, read from its threading.Thread)
    assert [r["tid"] for r in t["cprof"]["with_stack_replaced"]] == taker_tid
    # the main thread kept recording
    assert pyname(parent) in {e["name"] for e in t["traceEvents"] if e.get("ph") == "X"}


@pytest.mark.skipif(MONITORING, reason="the 3.10/3.11 setprofile backend")
def test_a_setprofile_on_a_thread_threading_does_not_know_is_reported(tmp_path):
    """A thread started by _thread (as C code starts one: not in threading._active) that
    existed at start and is taken over is listed too. Its tid is its native id on 3.11; 3.10's
    thread states do not carry one and threading does not know the thread, so it is 0 there."""
    go, hooked, release, done = (threading.Event() for _ in range(4))
    tid = []

    def other(frame, event, arg):
        pass

    def raw():
        tid.append(threading.get_native_id())
        go.wait(10)
        sys.setprofile(other)
        hooked.set()
        release.wait(10)
        sys.setprofile(None)
        done.set()

    _thread.start_new_thread(raw, ())
    try:
        with pytest.warns(RuntimeWarning, match="replaced cprof's"):
            with cprof.ProfilerContext(output_dir=tmp_path, profile_name="sp4",
                                       activities=["CPU"], with_stack=True, gzip=False,
                                       verbose=False) as c:
                go.set()
                assert hooked.wait(10)
    finally:
        go.set()
        release.set()
        assert done.wait(10)
    (r,) = load_trace(c.trace_path)["cprof"]["with_stack_replaced"]
    want = 0 if sys.version_info < (3, 11) else tid[0]
    assert r["tid"] == want and r["thread"] == f"thread {want}", r


def test_no_setprofile_inside_the_window_reports_nothing(tmp_path, recwarn):
    with cprof.ProfilerContext(output_dir=tmp_path, profile_name="sp3", activities=["CPU"],
                               with_stack=True, gzip=False, verbose=False) as c:
        th = threading.Thread(target=parent)
        th.start()
        th.join()
        parent()
    assert "with_stack_replaced" not in load_trace(c.trace_path)["cprof"]
    assert not [w for w in recwarn if "replaced cprof's" in str(w.message)]

# ---- cprof's own code is not traced ----

OWN_SRC = '''
def own_calls(fn, *extra):
    len(extra)
    return fn()


def own_inner():
    raise KeyError("own")


def own_raises():
    len([])
    own_inner()


def own_gen(fn):
    yield len([1])
    yield fn()
    yield 3


def own_consume(it):
    out = []
    for x in it:
        out.append(x)
    return out


def own_wrapper(*args, **kwargs):
    len(args)
    return args[0](*args[1:], **kwargs)


def own_start(start, fn):
    start()
    len([])
    fn()
    return sorted([2, 1], key=lambda v: v)
'''


@pytest.fixture
def own(tmp_path):
    """A module standing for cprof's own code: the tracer is given its directory as
    own_prefix (cprof/_pystack.py gives cprof's)."""
    import importlib.util
    d = tmp_path / "ownpkg"
    d.mkdir()
    (d / "ownmod.py").write_text(OWN_SRC)
    spec = importlib.util.spec_from_file_location("cprof_test_ownmod", d / "ownmod.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.PREFIX = str(d) + os.sep
    return mod


def run_own(own, body, c_calls=True):
    """run_traced with own's directory as the tracer's own code."""
    _C.start()
    try:
        _C.tracer_start(c_calls=c_calls, own_prefix=own.PREFIX,
                        strip_prefixes=_pystack.strip_prefixes())
        try:
            body()
        finally:
            counts = _C.tracer_stop()
    finally:
        snap = _C.stop()
    recs = records(snap)
    snap.close()
    return recs, counts


def shadow():
    s = _C._tracer_shadow()
    return (s["depth"], s["suppress"], s["own"], s["recorded"])


def assert_nothing_of(own, recs):
    assert [r for r in recs if own.PREFIX in r.name] == []


def test_own_code_and_what_it_calls_are_not_recorded(own):
    states = []

    def body():
        states.append(shadow())
        own.own_calls(parent)  # own: not recorded, nor parent / leaf / len under it
        states.append(shadow())
        leaf(7)

    recs, counts = run_own(own, body)
    assert_nothing_of(own, recs)
    assert named(recs, parent) == [] and named(recs, "builtins.len") == []
    b, lf = one(recs, body), one(recs, leaf)
    assert inside(lf, b) and lf.depth == b.depth + 1
    assert states[0] == states[1] and states[0][1] == 0
    assert counts["suppressed"] >= 5  # own_calls, len, parent, leaf, leaf


def test_exception_through_own_frames_keeps_the_depth_balanced(own):
    states = []

    def body():
        states.append(shadow())
        try:
            own.own_raises()  # raised two own frames down
        except KeyError:
            pass
        states.append(shadow())
        try:
            own.own_calls(raiser)  # raised in user code called back, through an own frame
        except KeyError:
            pass
        states.append(shadow())
        leaf(1)

    recs, _ = run_own(own, body)
    assert_nothing_of(own, recs)
    assert named(recs, raiser) == [] and named(recs, "builtins.len") == []
    assert states[0] == states[1] == states[2] and states[0][1] == 0
    b, lf = one(recs, body), one(recs, leaf)
    assert inside(lf, b) and lf.depth == b.depth + 1 and not lf.truncated


def test_own_generator_suppresses_only_while_it_runs(own):
    states = []

    def body():
        states.append(shadow())
        g = own.own_gen(fast)
        next(g)  # len under the own generator: not recorded
        states.append(shadow())
        leaf(1)  # the generator is suspended: recorded
        next(g)  # fast() called back by the generator: not recorded
        leaf(2)
        with pytest.raises(ValueError):
            g.throw(ValueError("in"))
        states.append(shadow())
        # a user generator run by own code runs under it; resumed by the user, it is recorded
        u = gen3()
        own.own_calls(lambda: next(u))
        assert own.own_consume(gen_cleanup()) == [1]
        next(u)
        states.append(shadow())
        leaf(3)

    recs, _ = run_own(own, body)
    assert_nothing_of(own, recs)
    assert named(recs, fast) == [] and named(recs, gen_cleanup) == []
    assert named(recs, "builtins.len") == []
    assert len(named(recs, "list.append")) == len(states)  # the test's, not own_consume's
    assert len(set(states)) == 1 and states[0][1] == 0
    b = one(recs, body)
    leaves = named(recs, leaf)
    assert len(leaves) == 3 and all(inside(x, b) and x.depth == b.depth + 1 for x in leaves)
    # only the run the user resumed (3.11 also runs u's frame when it is freed, after body)
    (g3,) = [r for r in named(recs, gen3) if inside(r, b)]
    assert g3.depth == b.depth + 2 and not g3.truncated  # under builtins.next


def test_pass_through_wrapper_records_the_wrapped_function(own):
    def body():
        own.own_wrapper(parent)

    recs, _ = run_own(own, body)
    assert_nothing_of(own, recs)
    assert named(recs, "builtins.len") == []  # the wrapper's own C call
    b, p = one(recs, body), one(recs, parent)
    assert inside(p, b) and p.depth == b.depth + 1
    assert all(inside(x, p) and x.depth == p.depth + 1 for x in named(recs, leaf))


def test_own_frames_running_at_start_stay_suppressed(own):
    """cprof's start() / __enter__ frames: entered before the tracer, they return after it
    started; what they do then (C calls, Python callees) is not recorded."""
    def starter():
        _C.tracer_start(c_calls=True, own_prefix=own.PREFIX,
                        strip_prefixes=_pystack.strip_prefixes())

    _C.start()
    try:
        own.own_start(starter, fast)
        leaf(1)
        len([])
        counts = _C.tracer_stop()
    finally:
        snap = _C.stop()
    recs = records(snap)
    snap.close()
    assert_nothing_of(own, recs)
    assert named(recs, fast) == [] and named(recs, starter) == []
    assert named(recs, "builtins.sorted") == []
    assert len(named(recs, "builtins.len")) == 1  # the test's own call only
    assert len(named(recs, leaf)) == 1 and counts["suppressed"] >= 4


def test_own_prefix_validation():
    with pytest.raises(ValueError, match="own_prefix"):
        _C.tracer_start(own_prefix="")
    with pytest.raises(TypeError):
        _C.tracer_start(own_prefix=5)
    assert not _C.tracer_active()


def test_pystack_passes_cprof_package_as_own():
    assert _pystack._OWN_PREFIX == os.path.dirname(cprof.__file__) + os.sep
    _C.start()
    try:
        _pystack.start()
        s = _C._tracer_shadow()
        _pystack.stop()
    finally:
        _C.stop().close()
    # this frame's callees ran after _pystack.start returned: nothing of cprof's left
    assert s is None or s["suppress"] == 0


def user_work():
    parent()
    len([1])
    return fib(3)


def trace_ranges(path):
    evs = ranges_of(load_trace(path))
    return [e for e in evs if e["cat"] in ("python_function", "cpu_op")]


def check_only_user_code(evs, fn):
    pkg = os.path.dirname(cprof.__file__) + os.sep
    own = [e["name"] for e in evs if pkg in e["name"] or e["name"].startswith("cprof")]
    assert own == []
    assert [e for e in evs if e["name"] in ("time.time", "time.perf_counter_ns")] == []
    u = [e for e in evs if e["name"] == pyname(fn)]
    assert len(u) == 1, [e["name"] for e in evs]
    u = u[0]
    lo, hi = u["ts"] - 0.001, u["ts"] + u["dur"] + 0.001
    outside = [e for e in evs if not (lo <= e["ts"] and e["ts"] + e["dur"] <= hi)]
    # everything recorded is the user's function, under it, or a frame that was running when
    # the window opened (the test calling it, pytest's frames): those enclose it, as in torch
    assert all(e["cat"] == "python_function" and e["ts"] <= lo and e["ts"] + e["dur"] >= hi
               for e in outside), [e["name"] for e in outside]
    callers = {e["name"] for e in outside}
    assert any(n.endswith(": test_profiler_context_records_only_user_code") or
               n.endswith(": test_profile_function_decorator_records_the_function")
               for n in callers), callers
    return u


def test_profiler_context_records_only_user_code(tmp_path):
    with cprof.ProfilerContext(output_dir=tmp_path, profile_name="t", activities=["CPU"],
                               with_stack=True, record_shapes=False, verbose=False):
        user_work()
    evs = trace_ranges(tmp_path / "t.trace.json.gz")
    u = check_only_user_code(evs, user_work)
    by = collections.defaultdict(list)
    for e in evs:
        by[e["name"]].append(e)
    (p,) = by[pyname(parent)]
    assert len(by[pyname(leaf)]) == 2 and len(by[pyname(fib)]) == 5
    assert len(by["builtins.len"]) == 1
    assert all(p["ts"] - 0.001 <= e["ts"] <= p["ts"] + p["dur"] for e in by[pyname(leaf)])
    assert u["ts"] <= p["ts"]


def test_profile_function_decorator_records_the_function(tmp_path):
    @cprof.profile_function(output_dir=tmp_path, profile_name="pf", activities=["CPU"],
                            with_stack=True, record_shapes=False, verbose=False)
    def decorated():
        return user_work()

    assert decorated() == 2
    evs = trace_ranges(tmp_path / "pf.trace.json.gz")
    check_only_user_code(evs, decorated.__wrapped__)
    assert len([e for e in evs if e["name"] == pyname(leaf)]) == 2


def test_range_decorator_records_the_function():
    deco = cprof.range("deco")(parent)

    def body():
        deco()

    recs, _ = run_traced(body, c_calls=True)
    pkg = os.path.dirname(cprof.__file__) + os.sep
    assert [r for r in recs if pkg in r.name or r.name.startswith("cprof")] == []
    b, d, p = one(recs, body), one(recs, "deco"), one(recs, parent)
    assert inside(d, b) and inside(p, d) and p.depth == d.depth + 1 == b.depth + 2


def test_cprof_functions_taking_args_and_kwargs_are_pass_through():
    """The tracer traces under own code taking *args and **kwargs (a decorator's wrapper):
    every such function in cprof must forward them to a call, or call nothing."""
    import ast
    import pathlib
    bad = []
    for path in sorted(pathlib.Path(cprof.__file__).parent.rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if not (fn.args.vararg and fn.args.kwarg):
                continue
            calls = [c for c in ast.walk(fn) if isinstance(c, ast.Call)]
            star, kw = fn.args.vararg.arg, fn.args.kwarg.arg
            forwards = any(
                any(isinstance(a, ast.Starred) and getattr(a.value, "id", None) == star
                    for a in c.args)
                and any(k.arg is None and getattr(k.value, "id", None) == kw
                        for k in c.keywords)
                for c in calls)
            if calls and not forwards:
                bad.append(f"{path.name}:{fn.lineno} {fn.name}")
    assert bad == []


def test_own_frames_of_another_thread_running_at_start(own):
    """Each thread's frames are seeded at its first call event: a thread inside own code when
    the tracer starts records nothing of what that code does later; a user thread's running
    frames are recorded from then on (its target, as torch records running frames)."""
    go = threading.Event()
    out, tids = [], []

    def waiter():
        go.wait()
        out.append(leaf(1))  # under own_calls: not recorded

    def user_thread():
        go.wait()
        out.append(leaf(2))
        tids.append(threading.get_native_id())

    threads = [threading.Thread(target=own.own_calls, args=(waiter,)),
               threading.Thread(target=user_thread)]
    for t in threads:
        t.start()
    try:
        _C.start()
        _C.tracer_start(own_prefix=own.PREFIX,
                        strip_prefixes=_pystack.strip_prefixes())
        go.set()
        for t in threads:
            t.join(10)
        _C.tracer_stop()
        snap = _C.stop()
    finally:
        go.set()
        for t in threads:
            t.join()
    recs = records(snap)
    snap.close()
    assert out == [2, 4] or out == [4, 2]
    (lf,) = named(recs, leaf)
    assert lf.tid == tids[0]
    assert named(recs, waiter) == []
    (ut,) = running(recs, user_thread)  # running at start: named by its line then
    assert ut.tid == tids[0] and inside(lf, ut) and lf.depth > ut.depth


def _leaf():
    return 1


def _mid():
    return _leaf() + _leaf()


def _top():
    return _mid()


def test_python_ids_give_each_function_its_caller(tmp_path):
    """TRACE_FORMAT.md: python_function events carry "Python id" and "Python parent id" (the
    id of the enclosing python_function on the thread; null for none), as torch.profiler."""
    with cprof.profile(activities=["CPU"], with_stack=True, record_ops=False) as p:
        _top()
        t = threading.Thread(target=_mid)
        t.start()
        t.join()
    p.export_chrome_trace(str(tmp_path / "t.json"))
    ev = [e for e in load_trace(tmp_path / "t.json")["traceEvents"]
          if e.get("cat") == "python_function"]
    ids = [e["args"]["Python id"] for e in ev]
    assert len(set(ids)) == len(ids) and 0 not in ids
    by_id = {e["args"]["Python id"]: e for e in ev}
    names = {pyname(f): f.__name__ for f in (_leaf, _mid, _top)}

    def caller(e):
        par = e["args"]["Python parent id"]
        assert par != 0  # a root's parent is null, as torch writes it
        return None if par is None else by_id[par]

    main_tid = next(e["tid"] for e in ev if names.get(e["name"]) == "_top")
    seen = collections.Counter()
    for e in ev:
        if e["name"] not in names:
            continue
        short = names[e["name"]]
        par = caller(e)
        seen[short] += 1
        if short == "_leaf":
            assert names.get(par["name"]) == "_mid"
        if short == "_mid" and e["tid"] == main_tid:
            assert names.get(par["name"]) == "_top"
        if par is not None:  # a parent encloses its child, on the same thread
            assert par["tid"] == e["tid"] and par["ts"] <= e["ts"]
            assert e["ts"] + e["dur"] <= par["ts"] + par["dur"] + 0.001
    assert seen["_leaf"] == 4 and seen["_mid"] == 2 and seen["_top"] == 1


def _partial_overlaps(trace):
    """Pairs of complete events on one thread that overlap without one holding the other."""
    by_thread = collections.defaultdict(list)
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("python_function", "user_annotation",
                                                   "cpu_op"):
            by_thread[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    bad = []
    for evs in by_thread.values():
        evs.sort(key=lambda x: (x[0], -x[1]))
        open_ = []
        for b, e, name in evs:
            while open_ and open_[-1][1] <= b + 0.0015:
                open_.pop()
            if open_ and e > open_[-1][1] + 0.0015:
                bad.append((open_[-1][2], name))
            open_.append((b, e, name))
    return bad


def _left_open_in(outdir):
    with cprof.ProfilerContext(output_dir=outdir, profile_name="ov", activities=["CPU"],
                               with_stack=True, verbose=False) as c:
        cprof.push("left open")
    return c


def test_a_range_left_open_in_a_traced_frame_ends_inside_it(tmp_path):
    """The frames still running end when the tracer stops, just before the window closes: a
    user range opened inside one and still open ends with it, flagged truncated, not at the
    window's close after its frame."""
    c = _left_open_in(tmp_path)
    t = load_trace(c.trace_path)
    assert _partial_overlaps(t) == []
    (r,) = [e for e in t["traceEvents"] if e.get("name") == "left open"]
    assert r["args"]["cprof truncated"] == 1
    frame = next(e for e in t["traceEvents"] if e.get("cat") == "python_function"
                 and e["name"].endswith("_left_open_in"))
    assert r["ts"] + r["dur"] <= frame["ts"] + frame["dur"] + 0.001
    assert t["cprof"]["counts"]["cpu_ranges_truncated"] >= 1  # counted with the other cut ones
    cprof.pop()  # the slot was forgotten: the pop finds nothing of this window to close


def test_ranges_open_on_another_thread_at_the_end_nest_with_its_frames(tmp_path):
    stop = threading.Event()

    def inner():
        with cprof.range("work"):
            sum(range(20000))
            time.sleep(0.0005)

    def loop():
        while not stop.is_set():
            with cprof.range("iter"):
                inner()

    th = threading.Thread(target=loop, name="bg")
    th.start()
    try:
        time.sleep(0.02)
        with cprof.ProfilerContext(output_dir=tmp_path, profile_name="bg", activities=["CPU"],
                                   with_stack=True, verbose=False) as c:
            time.sleep(0.05)
    finally:
        stop.set()
        th.join()
    t = load_trace(c.trace_path)
    assert [e for e in t["traceEvents"] if e.get("name") == "work"]
    assert _partial_overlaps(t) == []


def test_a_first_windows_one_time_work_happens_before_it_opens():
    """Attaching to libtorch, loading cprof._torch_ops and importing the capture modules took
    ~5 ms inside the first window, where with_stack charged it to the user's frame holding the
    `with` (a fake hot spot). They are done before the window opens."""
    import subprocess
    from conftest import ROOT
    code = """
import json, sys
import torch
import cprof
from cprof import _C, _ops
seen = {}
real = _C.start
def start(*a, **k):
    seen.update(attached=_ops._state["attach"] is not None,
                observer=_ops._state["rf"] is not None,
                modules="cprof._modules" in sys.modules,
                pystack="cprof._pystack" in sys.modules)
    return real(*a, **k)
_C.start = start
with cprof.profile(activities=["CPU"], with_stack=True, record_shapes=True, record_ops=True):
    torch.ones(2) + 1
print(json.dumps(seen))
"""
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr[-2000:]
    import json
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {
        "attached": True, "observer": True, "modules": True, "pystack": True}


def test_prewarm_loads_nothing_of_the_operator_capture_under_cprof_ops_0():
    """CPROF_OPS=0 is the switch for an operator capture that misbehaves: the one-time setup
    done before a window must not load cprof._torch_ops either."""
    import json
    import subprocess
    from conftest import ROOT
    pytest.importorskip("torch")
    code = ("import json, sys, torch, cprof\n"
            "p = cprof.profile(activities=['CPU'], with_stack=True)\n"
            "p.start(); p.stop()\n"
            "print(json.dumps('cprof._torch_ops' in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=ROOT, CPROF_OPS="0"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) is False


def test_module_resolver_under_dynamo_records_no_frames_of_its_own(tmp_path):
    """Once torch._dynamo is imported (torch.compile, torch.profiler), cprof's module-name
    resolver runs with dynamo's frame callback off. torch._dynamo.disable's Python wrapper
    (eval_frame.py's _fn, set_eval_frame, _callback_from_stance, is_exporting) was recorded as
    user frames, one set per module named; cprof now switches the callback from C."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch._dynamo")
    nn = torch.nn
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    x = torch.randn(2, 4)
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], with_stack=True,
                       with_modules=True) as prof:
        for _ in range(3):
            model(x)
    names = {e.name for e in prof.events()}
    assert {"Sequential", "0", "1", "2"} <= names  # every module was named
    leaked = sorted(n for n in names
                    if re.search(r"eval_frame|_callback_from_stance|is_exporting", n))
    assert leaked == []


def test_stack_module_capture_is_removed_after_the_tracer_stops(monkeypatch):
    """with_stack alone installs module capture for its "nn.Module: " events; putting
    nn.Module.__call__ back costs ~240 us (type caches cleared). Removed while the tracer
    still ran, that was self time of the user's frame holding the `with`."""
    torch = pytest.importorskip("torch")
    from cprof import _modules
    seen = []
    real = _modules.ModuleHooksHandle.remove

    def remove(self):
        seen.append(_C.tracer_active())
        return real(self)
    monkeypatch.setattr(_modules.ModuleHooksHandle, "remove", remove)
    with cprof.profile(activities=["CPU"], with_stack=True, record_ops=False):
        torch.nn.Identity()(torch.ones(1))
    assert seen == [False]


def test_stack_module_capture_is_installed_before_the_tracer_starts(monkeypatch):
    """The install side of the test above (decision 168): putting the capture's
    nn.Module.__call__ in clears every subclass's type cache (~100-400 us); installed under
    the running tracer, a drop-in audit's `with profile(with_stack=True)` around one forward
    showed the function holding the `with` as the top self-CPU row. The running frames are
    still recorded, and the module events still come."""
    torch = pytest.importorskip("torch")
    from cprof import _modules
    seen = []
    real = _modules.install

    def install(*args, **kwargs):
        seen.append(_C.tracer_active())
        return real(*args, **kwargs)
    monkeypatch.setattr(_modules, "install", install)

    def holder():
        with cprof.profile(activities=["CPU"], with_stack=True, record_ops=False) as prof:
            torch.nn.Identity()(torch.ones(1))
        return prof
    names = {e.name for e in holder().events()}
    assert seen == [False]
    assert "nn.Module: Identity" in names
    assert any(n.endswith(": holder") for n in names)  # decision 96's running frame


def test_window_registration_runs_before_the_tracer_starts(monkeypatch):
    """cprof.profile.start() registered the window with the process lifecycle (signal
    handlers, exit hooks: ~25-40 us) after the tracer had started, charging it to the user's
    frame holding the `with` as self time (decision 168): it now runs first."""
    from cprof import _lifecycle
    seen = []
    real = _lifecycle.opened

    def opened(*args):
        seen.append(_C.tracer_active())
        return real(*args)
    monkeypatch.setattr(_lifecycle, "opened", opened)
    with cprof.profile(activities=["CPU"], with_stack=True, record_ops=False):
        pass
    assert seen == [False]
