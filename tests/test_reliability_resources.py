"""Reliability under resource limits (issue 7): a bounded range store with counted drops, disk
faults (full disk, unwritable paths, /dev/full) that lose neither data nor leave files behind,
and threads that start and end inside a window.

Figures quoted in docs/reliability.md come from the same scripts
(tests/reliability_res_scripts/) run by hand with larger settings."""
import errno
import gc
import gzip
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest

import cprof
import cprof._C as C
from conftest import load_trace, ranges_of

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "reliability_res_scripts")
IS_ROOT = os.geteuid() == 0

# Peak RSS a first window may add above its buffer cap: the writer's buffers (1 MiB sink
# staging, 256 KiB JSON, ~270 KiB zlib state) and first-use allocations. Measured 0.1-0.95 MiB
# for caps of 1-256 MiB (tests/reliability_res_scripts/mem_cap.py); 4 MiB leaves room for
# allocator and Python version differences.
RSS_CONSTANT_KB = 4 << 10


def _run(args, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                       env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _ctx(outdir, name="t", gzip_=True, **kw):
    return cprof.ProfilerContext(activities=["CPU"], with_stack=False, record_shapes=False,
                                 output_dir=outdir, profile_name=name, gzip=gzip_,
                                 verbose=False, **kw)


def _fill(n, name="rel/range"):
    r = cprof.range(name)
    for _ in range(n):
        with r:
            pass


def _check_complete(path, n, name="rel/range"):
    """The trace at path loads (gzip CRC checked to the end), holds n ranges and says so."""
    t = load_trace(path)
    assert sum(1 for e in ranges_of(t) if e["name"] == name) == n
    assert t["cprof"]["counts"]["cpu_ranges"] == n
    assert t["cprof"]["dropped"]["cpu_ranges"] == 0
    return t


# ---------------------------------------------------------------------------------------------
# 1. bounded memory


def test_ten_million_ranges_stay_within_the_cap(tmp_path):
    """10M ranges into an 8 MiB store, twice, in a fresh process: peak RSS grows by at most the
    cap plus RSS_CONSTANT_KB, the second window reuses the pooled chunks (peak RSS grows by
    less than 1 MiB), drops are counted in the warning and the trace, and the trace is valid
    with every kept range."""
    n, cap_mb = 10_000_000, 8
    d = _run([os.path.join(SCRIPTS, "mem_cap.py"), str(n), str(cap_mb), str(tmp_path), "2"])
    chunk = d["chunk_bytes"]
    kept = (cap_mb << 20) // chunk * 1024  # whole chunks of 1024 records under the cap
    w1, w2 = d["windows"]
    assert w1["store_bytes"] <= cap_mb << 20
    growth1 = w1["hwm_after_kb"] - w1["hwm_before_kb"]
    assert growth1 <= (cap_mb << 10) + RSS_CONSTANT_KB, d
    assert growth1 >= (cap_mb << 10) * 0.9, d  # the store was really filled
    assert w2["hwm_after_kb"] - w2["hwm_before_kb"] <= 1024, d
    for w in (w1, w2):
        assert any(f"{n - kept} of {n} ranges were dropped" in m for m in w["warnings"]), w
        t = load_trace(w["trace"])
        assert t["cprof"]["dropped"]["cpu_ranges"] == n - kept
        assert t["cprof"]["counts"]["cpu_ranges"] == kept
        assert len(ranges_of(t)) == kept
    print(f"\n[figures] 10M ranges, cap {cap_mb} MiB: kept {kept}, push {w1['push_s']:.2f} s, "
          f"write {w1['write_s']:.2f} s, peak RSS +{growth1} KiB "
          f"(cap {cap_mb << 10} KiB), 2nd window +{w2['hwm_after_kb'] - w2['hwm_before_kb']} KiB")


def test_lowering_the_cap_returns_memory(tmp_path):
    """The pool keeps its chunks between windows (reuse, above); lowering the cap frees them
    and RSS falls back near where it started."""
    cap_mb = 32
    d = _run([os.path.join(SCRIPTS, "mem_cap.py"), str(cap_mb << 14), str(cap_mb),
              str(tmp_path), "1"])
    w = d["windows"][0]
    assert w["rss_after_kb"] - d["rss_start_kb"] >= (cap_mb << 10) * 0.9, d
    assert d["store_bytes_after_lower_cap"] <= 1 << 20
    assert d["rss_after_lower_cap_kb"] - d["rss_start_kb"] <= 8 << 10, d


def test_each_recording_thread_holds_a_chunk(tmp_path):
    """Memory is handed out per thread in 64 KiB chunks: with a 1 MiB cap (15 chunks; live
    results of earlier tests do not count, decision 137) only that many threads can record; the
    other threads' ranges are dropped and counted, never lost silently."""
    gc.collect()
    m = C.memory()
    cap_chunks = (1 << 20) // m["chunk_bytes"]
    nthreads = cap_chunks + 10
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _ctx(tmp_path, gzip_=False, buffer_size_mb=1) as ctx:
            for i in range(nthreads):
                t = threading.Thread(target=_fill, args=(3,), name=f"cap-{i}")
                t.start()
                t.join()
    t = load_trace(ctx.trace_path)
    assert len(ranges_of(t)) == 3 * cap_chunks
    assert t["cprof"]["dropped"]["cpu_ranges"] == 3 * (nthreads - cap_chunks)
    assert any("ranges were dropped" in str(w.message) for w in caught)


# ---------------------------------------------------------------------------------------------
# 2. disk faults


@pytest.mark.parametrize("gz", [0, 1])
def test_full_disk_rlimit_fsize(tmp_path, gz):
    """write() failing with EFBIG (RLIMIT_FSIZE, SIGXFSZ ignored): a TraceWriteError with the
    errno and the path, no file left under any name, the data saved complete once space is
    back; export_chrome_trace over an existing trace leaves the old file untouched."""
    n = 20000
    d = _run([os.path.join(SCRIPTS, "disk_full.py"), str(tmp_path), str(n), str(gz), "65536"])
    sfx = ".gz" if gz else ""
    err = d["ctx_error"]
    assert err and err["type"] == "TraceWriteError" and err["oserror"]
    assert err["errno"] == errno.EFBIG
    assert "could not write the trace" in err["message"]
    assert str(tmp_path / "full.trace.json") in err["message"]
    assert os.strerror(errno.EFBIG) in err["message"]
    assert d["ctx_listing_after_error"] == []
    assert d["ctx_save_under_limit"]["errno"] == errno.EFBIG
    assert d["ctx_listing_after_second_error"] == []
    assert d["ctx_listing_after_save"] == ["saved.trace.json" + sfx]
    _check_complete(d["ctx_saved"]["path"], n, name="disk/range")
    assert d["export_error"]["errno"] == errno.EFBIG
    assert d["export_old_file_kept"]
    assert sorted(d["export_listing_after_error"]) == sorted(
        ["export.json" + sfx, "saved.trace.json" + sfx])
    _check_complete(d["export_retry"], n, name="disk/range")


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB tmpfs (root only; skipped where mount is not allowed)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if not IS_ROOT or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "cprof-test", str(mnt)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_full_tmpfs(tiny_tmpfs, tmp_path):
    """ENOSPC on a real (tiny) file system: the error, an empty directory with all its space
    back, and save() / export_chrome_trace elsewhere write the complete trace."""
    n = 20000
    ctx = _ctx(tiny_tmpfs, name="full")
    with pytest.raises(cprof.TraceWriteError) as ei:
        with ctx:
            _fill(n)
    assert ei.value.errno == errno.ENOSPC
    assert str(tiny_tmpfs / "full.trace.json.gz") in str(ei.value)
    assert os.listdir(tiny_tmpfs) == []
    st = os.statvfs(tiny_tmpfs)
    assert st.f_bfree == st.f_blocks  # the temp file's blocks were given back
    saved = ctx.save(tmp_path / "elsewhere.trace.json.gz")
    _check_complete(saved.path, n)

    with cprof.profile(activities=[cprof.ProfilerActivity.CPU]) as prof:
        _fill(n)
    with pytest.raises(cprof.TraceWriteError) as ei:
        prof.export_chrome_trace(str(tiny_tmpfs / "export.json.gz"))
    assert ei.value.errno == errno.ENOSPC
    assert os.listdir(tiny_tmpfs) == []
    _check_complete(prof.export_chrome_trace(str(tmp_path / "export.json.gz")), n)


def _window_losing_its_dir(tmp_path, n):
    """A window of n ranges whose output directory is removed before it closes: (the
    directory, the ProfilerContext, the TraceWriteError its exit raised)."""
    out = tmp_path / "gone"
    ctx = _ctx(out)
    with pytest.raises(cprof.TraceWriteError) as ei:
        with ctx:
            _fill(n)
            shutil.rmtree(out)
    return out, ctx, ei.value


def test_write_error_says_what_to_do(tmp_path):
    """The error names the path and the cause, and says how to get the data out."""
    out, _, err = _window_losing_its_dir(tmp_path, 10)
    msg = str(err)
    assert str(out) in msg and os.strerror(errno.ENOENT) in msg
    assert "save(path)" in msg
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU]) as prof:
        _fill(10)
    full = _char_device(tmp_path, "full", 1, 7)
    with pytest.raises(cprof.TraceWriteError) as ei:
        prof.export_chrome_trace(full)
    assert full in str(ei.value) and "export_chrome_trace(path)" in str(ei.value)


