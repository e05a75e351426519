"""cprof.range / push / pop: nesting per thread, threads, errors, allocation, memory cap."""
import gc
import json
import os
import threading
import tracemalloc

import warnings

import pytest

import cprof
import cprof._C as C
from conftest import load_trace, ranges_of


def collect(fn):
    C.start()
    try:
        fn()
    finally:
        snap = C.stop()
    return snap


def test_range_context_and_decorator_and_push_pop():
    @cprof.range("decorated")
    def f(x):
        """doc"""
        return x + 1

    def body():
        with cprof.range("a"):
            cprof.push("b")
            assert f(1) == 2
            cprof.pop()

    snap = collect(body)
    recs = snap.records()
    assert [(r[1], r[5]) for r in recs] == [("a", 0), ("b", 1), ("decorated", 2)]
    a, b, d = recs
    assert a[3] <= b[3] <= d[3] <= d[4] <= b[4] <= a[4]
    assert f.__name__ == "f" and f.__doc__ == "doc"


def test_async_decorator():
    import asyncio

    @cprof.range("coro")
    async def g():
        return 5

    snap = collect(lambda: asyncio.run(g()))
    assert [r[1] for r in snap.records()] == ["coro"]


def test_pop_without_push_is_error_and_harmless():
    with pytest.raises(cprof.NoOpenRangeError):
        cprof.pop()

    def body():
        with cprof.range("ok"):
            pass
        with pytest.raises(cprof.CprofError):
            cprof.pop()
        with cprof.range("still ok"):
            pass

    snap = collect(body)
    assert [r[1] for r in snap.records()] == ["ok", "still ok"]
    assert C.depth() == 0


def test_interleaved_ranges_each_end_their_own():
    """Ranges that do not nest (asyncio tasks interleaving on one thread, exits out of order)
    each end at their own exit: an exit used to end the thread's innermost range, swapping the
    durations of the two silently."""
    import asyncio
    import time as _time

    @cprof.range("fast")
    async def fast():
        await asyncio.sleep(0.02)

    @cprof.range("slow")
    async def slow():
        await asyncio.sleep(0.10)

    async def rf(name, secs):
        with cprof.record_function(name):
            await asyncio.sleep(secs)

    async def main():
        await asyncio.gather(slow(), fast())
        await asyncio.gather(rf("rf_slow", 0.10), rf("rf_fast", 0.02))

    def manual():
        a, b = cprof.range("A"), cprof.range("B")
        a.__enter__()
        b.__enter__()
        a.__exit__(None, None, None)  # A ends first, under B
        _time.sleep(0.05)
        b.__exit__(None, None, None)

    snap = collect(lambda: (asyncio.run(main()), manual()))
    dur = {r[1]: (r[4] - r[3]) / 1e6 for r in snap.records()}
    assert 15 < dur["fast"] < 80 and dur["slow"] >= 95, dur
    assert 15 < dur["rf_fast"] < 80 and dur["rf_slow"] >= 95, dur
    assert dur["A"] < 40 and dur["B"] >= 45, dur
    assert C.depth() == 0


def test_a_stray_pop_never_ends_a_with_range():
    """pop() belongs to push(): one with no push() raises at the pop, and the enclosing `with`
    range still ends at its own exit (it used to be ended by the pop, then its exit raised and
    replaced the user's exception)."""
    def body():
        with cprof.range("outer"):
            with pytest.raises(cprof.NoOpenRangeError):
                cprof.pop()
            cprof.push("pushed")
            with cprof.range("inner"):
                cprof.pop()  # passes over "inner" to the push()
        with pytest.raises(ValueError, match="user"):
            with cprof.range("r"):
                cprof.push("p")
                raise ValueError("user")
        cprof.pop()

    snap = collect(body)
    recs = {r[1]: r for r in snap.records()}
    assert set(recs) == {"outer", "pushed", "inner", "r", "p"}
    o, p_, i = recs["outer"], recs["pushed"], recs["inner"]
    assert p_[4] <= i[4] <= o[4]  # pushed ended (by pop) before inner's exit, outer last
    assert C.depth() == 0


def test_a_range_exit_error_never_hides_the_users_exception():
    r = cprof.range("x")
    with pytest.raises(KeyError):
        with r:
            r.__exit__(None, None, None)  # ends it early: the with's own exit finds none open
            raise KeyError("user")
    with pytest.raises(cprof.NoOpenRangeError):
        r.__exit__(None, None, None)  # with no exception in flight, the misuse is reported