def test_output_dir_removed_during_window(tmp_path):
    """The directory disappears while the window runs (works as root and non-root): ENOENT,
    nothing created, save() elsewhere writes everything."""
    out, ctx, err = _window_losing_its_dir(tmp_path, 1000)
    assert err.errno == errno.ENOENT
    assert not out.exists()
    _check_complete(ctx.save(tmp_path / "saved.trace.json").path, 1000)


def test_profile_function_write_failure_keeps_result_and_trace(tmp_path, monkeypatch):
    """A profile_function call whose trace cannot be written where asked: no one holds the
    window to call save() on, so the trace goes to the temporary directory and a warning says
    where; the function's result is returned (and its exception raised) as without cprof."""
    import tempfile
    tmpd = tmp_path / "tmpd"
    tmpd.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpd))
    out = tmp_path / "gone"

    @cprof.profile_function(activities=["CPU"], output_dir=str(out), profile_name="pf",
                            record_shapes=False, verbose=False)
    def work(fail):
        out.mkdir(exist_ok=True)
        _fill(500)
        shutil.rmtree(out)
        if fail:
            raise KeyError("mine")
        return 42

    with pytest.warns(RuntimeWarning, match="it was written to .* instead") as rec:
        assert work(False) == 42
    msg = str(rec[-1].message)
    assert str(out) in msg and os.strerror(errno.ENOENT) in msg and "save(path)" not in msg
    (first,) = os.listdir(tmpd)
    t = load_trace(str(tmpd / first))
    assert sum(1 for e in ranges_of(t) if e["name"] == "rel/range") == 500
    assert [e["name"] for e in ranges_of(t)].count("pf") == 1
    with pytest.warns(RuntimeWarning, match="instead"):
        with pytest.raises(KeyError, match="mine"):
            work(True)
    assert len(os.listdir(tmpd)) == 2
    assert not C.active()
    # nowhere takes it (no temporary directory, the current one removed): said plainly, the
    # result still returned
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    os.rmdir(cwd)
    with pytest.warns(RuntimeWarning, match="the trace is lost"):
        assert work(False) == 42


def test_window_ended_at_process_exit_is_written_elsewhere_when_it_must(tmp_path):
    """A ProfilerContext still open when the process ends (sys.exit, an uncaught exception,
    SIGTERM) whose output directory is gone: the trace goes to $TMPDIR, the warning says
    where (not "call save(path)": the program is over), the exit status stays the program's."""
    code = textwrap.dedent("""
        import os, shutil, signal, sys
        import cprof
        out = sys.argv[2]
        os.makedirs(out)
        ctx = cprof.ProfilerContext(activities=["CPU"], with_stack=False, record_shapes=False,
                                    output_dir=out, profile_name="end", verbose=False)
        ctx.__enter__()
        r = cprof.range("rel/range")
        for _ in range(300):
            with r:
                pass
        shutil.rmtree(out)
        how = sys.argv[1]
        if how == "exit":
            sys.exit(3)
        if how == "raise":
            raise KeyError("uncaught")
        os.kill(os.getpid(), signal.SIGTERM)
    """)
    for how, status in (("exit", 3), ("raise", 1), ("term", -15)):
        tmpd = tmp_path / f"tmp-{how}"
        tmpd.mkdir()
        env = dict(os.environ, TMPDIR=str(tmpd),
                   PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        p = subprocess.run([sys.executable, "-c", code, how, str(tmp_path / f"out-{how}")],
                           capture_output=True, text=True, env=env, timeout=120)
        assert p.returncode == status, (how, p.stderr[-2000:])
        (name,) = os.listdir(tmpd)
        assert f"written to {tmpd / name} instead" in p.stderr, p.stderr[-2000:]
        assert "save(path)" not in p.stderr
        t = load_trace(str(tmpd / name))
        assert sum(1 for e in ranges_of(t) if e["name"] == "rel/range") == 300
        assert t["cprof"]["partial"] is True


@pytest.fixture
def readonly_dir(tmp_path):
    """A directory that becomes unwritable on request: a read-only bind mount as root (root
    ignores permission bits), chmod 0555 otherwise."""
    d = tmp_path / "ro"
    d.mkdir()
    state = {"mounted": False}

    def make_readonly():
        if IS_ROOT:
            p = subprocess.run(["mount", "--bind", str(d), str(d)], capture_output=True, text=True)
            if p.returncode != 0:
                pytest.skip(f"cannot bind-mount here: {p.stderr.strip()}")
            state["mounted"] = True
            p = subprocess.run(["mount", "-o", "remount,ro,bind", str(d)], capture_output=True,
                               text=True)
            if p.returncode != 0:
                pytest.skip(f"cannot remount read-only here: {p.stderr.strip()}")
            return errno.EROFS
        d.chmod(0o555)
        return errno.EACCES

    try:
        yield d, make_readonly
    finally:
        if state["mounted"]:
            subprocess.run(["umount", str(d)], capture_output=True)
        d.chmod(0o755)


def test_readonly_dir_before_window(readonly_dir):
    """An unwritable output directory is refused before the window opens (nothing to lose
    yet), with a message that says what to do."""
    d, make_readonly = readonly_dir
    make_readonly()
    with pytest.raises(cprof.TraceWriteError) as ei:
        with _ctx(d):
            pass
    assert ei.value.errno == errno.EACCES
    assert "not writable" in str(ei.value) and "output_dir" in str(ei.value)
    assert not C.active()


def test_readonly_dir_during_window(readonly_dir, tmp_path):
    """The directory turns read-only while the window runs: EROFS (root, read-only mount) or
    EACCES, nothing left in it, and the data saved elsewhere."""
    d, make_readonly = readonly_dir
    ctx = _ctx(d)
    with pytest.raises(cprof.TraceWriteError) as ei:
        with ctx:
            _fill(1000)
            want = make_readonly()
    assert ei.value.errno == want
    assert os.listdir(d) == []
    _check_complete(ctx.save(tmp_path / "saved.trace.json.gz").path, 1000)


def test_path_under_a_file(tmp_path):
    """The output directory replaced by a regular file during the window, then save() /
    export_chrome_trace to a path under that file: clear errors, the file untouched, and the
    data kept for the next try."""
    out = tmp_path / "out"
    ctx = _ctx(out)
    with pytest.raises(cprof.TraceWriteError) as ei:
        with ctx:
            _fill(100)
            out.rmdir()
            out.write_text("not a directory")
    assert ei.value.errno == errno.ENOTDIR
    with pytest.raises(cprof.TraceWriteError) as ei:
        ctx.save(out / "x.trace.json")
    assert ei.value.errno in (errno.ENOTDIR, errno.EEXIST)
    assert "is a file, not a directory" in str(ei.value)
    assert out.read_text() == "not a directory"
    _check_complete(ctx.save(tmp_path / "ok.trace.json").path, 100)

    with cprof.profile(activities=[cprof.ProfilerActivity.CPU]) as prof:
        _fill(100)
    with pytest.raises(cprof.TraceWriteError):
        prof.export_chrome_trace(str(out / "x.json"))
    assert out.read_text() == "not a directory"
    _check_complete(prof.export_chrome_trace(str(tmp_path / "ok.json")), 100)


def _char_device(tmp_path, name, major, minor):
    """A character device to write into: a private node as root (so a bug could never replace
    the real /dev/full or /dev/null), the system's otherwise (non-root cannot replace it)."""
    if not IS_ROOT:
        path = f"/dev/{name}"
        if not os.path.exists(path):
            pytest.skip(f"no {path}")
        return path
    path = str(tmp_path / name)
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        with open(path, "wb"):
            pass
    except OSError as err:
        pytest.skip(f"cannot make or open a device node here: {err}")
    return path


def test_dev_full(tmp_path):
    """export_chrome_trace to /dev/full writes into the device, never replaces it: ENOSPC,
    the node still a character device, nothing created beside it, the data kept."""
    full = _char_device(tmp_path, "full", 1, 7)
    before = set(os.listdir(os.path.dirname(full)))
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU]) as prof:
        _fill(1000)
    with pytest.raises(cprof.TraceWriteError) as ei:
        prof.export_chrome_trace(full)
    if IS_ROOT:
        assert ei.value.errno == errno.ENOSPC
        assert full in str(ei.value)
    else:
        # /dev is not writable by a user: refused by the directory check before any write
        # (ENOSPC once export_chrome_trace skips that check for devices)
        assert ei.value.errno in (errno.ENOSPC, errno.EACCES)
    assert stat.S_ISCHR(os.stat(full).st_mode), f"{full} was replaced"
    assert set(os.listdir(os.path.dirname(full))) == before
    _check_complete(prof.export_chrome_trace(str(tmp_path / "after.json")), 1000)