def test_one_range_object_on_many_threads_and_in_recursion():
    shared = cprof.range("shared")

    @cprof.range("rec")
    def rec(n):
        return rec(n - 1) + 1 if n else 0

    barrier = threading.Barrier(4)

    def worker():
        barrier.wait()
        for _ in range(200):
            with shared:
                with shared:
                    pass
        assert rec(5) == 5

    def body():
        ts = [threading.Thread(target=worker) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    snap = collect(body)
    recs = snap.records()
    assert sum(r[1] == "shared" for r in recs) == 4 * 400
    by_tid = {}
    for r in recs:
        by_tid.setdefault(r[0], []).append(r)
    assert len(by_tid) == 4
    for rs in by_tid.values():
        open_ = []  # each thread's ranges nest exactly
        for r in sorted(rs, key=lambda r: (r[3], r[5])):
            while open_ and open_[-1][4] <= r[3] and open_[-1] is not r:
                open_.pop()
            assert r[5] == len(open_), r
            if open_:
                assert r[4] <= open_[-1][4]
            open_.append(r)
        depths = [r[5] for r in rs if r[1] == "rec"]
        assert depths == list(range(6))


def test_range_decorator_on_generators_spans_their_life():
    import asyncio
    import time as _time

    @cprof.range("gen")
    def gen():
        for i in range(3):
            _time.sleep(0.01)
            yield i

    @cprof.range("agen")
    async def agen():
        for i in range(3):
            await asyncio.sleep(0.01)
            yield i

    async def consume():
        return [i async for i in agen()]

    def body():
        assert list(gen()) == [0, 1, 2]
        assert asyncio.run(consume()) == [0, 1, 2]

    snap = collect(body)
    dur = {r[1]: (r[4] - r[3]) / 1e6 for r in snap.records()}
    assert dur["gen"] >= 28 and dur["agen"] >= 28, dur
    assert C.depth() == 0


def test_range_name_must_be_str():
    with pytest.raises(TypeError):
        cprof.range(b"bytes")
    with pytest.raises(TypeError):
        cprof.push(3)


def test_ranges_outside_window_record_nothing_and_keep_nesting():
    cprof.push("before window")
    C.start()
    with cprof.range("inside"):
        pass
    cprof.pop()  # closes "before window", which was not recorded
    snap = C.stop()
    assert [r[1] for r in snap.records()] == ["inside"]
    assert C.depth() == 0


def test_range_open_at_stop_is_truncated_and_pop_after_is_fine():
    C.start()
    cprof.push("spans the end")
    snap = C.stop()
    cprof.pop()
    (rec,) = snap.records()
    assert rec[1] == "spans the end" and rec[6] == 1 and rec[4] == snap.stop_ns
    assert snap.truncated == 1


def test_windows_do_not_leak_into_each_other():
    s1 = collect(lambda: [cprof.push("w1"), cprof.pop()])
    s2 = collect(lambda: [cprof.push("w2"), cprof.pop()])
    assert [r[1] for r in s1.records()] == ["w1"]
    assert [r[1] for r in s2.records()] == ["w2"]
    assert s2.window_id == s1.window_id + 1


def test_start_twice_and_stop_twice_are_errors():
    C.start()
    with pytest.raises(cprof.WindowStateError):
        C.start()
    C.stop()
    with pytest.raises(cprof.WindowStateError):
        C.stop()


def test_eight_threads_100k_ranges_each(tmp_path):
    n_threads, per_thread = 8, 100_000
    barrier = threading.Barrier(n_threads)

    def work(i):
        barrier.wait()
        outer = cprof.range(f"thread{i}")
        inner = cprof.range("inner")
        for _ in range(per_thread // 2):
            with outer:
                with inner:
                    pass

    def body():
        threads = [threading.Thread(target=work, args=(i,), name=f"worker-{i}")
                   for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    snap = collect(body)
    assert snap.ranges == n_threads * per_thread and snap.dropped == 0
    by_tid = {}
    for tid, name, _cat, b, e, depth, trunc in snap.records():
        by_tid.setdefault(tid, []).append((name, b, e, depth))
    assert len(by_tid) == n_threads
    for recs in by_tid.values():
        assert len(recs) == per_thread
        outer_name = recs[0][0]
        for j in range(0, per_thread, 2):
            (on, ob, oe, od), (iname, ib, ie, idp) = recs[j], recs[j + 1]
            assert on == outer_name and od == 0 and iname == "inner" and idp == 1
            assert ob <= ib <= ie <= oe
    path, *_ = snap.write(str(tmp_path / "threads"), ".trace.json", gzip=0)
    t = load_trace(path)
    assert len(ranges_of(t)) == n_threads * per_thread
    thread_names = {e["args"]["name"] for e in t["traceEvents"] if e["name"] == "thread_name"}
    # threads that ended before stop keep cprof's default names; all are present
    assert len(thread_names) == n_threads


def test_thread_names_from_threading(tmp_path):
    ready, done = threading.Event(), threading.Event()

    def work():
        with cprof.range("in named thread"):
            ready.set()
            done.wait()

    t = threading.Thread(target=work, name="data-loader")
    C.start()
    t.start()
    ready.wait()
    snap = C.stop()
    snap.rename_threads({th.ident: th.name for th in threading.enumerate()})
    done.set()
    t.join()
    path, *_ = snap.write(str(tmp_path / "names"), ".trace.json", gzip=0)
    tr = load_trace(path)
    names = {e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "thread_name"}
    assert "data-loader" in names


def test_a_thread_name_with_lone_surrogates_reads_u_fffd(tmp_path):
    """'loader-\\udcff-0' lost its whole name ("thread N (python)"), where a range name
    keeps the rest with U+FFFD (strings audit #7)."""
    def work():
        with cprof.range("r"):
            pass

    C.start()
    t = threading.Thread(target=work, name="loader-\udcff-0")
    t.start()
    t.join()
    path, *_ = C.stop().write(str(tmp_path / "s"), ".trace.json", gzip=0)
    names = {e["args"]["name"] for e in load_trace(path)["traceEvents"]
             if e["name"] == "thread_name"}
    assert "loader-\ufffd\ufffd\ufffd-0" in names, names


def test_a_range_left_open_by_an_exited_thread_ends_at_its_exit(tmp_path):
    """It was drawn on the dead thread's track until the window's end."""
    import time

    def leak():
        cprof.push("leaked")  # never popped; the thread then exits

    C.start()
    t = threading.Thread(target=leak)
    t.start()
    t.join()
    time.sleep(0.3)  # the thread is gone for these 300 ms
    with cprof.range("main"):
        pass
    snap = C.stop()
    path, *_ = snap.write(str(tmp_path / "dead"), ".trace.json", gzip=0)
    (leaked,) = [e for e in ranges_of(load_trace(path)) if e["name"] == "leaked"]
    assert leaked["args"].get("cprof truncated") == 1
    assert leaked["dur"] < 150_000, leaked  # us: ended at the exit, not 300 ms later


def test_no_allocation_after_warmup():
    r = cprof.range("hot")

    def loop(n):
        for _ in range(n):
            with cprof.range("hot"):
                pass
            cprof.push("hot")
            cprof.pop()
            with r:
                pass

    C.start()
    try:
        loop(5000)  # warm-up: chunk allocation, freelists, caches
        tracemalloc.start()
        snap0 = tracemalloc.take_snapshot()
        loop(500)
        snap1 = tracemalloc.take_snapshot()
        tracemalloc.stop()
    finally:
        C.stop().close()
    growth = sum(s.size_diff for s in snap1.compare_to(snap0, "filename")
                 if s.size_diff > 0 and "tracemalloc" not in str(s.traceback))
    assert growth < 1024, snap1.compare_to(snap0, "lineno")[:5]


def test_memory_cap_counts_drops_and_trace_stays_valid(tmp_path):
    chunk = C.memory()["chunk_bytes"]
    # room for 2048 ranges in this window (live results of earlier tests do not count)
    C.set_buffer_cap(chunk * 2)
    try:
        C.start()
        for _ in range(5000):
            with cprof.range("x"):
                pass
        stored, dropped = C.counts()
        snap = C.stop()
    finally:
        C.set_buffer_cap(256 << 20)
    assert stored == 2048 and dropped == 5000 - 2048
    assert snap.ranges == 2048 and snap.dropped == 2952
    path, *_ = snap.write(str(tmp_path / "capped"), ".trace.json", gzip=0)
    t = load_trace(path)
    assert t["cprof"]["dropped"]["cpu_ranges"] == 2952
    assert len(ranges_of(t)) == 2048


def test_drops_warn_through_context(tmp_path):
    with pytest.warns(RuntimeWarning, match="dropped"):
        with cprof.ProfilerContext(output_dir=tmp_path, profile_name="cap", activities=["CPU"],
                                   buffer_size_mb=0.1, verbose=False) as p:
            for _ in range(3000):
                with cprof.range("x"):
                    pass
    t = load_trace(p.trace_path)
    assert t["cprof"]["dropped"]["cpu_ranges"] > 0


def test_results_kept_alive_do_not_count_against_the_next_windows_cap(tmp_path):
    """buffer_size_mb caps one window (decision 137): the results of an earlier window kept
    alive (the `prof` of a with block, as torch.profiler's examples keep it) made a later
    small window drop every range (decision 68 counted them against the cap)."""
    with cprof.profile(activities=["CPU"]) as old:
        for _ in range(60000):
            with cprof.range("old"):
                pass
    held = C.memory()["held_bytes"]
    assert held >= 60000 * 48  # the old window's chunks, off the cap
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with cprof.ProfilerContext(output_dir=tmp_path, profile_name="kept", with_stack=False,
                                   activities=["CPU"], buffer_size_mb=1, verbose=False) as p:
            for _ in range(100):
                with cprof.range("x"):
                    pass
    assert len(ranges_of(load_trace(p.trace_path))) == 100
    assert "dropped" not in load_trace(p.trace_path)["cprof"] or not load_trace(
        p.trace_path)["cprof"]["dropped"].get("cpu_ranges")
    assert len([e for e in old.events() if e.name == "old"]) == 60000  # still whole
    # the window itself is still capped, with old results alive
    with pytest.warns(RuntimeWarning, match=r"window's range buffer cap \(0.1 MiB\) was "
                      r"reached.*Raise buffer_size_mb"):
        with cprof.ProfilerContext(output_dir=tmp_path, profile_name="capped", with_stack=False,
                                   activities=["CPU"], buffer_size_mb=0.1,
                                   verbose=False) as q:
            for _ in range(5000):
                with cprof.range("x"):
                    pass
    assert load_trace(q.trace_path)["cprof"]["dropped"]["cpu_ranges"] > 0
    # released results come back to the pool and memory above the cap goes back to the system
    del old
    gc.collect()
    m = C.memory()
    assert m["held_bytes"] < held
    assert m["allocated_bytes"] - m["held_bytes"] <= max(m["cap_bytes"], 256 << 20)


def test_del_frees_a_profiles_results_without_waiting_for_the_garbage_collector(tmp_path):
    """A profile (and a ProfilerContext's) was a reference cycle (its action table held its
    own bound methods, its lifecycle owner itself or its context): `del prof` kept its ranges
    in memory until Python's cycle collector happened to run."""
    import weakref
    gc.collect()
    base = C.memory()["held_bytes"]
    gc.disable()
    try:
        with cprof.profile(activities=["CPU"]) as prof:
            for _ in range(5000):
                with cprof.range("x"):
                    pass
        assert C.memory()["held_bytes"] > base
        del prof
        assert C.memory()["held_bytes"] == base
        ctx = cprof.ProfilerContext(output_dir=tmp_path, activities=["CPU"], verbose=False,
                                    with_stack=False)
        with ctx:
            pass
        gone = weakref.ref(ctx._prof)
        del ctx
        assert gone() is None
    finally:
        gc.enable()


def test_set_cap_rejected_while_open():
    C.start()
    try:
        with pytest.raises(cprof.WindowStateError):
            C.set_buffer_cap(1 << 20)
    finally:
        C.stop()
    with pytest.raises(ValueError):
        C.set_buffer_cap(10)


def test_a_full_name_table_is_warned_about_and_counted(tmp_path):
    """The name table keeps every distinct name of the process (4M): once full, a range is
    recorded under a marker name; that used to happen with no warning and no count. Names are
    interned only in a window: outside one, distinct names cost nothing."""
    import subprocess
    import sys
    from conftest import ROOT
    code = f"""
import json, warnings, cprof
for i in range(5000):  # outside a window: not interned, so they fill nothing
    with cprof.range(f"outside {{i}}"):
        pass
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    with cprof.ProfilerContext(output_dir={str(tmp_path)!r}, profile_name="full",
                               activities=["CPU"], with_stack=False, verbose=False) as c:
        with cprof.range("early"):
            pass
        for i in range(3000):
            with cprof.range(f"request {{i}}"):
                pass
msgs = [str(x.message) for x in w]
import gzip
t = json.load(gzip.open(c.trace_path))
names = [e["name"] for e in t["traceEvents"] if e.get("cat") == "user_annotation"]
print(json.dumps({{"msgs": msgs, "refused": t["cprof"].get("names_refused"),
                  "early": "early" in names,
                  "marked": names.count("[cprof: name table full]")}}))
"""
    env = dict(os.environ, CPROF_NAMES_LIMIT="2000", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["early"] and got["refused"] >= 1000 and got["marked"] == got["refused"]
    assert any("name table is full" in m for m in got["msgs"]), got["msgs"]


def test_distinct_names_do_not_keep_python_objects_for_good():
    """Each distinct name (a schedule's ProfilerStep#N, names made per request) kept a str, an
    int and a dict slot for the process's life in the binding's name dict, beside its copy
    in the C name table: the dict is now a bounded cache in front of that table."""
    import tracemalloc
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        C.start()
        try:
            for i in range(150000):
                with cprof.range(f"distinct name {i}"):
                    pass
        finally:
            C.stop().close()
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 8 << 20, kept  # 150k names kept ~20 MiB of Python objects before