@pytest.mark.parametrize("gz", [0, 1])
def test_fifo_and_dev_null_are_written_into(tmp_path, gz):
    """An existing FIFO or device is a stream: the whole trace goes through it (a reader gets
    a valid trace) and the node stays what it was."""
    fifo = str(tmp_path / ("pipe.json.gz" if gz else "pipe.json"))
    os.mkfifo(fifo)
    got = {}

    def reader():
        with open(fifo, "rb") as f:
            got["data"] = f.read()

    with cprof.profile(activities=[cprof.ProfilerActivity.CPU]) as prof:
        _fill(1000)
    th = threading.Thread(target=reader, daemon=True)  # never blocks pytest's exit
    th.start()
    assert prof.export_chrome_trace(fifo) == fifo
    th.join(timeout=30)
    data = gzip.decompress(got["data"]) if gz else got["data"]
    t = json.loads(data)
    assert sum(1 for e in ranges_of(t) if e["name"] == "rel/range") == 1000
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(fifo)]
    if IS_ROOT:  # a private /dev/null: root could otherwise replace the real one
        null = _char_device(tmp_path, "null", 1, 3)
        assert prof.export_chrome_trace(null) == null
        assert stat.S_ISCHR(os.stat(null).st_mode), f"{null} was replaced"
        assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(fifo), "null"])


# ---------------------------------------------------------------------------------------------
# 3. threads that start and end inside a window


def _thread_ranges(trace):
    by_tid = {}
    for e in ranges_of(trace):
        by_tid.setdefault(e["tid"], []).append(e)
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    return by_tid, names


def _worker(i, n, out):
    out[i] = threading.get_native_id()
    r = cprof.range(f"worker/{i}")
    inner = cprof.range("worker/inner")
    for _ in range(n):
        with r:
            with inner:
                pass


def _run_workers(indices, n, tids, prefix):
    """One _worker thread per index (named prefix-i), all started, then all joined."""
    ts = [threading.Thread(target=_worker, args=(i, n, tids), name=f"{prefix}-{i}")
          for i in indices]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def test_threads_that_exit_inside_the_window(tmp_path):
    """16 threads run and exit (joined) before the window closes: every range is kept under the
    thread's OS tid, nested correctly."""
    n, k = 50, 16
    tids = {}
    with _ctx(tmp_path, gzip_=False) as ctx:
        _run_workers(range(k), n, tids, "exits")
    t = load_trace(ctx.trace_path)
    by_tid, _ = _thread_ranges(t)
    for i, tid in tids.items():
        evs = by_tid[tid]
        assert sum(e["name"] == f"worker/{i}" for e in evs) == n
        assert sum(e["name"] == "worker/inner" for e in evs) == n
    assert t["cprof"]["counts"]["threads"] == k
    assert t["cprof"]["dropped"]["cpu_ranges"] == 0


def test_exited_threads_keep_their_names(tmp_path):
    """An exited thread's ranges carry its own name, not a later thread's that reused its
    pthread ident."""
    tids = {}
    gate, go = threading.Event(), threading.Event()

    def linger():
        with cprof.range("linger"):
            gate.set()
            go.wait()

    with _ctx(tmp_path, gzip_=False) as ctx:
        for i in range(20):
            t = threading.Thread(target=_worker, args=(i, 2, tids), name=f"gone-{i}")
            t.start()
            t.join()
        lt = threading.Thread(target=linger, name="lingering")
        lt.start()
        gate.wait()
    go.set()
    lt.join()
    _, names = _thread_ranges(load_trace(ctx.trace_path))
    for i, tid in tids.items():
        assert names[tid] == f"gone-{i}"


def test_threads_recording_outside_windows_leave_nothing_behind(tmp_path):
    """A thread that used cprof.range with no window open kept its per-thread state (~1.3 KB)
    until the next window, and its name in the process's name table for good: a program
    profiling rarely, starting a thread per request, grew without bound and filled the name
    table (soak audit). Now an exited thread goes at the next registration outside a window,
    and a thread is named at its first record in a window; one that records there later is
    still named."""
    code = textwrap.dedent(f"""
        import json, os, threading
        os.environ["CPROF_NAMES_LIMIT"] = "3000"  # 22,000 thread names would have filled it
        import cprof
        def rss_kb():
            return int([l for l in open("/proc/self/status") if l.startswith("VmRSS")][0].split()[1])
        def work():
            with cprof.range("request"):
                pass
        def batch(n):
            for _ in range(n // 100):
                ts = [threading.Thread(target=work) for _ in range(100)]
                for t in ts: t.start()
                for t in ts: t.join()
        batch(2000)
        r0 = rss_kb()
        batch(20000)
        growth = rss_kb() - r0
        go, done = threading.Event(), threading.Event()
        def later():
            with cprof.range("before"):
                pass
            go.wait()
            with cprof.range("inside"):
                pass
            done.set()
        t = threading.Thread(target=later, name="named-later")
        t.start()
        with cprof.ProfilerContext(output_dir={str(tmp_path)!r}, profile_name="t",
                                   activities=["CPU"], with_stack=False, verbose=False) as ctx:
            with cprof.range("fresh"):
                pass
            go.set(); done.wait(); t.join()
        print(json.dumps({{"growth_kb": growth, "trace": str(ctx.trace_path)}}))
    """)
    out = _run(["-c", code])
    assert out["growth_kb"] < 8 << 10, out  # 20,000 threads: was ~25 MiB
    t = load_trace(out["trace"])
    assert {e["name"] for e in ranges_of(t)} == {"fresh", "inside"}  # not "[...table full]"
    _, names = _thread_ranges(t)
    assert "named-later" in names.values()


def test_threads_still_running_at_stop(tmp_path):
    """Threads inside a range when the window closes: the range is closed at stop and flagged
    truncated; their later pop is harmless, they record into the next window, and their
    threads' data is freed after they exit (the chunk pool does not grow)."""
    k = 4
    started = threading.Barrier(k + 1)
    stopped = threading.Event()
    second_open = threading.Event()
    done = threading.Barrier(k + 1)
    errors = []
    tids = {}

    def runner(i):
        try:
            tids[i] = threading.get_native_id()
            with cprof.range("runner/outer"):
                _fill(10, "runner/before")
                started.wait()
                stopped.wait()
            # the window closed under this range: its exit must not raise
            second_open.wait()
            _fill(5, "runner/after")
            done.wait()
        except Exception as err:  # reported by the main thread
            errors.append(err)
            started.abort()
            done.abort()

    ts = [threading.Thread(target=runner, args=(i,), name=f"runner-{i}") for i in range(k)]
    with _ctx(tmp_path, name="w1", gzip_=False) as c1:
        for t in ts:
            t.start()
        started.wait(timeout=30)
    stopped.set()
    with _ctx(tmp_path, name="w2", gzip_=False) as c2:
        second_open.set()
        done.wait(timeout=30)
    for t in ts:
        t.join()
    assert not errors, errors
    t1, t2 = load_trace(c1.trace_path), load_trace(c2.trace_path)
    by1, names1 = _thread_ranges(t1)
    by2, _ = _thread_ranges(t2)
    window_end = max(e["ts"] + e["dur"] for e in t1["traceEvents"] if e.get("cat") == "Trace")
    for i, tid in tids.items():
        outer = [e for e in by1[tid] if e["name"] == "runner/outer"]
        assert len(outer) == 1 and outer[0]["args"].get("cprof truncated") == 1
        assert outer[0]["ts"] + outer[0]["dur"] <= window_end + 0.001
        assert sum(e["name"] == "runner/before" for e in by1[tid]) == 10
        assert names1[tid] == f"runner-{i}"
        assert [e["name"] for e in by2[tid]] == ["runner/after"] * 5
    assert t1["cprof"]["counts"]["cpu_ranges_truncated"] == k

    # the exited threads are freed at the next start; their chunks went back to the pool,
    # so more windows with new threads allocate nothing new
    pool = C.memory()["allocated_bytes"]
    for _ in range(3):
        with _ctx(tmp_path, name="again", gzip_=False):
            ts = [threading.Thread(target=_fill, args=(5,)) for _ in range(k)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
    assert C.memory()["allocated_bytes"] == pool


def test_two_hundred_short_lived_threads(tmp_path):
    """200 threads, 8 at a time, each living for 10 ranges: all 2,000 ranges kept under 200
    distinct tids, and three such windows in a row reuse the same chunks."""
    k, n = 200, 5
    pools = []
    for rnd in range(3):
        tids = {}
        with _ctx(tmp_path, name=f"short{rnd}", gzip_=False, buffer_size_mb=32) as ctx:
            for base in range(0, k, 8):
                _run_workers(range(base, base + 8), n, tids, "short")
        t = load_trace(ctx.trace_path)
        by_tid, _ = _thread_ranges(t)
        assert len(set(tids.values())) == k
        assert all(len(by_tid[tid]) == 2 * n for tid in tids.values())
        assert len(ranges_of(t)) == 2 * n * k
        assert t["cprof"]["counts"]["threads"] == k
        assert t["cprof"]["dropped"]["cpu_ranges"] == 0
        pools.append(C.memory()["allocated_bytes"])
    assert pools[0] == pools[1] == pools[2]
