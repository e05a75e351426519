"""ProfilerContext, profile_function, output naming, rank naming, bad input."""
import os
import pathlib
import time
import warnings

import pytest

import cprof
from conftest import load_trace, ranges_of


def user_ranges(trace):
    """The trace's CPU ranges other than Python functions."""
    return [e["name"] for e in ranges_of(trace) if e["cat"] != "python_function"]


def test_writes_trace_with_name_and_exposes_paths(outdir, capsys):
    with cprof.ProfilerContext(output_dir=outdir, profile_name="run") as p:
        with cprof.range("work"):
            pass
    assert isinstance(p.trace_path, pathlib.Path)
    assert p.trace_path == outdir / "run.trace.json.gz"
    assert p.output_dir == str(outdir)
    assert p.trace_path.exists()
    out = capsys.readouterr().out
    assert str(p.trace_path) in out and "events" in out and "s to write" in out
    trace = load_trace(p.trace_path)
    # with_stack (the default) also records the frames running at start (this test, pytest's)
    assert user_ranges(trace) == ["work"]


def test_trace_top_level_keys(outdir):
    with cprof.ProfilerContext(output_dir=outdir, profile_name="keys", with_stack=False):
        with cprof.range("a"):
            pass
    t = load_trace(outdir / "keys.trace.json.gz")
    for key in ("schemaVersion", "deviceProperties", "distributedInfo", "displayTimeUnit",
                "baseTimeNanoseconds", "traceEvents", "traceName", "cprof"):
        assert key in t, key
    assert t["distributedInfo"]["rank"] == 0 and t["distributedInfo"]["world_size"] == 1
    assert t["traceName"] == str(outdir / "keys.trace.json.gz")
    meta = t["cprof"]
    assert meta["version"] == cprof.__version__
    assert meta["config"]["with_stack"] is False
    assert meta["config"]["profile_name"] == "keys"
    assert meta["dropped"]["cpu_ranges"] == 0
    assert meta["counts"]["cpu_ranges"] == 1
    assert meta["partial"] is False
    names = {(e["name"], e.get("pid"), e.get("tid")) for e in t["traceEvents"] if e["ph"] == "M"}
    pid = os.getpid()
    assert ("process_name", pid, 0) in names
    assert any(n == "thread_name" and p == pid for n, p, _ in names)


def test_default_dir_env_read_at_call_time(tmp_path, monkeypatch):
    monkeypatch.setenv("CPROF_PROFILER_DIR", str(tmp_path / "a"))
    p1 = cprof.ProfilerContext(profile_name="x")
    monkeypatch.setenv("CPROF_PROFILER_DIR", str(tmp_path / "b"))
    p2 = cprof.ProfilerContext(profile_name="x")
    assert p1.output_dir == str(tmp_path / "a")
    assert p2.output_dir == str(tmp_path / "b")
    monkeypatch.delenv("CPROF_PROFILER_DIR")
    assert cprof.ProfilerContext().output_dir == "/tmp/cprof_profiles"


def test_default_name_is_timestamp(outdir):
    before = int(time.time())
    p = cprof.ProfilerContext(output_dir=outdir, verbose=False)
    stamp = int(p.profile_name.split("_", 1)[1])
    assert p.profile_name.startswith("profile_") and before <= stamp <= int(time.time())


def test_default_name_is_shared_by_the_ranks_of_a_torchrun_job(tmp_path):
    """Each rank used to stamp its own second, so ranks that reached the profiler in different
    seconds wrote profile_<a>-rank0 and profile_<b>-rank1. Under torchrun on one node the
    stamp is the agent's (their parent's) start: two "ranks" started 1.1 s apart agree."""
    import subprocess
    import sys
    code = ("import time, sys, cprof\n"
            "time.sleep(float(sys.argv[1]))\n"
            "print(cprof.ProfilerContext(activities=['CPU'], output_dir=sys.argv[2])"
            ".profile_name)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC")}
    env.update(PYTHONPATH=os.pathsep.join(sys.path), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
               TORCHELASTIC_RUN_ID="none")
    launched = int(time.time())
    procs = [subprocess.Popen([sys.executable, "-c", code, str(1.1 * r), str(tmp_path)],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, text=True) for r in (0, 1)]
    names = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert names[0] == names[1], names
    assert names[0].startswith("profile_") and int(names[0][len("profile_"):]) <= launched


def test_default_name_rule(tmp_path, monkeypatch):
    from cprof import _dist
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(k, raising=False)

    def name(**env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        try:
            return cprof.ProfilerContext(activities=["CPU"], output_dir=tmp_path).profile_name
        finally:
            for k in env:
                monkeypatch.delenv(k)

    now = int(time.time())
    # one node under torchrun: the agent's (the parent's) start
    parent = _dist._parent_start()
    assert parent is not None and parent <= now
    assert name(WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", RANK="1",
                TORCHELASTIC_RUN_ID="abc") == f"profile_{parent}"
    # several nodes: the rendezvous id (made a file name), which every node was given
    assert name(WORLD_SIZE="4", LOCAL_WORLD_SIZE="2", RANK="3",
                TORCHELASTIC_RUN_ID="job/42") == "profile_job_42"
    # nothing shared: each process's own time, as in one process or without torchrun
    for env in (dict(WORLD_SIZE="4", LOCAL_WORLD_SIZE="2", RANK="3", TORCHELASTIC_RUN_ID="none"),
                dict(WORLD_SIZE="2", RANK="1"),
                dict(TORCHELASTIC_RUN_ID="abc", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")):
        stamp = int(name(**env)[len("profile_"):])
        assert now <= stamp <= int(time.time()), env
    monkeypatch.setattr(_dist, "_parent_start", lambda: None)  # not Linux, or orphaned
    assert name(WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", RANK="1",
                TORCHELASTIC_RUN_ID="abc") == "profile_abc"


def test_same_name_never_overwrites(outdir):
    paths = []
    for i in range(3):
        with cprof.ProfilerContext(output_dir=outdir, profile_name="same", verbose=False) as p:
            with cprof.range(f"r{i}"):
                pass
        paths.append(p.trace_path)
    assert len(set(paths)) == 3
    assert [pth.name for pth in paths] == ["same.trace.json.gz", "same-1.trace.json.gz",
                                           "same-2.trace.json.gz"]
    for i, pth in enumerate(paths):
        assert user_ranges(load_trace(pth)) == [f"r{i}"]


def test_rank_naming_from_env(outdir, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with cprof.ProfilerContext(output_dir=outdir, profile_name="job", verbose=False) as p:
        pass
    assert p.trace_path.name == "job-rank3.trace.json.gz"
    t = load_trace(p.trace_path)
    assert t["distributedInfo"]["rank"] == 3 and t["distributedInfo"]["world_size"] == 4


def test_single_process_has_no_rank_suffix(outdir, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    with cprof.ProfilerContext(output_dir=outdir, profile_name="solo", verbose=False) as p:
        pass
    assert p.trace_path.name == "solo.trace.json.gz"


def test_plain_json_when_gzip_off(outdir):
    with cprof.ProfilerContext(output_dir=outdir, profile_name="plain", gzip=False,
                               verbose=False) as p:
        pass
    assert p.trace_path.name == "plain.trace.json"
    assert p.trace_path.read_bytes().lstrip().startswith(b"{")


def test_disabled_is_a_noop(tmp_path, monkeypatch):
    target = tmp_path / "never"
    ctx = cprof.ProfilerContext(enabled=False, output_dir=target, activities=["bogus"])
    with ctx as p:
        with cprof.range("x"):
            pass
    assert p.trace_path is None and p.output_dir is None
    assert not target.exists()
    assert not cprof._C.active()
    # the same attributes as an enabled context
    assert (p.profile_name, p.with_stack, p.record_shapes, p.activities) == (
        None, True, True, ["bogus"])
    assert p.memory_paths == [] and p.memory_summary is None


def test_output_dir_expands_user_and_env_alias(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    p = cprof.ProfilerContext(output_dir="~/profs", profile_name="t", verbose=False)
    assert p.output_dir == str(tmp_path / "profs")
    with p:
        pass
    assert p.trace_path == tmp_path / "profs" / "t.trace.json.gz" and p.trace_path.exists()
    monkeypatch.delenv("CPROF_PROFILER_DIR", raising=False)
    monkeypatch.setenv("CPROF_TORCH_PROFILER_DIR", str(tmp_path / "alias"))
    assert cprof.ProfilerContext().output_dir == str(tmp_path / "alias")
    monkeypatch.setenv("CPROF_PROFILER_DIR", str(tmp_path / "main"))  # the documented one wins
    assert cprof.ProfilerContext().output_dir == str(tmp_path / "main")
    monkeypatch.setenv("CPROF_PROFILER_DIR", "  ")  # blanks only: a slip, not a directory
    assert cprof.ProfilerContext().output_dir == str(tmp_path / "alias")


def test_relative_output_dir_survives_a_chdir_in_the_window(tmp_path, monkeypatch):
    """The directory checked before the window opens is the one written to: a program that
    changes directory inside the window (a relative output_dir, or a relative
    $CPROF_PROFILER_DIR) still gets its trace and memory files there."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    with cprof.ProfilerContext(output_dir="out", profile_name="t", activities=["CPU"],
                               verbose=False) as p:
        os.chdir("elsewhere")
    assert (tmp_path / "out" / "t.trace.json.gz").exists()
    assert p.trace_path.resolve() == tmp_path / "out" / "t.trace.json.gz"
    assert not (tmp_path / "elsewhere" / "out").exists()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CPROF_PROFILER_DIR", "envout")

    @cprof.profile_function(profile_name="f", activities=["CPU"], verbose=False)
    def moves():
        os.chdir("elsewhere")

    moves()
    assert (tmp_path / "envout" / "f.trace.json.gz").exists()
    monkeypatch.chdir(tmp_path)
    with cprof.ProfilerContext(output_dir="out", profile_name="same", verbose=False) as p:
        pass
    assert str(p.trace_path) == os.path.join("out", "same.trace.json.gz")  # as given


def test_disabled_is_cheap():
    ctx = cprof.ProfilerContext(enabled=False)
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        with ctx:
            pass
    per = (time.perf_counter() - t0) / n
    assert per < 20e-6  # generous: a few hundred ns in practice (see benchmarks)


@pytest.mark.parametrize("acts", [["cpu"], ["Cpu", "gpu"], ("CPU", "MEM"), "cpu"])
def test_activities_case_insensitive(acts, outdir):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = cprof.ProfilerContext(output_dir=outdir, activities=acts)
    assert all(a in ("CPU", "GPU", "MEM") for a in p.activities)


@pytest.mark.parametrize("acts", [["CPU", "TPU"], ["gpus"], [3], []])
def test_unknown_activity_is_value_error(acts):
    with pytest.raises(ValueError) as e:
        cprof.ProfilerContext(activities=acts)
    assert "CPU" in str(e.value) and "GPU" in str(e.value) and "MEM" in str(e.value)


def test_gpu_unavailable_warns_and_records_cpu(outdir):
    if cprof.features()["gpu_activity"]["available"]:
        pytest.skip("GPU activity is available here")
    with pytest.warns(RuntimeWarning, match="GPU activity"):
        with cprof.ProfilerContext(output_dir=outdir, profile_name="g", verbose=False) as p:
            with cprof.range("cpu side"):
                pass
    t = load_trace(p.trace_path)
    assert t["cprof"]["config"]["collected_activities"] == ["CPU"]
    assert "gpu_unavailable" in t["cprof"]
    # each profiler says it (a UserWarning too), a schedule's cycles only once
    with pytest.warns(UserWarning, match="GPU activity") as rec:
        with cprof.ProfilerContext(output_dir=outdir, profile_name="g2", verbose=False):
            pass
    assert all(isinstance(w.message, cprof.GpuUnavailableWarning) for w in rec)
    assert {w.filename for w in rec} == {__file__}  # points at the user's line, not cprof's
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with cprof.profile(activities=["CPU", "CUDA"],
                           schedule=cprof.schedule(wait=0, warmup=1, active=1)) as prof:
            for _ in range(6):
                prof.step()
    assert sum("GPU activity" in str(w.message) for w in rec) == 1


def test_uncreatable_output_dir_fails_before_window(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(cprof.TraceWriteError) as e:
        with cprof.ProfilerContext(output_dir=blocker / "sub", profile_name="n"):
            raise AssertionError("the body must not run")
    assert "output" in str(e.value) and not cprof._C.active()
    assert "pass another output_dir" in str(e.value)


def test_unusable_default_dir_names_the_variable_it_came_from(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("CPROF_PROFILER_DIR", str(blocker / "sub"))
    with pytest.raises(cprof.TraceWriteError, match=r"comes from \$CPROF_PROFILER_DIR"):
        with cprof.ProfilerContext(profile_name="n"):
            raise AssertionError("the body must not run")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_output_dir_fails_before_window(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    with pytest.raises(cprof.TraceWriteError):
        with cprof.ProfilerContext(output_dir=d, profile_name="n"):
            raise AssertionError("the body must not run")


@pytest.mark.skipif(not os.path.isdir("/sys/kernel") or os.geteuid() != 0,
                    reason="needs root and sysfs: the mode bits let root in, no file can be made")
@pytest.mark.parametrize("where", ["/sys/kernel", "/proc"])
def test_a_dir_whose_mode_bits_let_root_in_but_takes_no_file_fails_before_window(where):
    """os.access passes for root on /proc and /sys; the trace would be lost at the window's end.
    The output directory is probed by making (and removing) a file in it."""
    with pytest.raises(cprof.TraceWriteError, match="no file can be created"):
        with cprof.ProfilerContext(output_dir=where, profile_name="n"):
            raise AssertionError("the body must not run")
    assert not cprof._C.active()


def test_exception_inside_window_still_writes_and_propagates(outdir):
    class Boom(Exception):
        pass

    ctx = cprof.ProfilerContext(output_dir=outdir, profile_name="boom", verbose=False)
    err = Boom("original")
    with pytest.raises(Boom) as info:
        with ctx:
            with cprof.range("before the error"):
                pass
            with cprof.range("open when raised"):
                raise err
    assert info.value is err
    t = load_trace(ctx.trace_path)
    assert user_ranges(t) == ["before the error", "open when raised"]
    assert t["cprof"]["partial"] is True and t["cprof"]["end"] == "Boom"


def test_keyboard_interrupt_inside_window_still_writes(outdir):
    ctx = cprof.ProfilerContext(output_dir=outdir, profile_name="kbd", verbose=False)
    with pytest.raises(KeyboardInterrupt):
        with ctx:
            with cprof.range("r"):
                raise KeyboardInterrupt
    t = load_trace(ctx.trace_path)
    assert t["cprof"]["end"] == "KeyboardInterrupt"


def test_failed_write_keeps_data_for_save(tmp_path, monkeypatch):
    out = tmp_path / "out"
    ctx = cprof.ProfilerContext(output_dir=out, profile_name="lost", verbose=False,
                                with_stack=False)
    with pytest.raises(cprof.TraceWriteError):
        with ctx:
            with cprof.range("precious"):
                pass
            os.rmdir(out)  # the directory vanishes while profiling
    assert ctx.trace_path is None  # it named a file that was never written
    dest = tmp_path / "elsewhere" / "saved.trace.json"
    ctx.save(dest)
    assert ctx.trace_path == dest
    assert [e["name"] for e in ranges_of(load_trace(dest))] == ["precious"]
    assert not any(p.name.endswith(".tmp") for p in (tmp_path / "elsewhere").iterdir())


def test_a_failed_write_no_save_came_for_is_written_at_exit(tmp_path):
    """Seed 000's plain `with ctx:`: the failed write's TraceWriteError ("call save(path)")
    ends the program, and the trace was lost with it; it is written to the temporary
    directory at exit, with a warning naming it. Also when the block raised first."""
    import subprocess
    import sys
    from conftest import ROOT
    for raises in (False, True):
        tmp = tmp_path / f"tmp{raises}"
        tmp.mkdir()
        code = (f"import os, sys; sys.path.insert(0, {ROOT!r}); import cprof\n"
                f"with cprof.ProfilerContext(output_dir={str(tmp_path / 'out')!r}, "
                "profile_name='lost', verbose=False, activities=['CPU'], with_stack=False):\n"
                "    with cprof.range('precious'): pass\n"
                f"    os.rmdir({str(tmp_path / 'out')!r})\n"
                + ("    raise KeyError('users own')\n" if raises else ""))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=dict(os.environ, TMPDIR=str(tmp)), timeout=120)
        assert r.returncode == 1
        assert ("KeyError: 'users own'" if raises else "TraceWriteError") in r.stderr
        saved = tmp / "lost.trace.json.gz"
        assert f"save() was not called before the program's end; it was written to {saved}" \
            in r.stderr, r.stderr
        assert [e["name"] for e in ranges_of(load_trace(saved))] == ["precious"]


def test_a_failed_write_is_written_elsewhere_when_the_context_is_entered_again(
        tmp_path, monkeypatch):
    """Entering the context again released the unsaved window without a word."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)  # read $TMPDIR again
    out = tmp_path / "out"
    ctx = cprof.ProfilerContext(output_dir=out, profile_name="again", verbose=False,
                                activities=["CPU"], with_stack=False)
    with pytest.raises(cprof.TraceWriteError):
        with ctx:
            with cprof.range("first"):
                pass
            os.rmdir(out)
    with pytest.warns(RuntimeWarning, match="entered again; it was written to .*again"):
        with ctx:
            with cprof.range("second"):
                pass
    first = tmp_path / "tmp" / "again.trace.json.gz"
    assert [e["name"] for e in ranges_of(load_trace(first))] == ["first"]
    # the second window went where it was asked, not where the first was rescued to
    assert ctx.trace_path == out / "again.trace.json.gz"
    assert [e["name"] for e in ranges_of(load_trace(ctx.trace_path))] == ["second"]
    with pytest.raises(cprof.WindowStateError, match="already written"):
        ctx.save(tmp_path / "x.json")


def test_failed_windows_held_for_save_are_bounded(tmp_path, monkeypatch):
    """A program that catches TraceWriteError from one new context after another held every
    failed window in memory until it ended (review7 F1); at most UNSAVED_MAX wait for save(),
    the oldest is written to the temporary directory with a warning, the newest still saves."""
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    held = cprof._lifecycle.UNSAVED_MAX
    ctxs = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(held + 2):
            out = tmp_path / f"out{i}"
            ctx = cprof.ProfilerContext(output_dir=out, profile_name=f"w{i}", verbose=False,
                                        activities=["CPU"], with_stack=False)
            with pytest.raises(cprof.TraceWriteError):
                with ctx:
                    with cprof.range(f"r{i}"):
                        pass
                    os.rmdir(out)
            ctxs.append(ctx)
    assert len(cprof._lifecycle._unsaved) == held
    assert all(any(c is o for o in cprof._lifecycle._unsaved) for c in ctxs[2:])
    said = [str(w.message) for w in caught if "later windows' writes failed" in str(w.message)]
    assert len(said) == 2
    for i in (0, 1):  # the two oldest: written elsewhere, named in the warnings
        path = tmp_path / "tmp" / f"w{i}.trace.json.gz"
        assert any(str(path) in m for m in said)
        assert [e["name"] for e in ranges_of(load_trace(path))] == [f"r{i}"]
    dest = ctxs[-1].save(tmp_path / "last.trace.json")  # the newest still waits for save()
    assert [e["name"] for e in ranges_of(load_trace(dest.path))] == [f"r{held + 1}"]
    assert len(cprof._lifecycle._unsaved) == held - 1


def test_unsaved_windows_are_all_written_under_warnings_as_errors(tmp_path):
    """-W error: the eviction's "written to ... instead" warning raised inside the write and
    replaced the newer window's TraceWriteError with a RuntimeWarning saying the written trace
    could not be written; at exit the first such warning ended the loop and the other unsaved
    windows were lost (review8 F1). Now they are said on stderr and every one is written."""
    import subprocess
    import sys
    from conftest import ROOT
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    n = cprof._lifecycle.UNSAVED_MAX + 1
    code = (f"import os, sys; sys.path.insert(0, {ROOT!r}); import cprof\n"
            f"for i in range({n}):\n"
            f"    out = os.path.join({str(tmp_path)!r}, f'out{{i}}')\n"
            "    ctx = cprof.ProfilerContext(output_dir=out, profile_name=f'w{i}', "
            "verbose=False, activities=['CPU'], with_stack=False)\n"
            "    try:\n"
            "        with ctx:\n"
            "            with cprof.range(f'r{i}'): pass\n"
            "            os.rmdir(out)\n"
            "    except cprof.TraceWriteError:\n"
            "        print('raised', i)\n")
    r = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                       text=True, env=dict(os.environ, TMPDIR=str(tmp)), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [w for i in range(n) for w in ("raised", str(i))], r.stdout
    for i in range(n):
        path = tmp / f"w{i}.trace.json.gz"
        assert [e["name"] for e in ranges_of(load_trace(path))] == [f"r{i}"]
        assert f"it was written to {path} instead" in r.stderr, r.stderr


def test_a_forked_child_entering_a_context_with_an_unsaved_window_leaves_it_to_the_parent(
        tmp_path):
    """The child (a DataLoader worker, multiprocessing's fork) that entered the context tried
    to rescue the parent's window, failed, and warned the trace was lost (review7 F2); the
    parent still holds it and writes it at its exit."""
    import subprocess
    import sys
    from conftest import ROOT
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir()
    code = (f"import os, sys, warnings; sys.path.insert(0, {ROOT!r}); import cprof\n"
            f"ctx = cprof.ProfilerContext(output_dir={str(out)!r}, profile_name='p', "
            "verbose=False, activities=['CPU'], with_stack=False)\n"
            "try:\n"
            "    with ctx:\n"
            "        with cprof.range('parent'): pass\n"
            f"        os.rmdir({str(out)!r})\n"
            "except cprof.TraceWriteError: pass\n"
            "ctx2 = cprof.ProfilerContext(output_dir=" + repr(str(tmp_path / 'gone')) + ", "
            "profile_name='q', verbose=False, activities=['CPU'], with_stack=False)\n"
            "try:\n"
            "    with ctx2:\n"
            "        with cprof.range('parent2'): pass\n"
            f"        os.rmdir({str(tmp_path / 'gone')!r})\n"
            "except cprof.TraceWriteError: pass\n"
            f"os.mkdir({str(out)!r})\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    with warnings.catch_warnings(record=True) as caught:\n"
            "        warnings.simplefilter('always')\n"
            "        with ctx:\n"
            "            with cprof.range('child'): pass\n"
            "    try:\n"
            "        ctx2.save('x.json')\n"
            "    except cprof.WindowStateError as e:\n"
            "        print('SAVE', e, flush=True)\n"
            "    print('CHILD', [str(w.message) for w in caught], ctx.trace_path, flush=True)\n"
            "    os._exit(0)\n"
            "os.waitpid(pid, 0)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, TMPDIR=str(tmp)), timeout=120)
    assert r.returncode == 0, r.stderr
    # save() in the child of a window it does not hold: a clear error, not an AttributeError
    (said,) = [ln for ln in r.stdout.splitlines() if ln.startswith("SAVE")]
    assert "call save() in that process" in said, said
    (child,) = [ln for ln in r.stdout.splitlines() if ln.startswith("CHILD")]
    assert child.endswith(str(out / "p.trace.json.gz")) and "CHILD []" in child, child
    assert [e["name"] for e in ranges_of(load_trace(out / "p.trace.json.gz"))] == ["child"]
    assert [e["name"] for e in ranges_of(load_trace(tmp / "p.trace.json.gz"))] == ["parent"]
    assert f"it was written to {tmp / 'p.trace.json.gz'}" in r.stderr, r.stderr


def test_save_into_a_directory_writes_there_under_the_traces_name(tmp_path):
    out = tmp_path / "out"
    ctx = cprof.ProfilerContext(output_dir=out, profile_name="lost", verbose=False,
                                with_stack=False, activities=["CPU"])
    with pytest.raises(cprof.TraceWriteError):
        with ctx:
            with cprof.range("precious"):
                pass
            os.rmdir(out)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ctx.save(elsewhere)  # used to write tmp_path / "elsewhere-1"
    assert os.listdir(elsewhere) == ["lost.trace.json.gz"]
    assert [e["name"] for e in ranges_of(load_trace(elsewhere / "lost.trace.json.gz"))] == [
        "precious"]
    assert not (tmp_path / "elsewhere-1").exists()


def test_save_after_a_written_trace_says_to_copy_the_file(outdir, tmp_path):
    """The data is released once written (a long window's ranges are not kept twice): a second
    save is refused with the path of the written trace, and that file stays whole."""
    ctx = cprof.ProfilerContext(output_dir=outdir, profile_name="once", verbose=False,
                                with_stack=False)
    with ctx:
        with cprof.range("r"):
            pass
    with pytest.raises(cprof.WindowStateError, match="copy that file"):
        ctx.save(tmp_path / "again.trace.json")
    assert not (tmp_path / "again.trace.json").exists()
    assert [e["name"] for e in ranges_of(load_trace(ctx.trace_path))] == ["r"]


def test_nested_context_is_a_clear_error(outdir):
    with cprof.ProfilerContext(output_dir=outdir, profile_name="outer", verbose=False,
                               with_stack=False) as outer:
        with pytest.raises(cprof.WindowStateError, match="already open"):
            with cprof.ProfilerContext(output_dir=outdir, profile_name="inner", verbose=False):
                pass
        with cprof.range("still fine"):
            pass
    assert [e["name"] for e in ranges_of(load_trace(outer.trace_path))] == ["still fine"]


def test_a_context_entered_inside_itself_says_so(outdir):
    """Audit 000 F6a: the error named cprof.profile's start(), which the user never called."""
    ctx = cprof.ProfilerContext(output_dir=outdir, profile_name="self", verbose=False,
                                with_stack=False, activities=["CPU"])
    with ctx:
        path = ctx.trace_path
        with pytest.raises(cprof.WindowStateError) as ei:
            with ctx:
                pass
        assert "ProfilerContext" in str(ei.value) and "already open" in str(ei.value)
        assert "start()" not in str(ei.value)
        assert ctx.trace_path == path  # the open window's path, not a new plan
        with cprof.range("still fine"):
            pass
    assert [e["name"] for e in ranges_of(load_trace(path))] == ["still fine"]


def test_profile_function_names_a_partial_or_callable_object_after_what_it_calls(outdir):
    """Audit 000 F6b: a functools.partial or a callable object was named "function"."""
    import functools

    def load(path, n=1):
        return n

    class Sampler:
        def __call__(self):
            return 2

    deco = cprof.profile_function(output_dir=outdir, verbose=False, activities=["CPU"])
    assert deco(functools.partial(functools.partial(load, "x"), n=3))() == 3
    assert deco(Sampler())() == 2
    assert sorted(p.name for p in outdir.iterdir()) == ["Sampler.trace.json.gz",
                                                        "load.trace.json.gz"]


def test_an_output_dir_that_is_a_file_is_called_a_file(tmp_path):
    """Audit 000 F6h: it said "cannot be created (File exists)"."""
    f = tmp_path / "quick.py"
    f.write_text("")
    with pytest.raises(cprof.TraceWriteError, match="is a file, not a directory") as ei:
        with cprof.ProfilerContext(output_dir=f, verbose=False, activities=["CPU"]):
            pass
    assert "File exists" not in str(ei.value)


def test_an_output_dir_through_a_dangling_link_names_the_link(tmp_path):
    """A symbolic link to nothing as output_dir (or above it) said "cannot be created (File
    exists)" (or "No such file or directory" for a path under it)."""
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "gone")
    for out in (link, link / "sub"):
        with pytest.raises(cprof.TraceWriteError, match="is a symbolic link to .*gone.*, which "
                                                        "does not exist; create that") as ei:
            with cprof.ProfilerContext(output_dir=out, verbose=False, activities=["CPU"]):
                pass
        assert str(link) in str(ei.value) and "File exists" not in str(ei.value)


def test_profile_function_keeps_metadata_and_writes(outdir):
    @cprof.profile_function(output_dir=outdir, verbose=False)
    def forward_pass(x, y=2):
        """Doc."""
        with cprof.range("inside"):
            return x * y

    assert forward_pass.__name__ == "forward_pass" and forward_pass.__doc__ == "Doc."
    import inspect
    assert list(inspect.signature(forward_pass).parameters) == ["x", "y"]
    assert forward_pass(3) == 6
    path = outdir / "forward_pass.trace.json.gz"
    names = [e["name"] for e in ranges_of(load_trace(path))]
    assert names == ["forward_pass", "inside"]


def test_profile_function_custom_name_and_disabled(outdir):
    @cprof.profile_function(profile_name="fp", output_dir=outdir, verbose=False)
    def f():
        return 1

    @cprof.profile_function(enabled=False, output_dir=outdir / "no")
    def g():
        return 2

    assert f() == 1 and g() == 2
    assert (outdir / "fp.trace.json.gz").exists()
    assert not (outdir / "no").exists()


def test_profile_function_bare_decorator_profiles_the_call(outdir, monkeypatch):
    monkeypatch.setenv("CPROF_PROFILER_DIR", str(outdir))

    @cprof.profile_function
    def add_one(x):
        with cprof.range("body"):
            return x + 1

    assert add_one(1) == 2  # not a decorator returned by mistake
    names = [e["name"] for e in ranges_of(load_trace(outdir / "add_one.trace.json.gz"))]
    assert names == ["add_one", "body"]


def test_profile_function_async_and_generator_cover_their_bodies(outdir):
    import asyncio

    @cprof.profile_function(output_dir=outdir, verbose=False, activities=["CPU"])
    async def fetch():
        with cprof.range("awaited"):
            await asyncio.sleep(0.02)
        return 7

    @cprof.profile_function(output_dir=outdir, verbose=False, activities=["CPU"])
    def items(n):
        for i in range(n):
            with cprof.range("item"):
                time.sleep(0.005)
            yield i
        return "done"

    assert asyncio.run(fetch()) == 7
    assert list(items(3)) == [0, 1, 2]
    rs = {e["name"]: e for e in ranges_of(load_trace(outdir / "fetch.trace.json.gz"))}
    assert rs["awaited"]["dur"] >= 15_000 and rs["fetch"]["dur"] >= rs["awaited"]["dur"]
    names = [e["name"] for e in ranges_of(load_trace(outdir / "items.trace.json.gz"))]
    assert names == ["items", "item", "item", "item"]
    # closed early: the window ends with the generator, the trace is written
    g = items(5)
    next(g)
    g.close()
    assert not cprof._C.active()
    assert (outdir / "items-1.trace.json.gz").exists()


def test_profile_function_and_context_reject_a_string_enabled(outdir):
    with pytest.raises(TypeError, match="bool"):
        cprof.ProfilerContext(enabled="yes", output_dir=outdir)
    with pytest.raises(TypeError, match="bool"):
        cprof.profile_function(enabled="no")
    with pytest.raises(TypeError, match="by keyword"):
        cprof.profile_function(outdir)  # the directory given where enabled goes


def test_profiled_function_calling_profiled_function_nests(outdir):
    @cprof.profile_function(output_dir=outdir, verbose=False)
    def inner():
        return 1

    @cprof.profile_function(output_dir=outdir, verbose=False)
    def outer():
        return inner() + inner()

    assert outer() == 2
    t = load_trace(outdir / "outer.trace.json.gz")
    names = [e["name"] for e in ranges_of(t)]
    assert names == ["outer", "inner", "inner"]
    assert not (outdir / "inner.trace.json.gz").exists()


def test_summary_after_exit(outdir):
    with cprof.ProfilerContext(output_dir=outdir, profile_name="s", verbose=False) as p:
        for _ in range(3):
            with cprof.range("parent"):
                with cprof.range("child"):
                    time.sleep(0.001)
    rows = {r["name"]: r for r in p.summary}
    assert rows["parent"]["count"] == 3 and rows["child"]["count"] == 3
    assert rows["parent"]["total_ns"] >= rows["child"]["total_ns"] >= 3_000_000
    assert rows["parent"]["self_ns"] == rows["parent"]["total_ns"] - rows["child"]["total_ns"]


def test_summary_merges_names_that_read_the_same_once_replaced(outdir):
    """Names that differ only in lone surrogates all read 'a\\ufffd\\ufffd\\ufffd' (as does
    that name given whole): the trace and key_averages() have one name, but the summary
    (and so cprof run --report) grouped by the raw name and listed one row per spelling."""
    with cprof.ProfilerContext(output_dir=outdir, profile_name="s", verbose=False,
                               activities=["CPU"], with_stack=False) as p:
        for name, ms in (("a\ud800", 1), ("a\udfff", 3), ("a\ufffd\ufffd\ufffd", 1), ("b", 2)):
            with cprof.range(name):
                time.sleep(ms / 1000)
    rows = [r for r in p.summary if r["category"] == "user_annotation"]
    assert sorted(r["name"] for r in rows) == ["a\ufffd\ufffd\ufffd", "b"]
    (a,) = [r for r in rows if r["name"] != "b"]
    durs = [e["dur"] * 1000 for e in ranges_of(load_trace(p.trace_path))
            if e["name"] == a["name"]]
    assert a["count"] == len(durs) == 3 and a["self_ns"] == a["total_ns"]
    assert a["total_ns"] == pytest.approx(sum(durs), abs=10)
    assert a["min_ns"] == pytest.approx(min(durs), abs=10)
    assert a["max_ns"] == pytest.approx(max(durs), abs=10) and a["max_ns"] >= 3_000_000
    totals = [r["total_ns"] for r in p.summary]
    assert totals == sorted(totals, reverse=True)  # still heaviest first

def test_non_utf8_argv_still_writes(tmp_path):
    """A program started with a non-UTF-8 argument has it in sys.argv as surrogate escapes;
    the trace's metadata must still be valid JSON (it was 'invalid JSON', no file)."""
    import subprocess
    import sys
    code = ("import cprof, gzip, json\n"
            "with cprof.ProfilerContext(output_dir='.', profile_name='a', activities=['CPU'],"
            " verbose=False) as p:\n"
            "    pass\n"
            "print(json.load(gzip.open(p.trace_path))['cprof']['argv'][1:])\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable.encode(), b"-c", code.encode(), b"\xff", b"ok"],
                       cwd=tmp_path, capture_output=True,
                       env=dict(os.environ, PYTHONPATH=root))
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert r.stdout.decode().strip() == "['\ufffd', 'ok']"


def test_output_dir_is_a_str_that_equals_its_path(tmp_path):
    p = cprof.ProfilerContext(output_dir=tmp_path / "o", profile_name="t", verbose=False,
                              activities=["CPU"])
    assert p.output_dir == str(tmp_path / "o") and p.output_dir == tmp_path / "o"
    assert tmp_path / "o" == p.output_dir and isinstance(p.output_dir, str)
    assert p.output_dir / "x" == tmp_path / "o" / "x"
    with p:
        pass
    assert p.output_dir.is_dir() and p.trace_path.parent == p.output_dir
    assert f"{p.output_dir}/{p.trace_path.name}" == str(p.trace_path)  # the seed's print


def test_bad_profile_names_fail_before_the_window(tmp_path):
    for name in ("a\0b", "x" * 240):
        with pytest.raises(ValueError, match="profile_name"):
            cprof.ProfilerContext(output_dir=tmp_path, profile_name=name)
    assert not cprof._C.active()


def test_mem_without_cuda_says_there_is_no_snapshot(outdir, capsys):
    with cprof.ProfilerContext(activities=["CPU", "MEM"], output_dir=outdir,
                               profile_name="m") as p:
        pass
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("cprof: memory:")]
    assert len(line) == 1 and "no memory snapshot" in line[0] and "peak CPU RSS" in line[0]
    assert p.memory_paths == [] and p.memory_summary["cuda"].startswith("not tracked")


def _fake_cuda_memory(monkeypatch):
    """torch.cuda's memory-history calls stubbed (no GPU here): each window's snapshot and
    summary say which window they came from. Returns the window counter."""
    torch = pytest.importorskip("torch")

    import cprof._profile
    calls = [0]

    def snapshot():
        calls[0] += 1
        return {"segments": [], "device_traces": [], "window": calls[0]}

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", snapshot)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 0)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: 0)
    monkeypatch.setattr(torch.cuda, "memory_summary", lambda *a, **k: f"window {calls[0]}")
    monkeypatch.setattr(cprof._profile, "gpu_unavailable_reason", lambda: "test: CPU only")
    return calls


def test_memory_snapshots_of_same_named_windows_are_never_overwritten(tmp_path, monkeypatch):
    """Several MEM windows with one name in one second (a profile_function in a loop, a reused
    context): each keeps its snapshot, named with its trace's -N (they used to share one
    {name}-rank0-memory-{ts}.pickle, the last window's)."""
    import pickle
    import re
    _fake_cuda_memory(monkeypatch)

    @cprof.profile_function(activities=["CPU", "MEM"], output_dir=tmp_path, verbose=False)
    def step():
        return 1

    for _ in range(3):
        step()
    ctx = cprof.ProfilerContext(activities=["CPU", "MEM"], output_dir=tmp_path,
                                profile_name="step", with_stack=False, verbose=False)
    traces, snaps = [], []
    for _ in range(2):  # a reused context, after the function's three windows
        with ctx:
            pass
        traces.append(ctx.trace_path.name)
        snaps.append(os.path.basename(ctx.memory_paths[-1]))
    assert traces == ["step-3.trace.json.gz", "step-4.trace.json.gz"]
    assert len(ctx.memory_paths) == 2
    pickles = sorted(f for f in os.listdir(tmp_path) if f.endswith(".pickle"))
    assert len(pickles) == 5
    seen = {}
    for f in pickles:
        m = re.fullmatch(r"step-rank0-memory-\d+(?:-(\d+))?\.pickle", f)
        assert m, f
        with open(tmp_path / f, "rb") as fh:
            seen[int(m.group(1) or 0)] = pickle.load(fh)["window"]
        txt = (tmp_path / f).with_suffix(".txt").read_text()
        assert txt == f"window {seen[int(m.group(1) or 0)]}"
    # the snapshot of the trace step-N is the one of the same window, named with -N
    assert seen == {0: 1, 1: 2, 2: 3, 3: 4, 4: 5}
    assert [re.search(r"-(\d+)\.pickle$", s).group(1) for s in snaps] == ["3", "4"]


def test_memory_snapshot_takes_next_free_name(tmp_path, monkeypatch):
    """A snapshot name already taken (a file left by another run) is never replaced: the next
    -N is used, and the first window keeps the seed's {name}-rank0-memory-{ts}.pickle."""
    _fake_cuda_memory(monkeypatch)
    monkeypatch.setattr(time, "time", lambda: 1700000000.5)
    taken = tmp_path / "m-rank0-memory-1700000000.txt"
    taken.write_text("someone else's")
    with cprof.ProfilerContext(activities=["CPU", "MEM"], output_dir=tmp_path,
                               profile_name="m", with_stack=False, verbose=False) as p:
        pass
    assert p.trace_path.name == "m.trace.json.gz"
    assert [os.path.basename(x) for x in p.memory_paths] == ["m-rank0-memory-1700000000-1.pickle"]
    assert taken.read_text() == "someone else's"
    assert not (tmp_path / "m-rank0-memory-1700000000.pickle").exists()
    with cprof.ProfilerContext(activities=["CPU", "MEM"], output_dir=tmp_path / "o",
                               profile_name="m", with_stack=False, verbose=False) as p:
        pass
    assert [os.path.basename(x) for x in p.memory_paths] == ["m-rank0-memory-1700000000.pickle"]


def test_profile_function_concurrent_calls_cut_by_the_first_are_warned(outdir):
    """Concurrent calls of one profile_function (asyncio.gather, threads) are ranges in the
    first call's window, which closes when that call returns: the later calls' ranges are cut
    there. That used to be silent; it warns now (and their ranges say 'cprof truncated').
    Nested and recursive calls, which end inside the window, do not warn."""
    import asyncio
    import threading

    @cprof.profile_function(activities=["CPU"], output_dir=outdir, with_stack=False,
                           verbose=False)
    async def request(delay):
        await asyncio.sleep(delay)

    async def main():
        await asyncio.gather(request(0.02), request(0.2))

    with pytest.warns(RuntimeWarning, match="'request'.*still running"):
        asyncio.run(main())
    got = sorted((e for e in ranges_of(load_trace(outdir / "request.trace.json.gz"))
                  if e["name"] == "request"), key=lambda e: e["ts"])
    assert len(got) == 2
    assert "cprof truncated" not in got[0].get("args", {})
    assert got[1]["args"]["cprof truncated"]

    started, release = threading.Event(), threading.Event()

    @cprof.profile_function(activities=["CPU"], output_dir=outdir, with_stack=False,
                           verbose=False)
    def handle(first):
        if first:
            started.set()
            release.wait(5)
        else:
            release.set()
            time.sleep(0.2)

    with pytest.warns(RuntimeWarning, match="'handle'.*still running"):
        t = threading.Thread(target=handle, args=(True,))
        t.start()
        started.wait(5)
        handle(False)
        t.join()

    @cprof.profile_function(activities=["CPU"], output_dir=outdir, with_stack=False,
                           verbose=False)
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fact(5) == 120
        assert fact(3) == 6


def test_profile_function_suspended_calls_keep_their_own_ranges(outdir):
    """Coroutines and generators run interleaved with other code: each call's range is its own
    (closed by token), whoever runs in between, and a generator may finish on another thread."""
    import asyncio
    import threading

    @cprof.profile_function(output_dir=outdir, activities=["CPU"], verbose=False)
    async def fast():
        await asyncio.sleep(0.02)

    @cprof.profile_function(output_dir=outdir, activities=["CPU"], verbose=False)
    async def slow():
        await asyncio.sleep(0.1)

    async def both():
        await asyncio.gather(fast(), slow())

    with cprof.ProfilerContext(output_dir=outdir, profile_name="gather", verbose=False) as p:
        asyncio.run(both())
    rs = {e["name"]: e["dur"] for e in ranges_of(load_trace(p.trace_path))}
    assert 15_000 <= rs["fast"] < 60_000 and rs["slow"] >= 90_000, rs

    @cprof.profile_function(output_dir=outdir, activities=["CPU"], verbose=False)
    def items():
        for i in range(3):
            time.sleep(0.01)
            yield i

    with cprof.ProfilerContext(output_dir=outdir, profile_name="gen", verbose=False) as p:
        with cprof.range("A"):
            g = items()
            next(g)
        rest = list(g)
    assert rest == [1, 2]
    rs = {e["name"]: e["dur"] for e in ranges_of(load_trace(p.trace_path))}
    assert rs["A"] < 15_000 and rs["items"] >= 25_000, rs

    g = items()  # its own window, finished on another thread
    next(g)
    out = {}
    t = threading.Thread(target=lambda: out.update(rest=list(g)))
    t.start()
    t.join()
    assert out["rest"] == [1, 2] and not cprof._C.active()
    with cprof.ProfilerContext(output_dir=outdir, profile_name="after", verbose=False):
        pass  # the window was closed: a new one opens


def test_profile_function_async_generator_keeps_asend_athrow_aclose(outdir):
    import asyncio
    import inspect

    log = []

    async def agen():
        try:
            while True:
                try:
                    got = yield len(log)
                    log.append(f"got {got!r}")
                except ValueError:
                    log.append("caught ValueError")
        finally:
            log.append("cleanup")

    wrapped = cprof.profile_function(output_dir=outdir, activities=["CPU"], verbose=False)(agen)
    assert inspect.isasyncgenfunction(wrapped)

    async def drive(gen):
        await gen.asend(None)
        await gen.asend("hello")
        await gen.athrow(ValueError("x"))
        await gen.aclose()

    asyncio.run(drive(wrapped()))
    assert log == ["got 'hello'", "caught ValueError", "cleanup"]
    assert not cprof._C.active()
    assert (outdir / "agen.trace.json.gz").exists()


def test_bool_options_refuse_strings(tmp_path):
    """gzip='false' used to write a .gz, with_stack='no' to trace Python: every bool option
    takes a bool (an int or numpy bool too) and says so for anything else."""
    for arg in ("with_stack", "record_shapes", "with_modules", "record_ops", "gzip", "verbose",
                "strict"):
        with pytest.raises(TypeError, match=f"{arg} takes a bool, got 'false'"):
            cprof.ProfilerContext(output_dir=tmp_path, activities=["CPU"], **{arg: "false"})
    for arg in ("with_stack", "record_shapes", "profile_memory", "with_flops", "acc_events"):
        with pytest.raises(TypeError, match=f"cprof.profile: {arg} takes a bool"):
            cprof.profile(activities=["CPU"], **{arg: "no"})
    c = cprof.ProfilerContext(output_dir=tmp_path, activities=["CPU"], gzip=0, with_stack=1)
    assert c.gzip is False and c.with_stack is True


def test_output_dir_as_bytes_and_bad_types(tmp_path):
    d = tmp_path / "bytes_dir"
    with cprof.ProfilerContext(output_dir=os.fsencode(str(d)), profile_name="b",
                               activities=["CPU"], verbose=False) as p:
        pass
    assert p.trace_path == d / "b.trace.json.gz" and p.trace_path.exists()
    with pytest.raises(TypeError, match="output_dir must be a path"):
        cprof.ProfilerContext(output_dir=42, activities=["CPU"])


def test_profile_names_that_are_not_file_names(tmp_path):
    for bad in (".", "..", "a\nb", "tab\there", "del\x7f", "a/b", ""):
        with pytest.raises(ValueError, match="profile_name must be a file name"):
            cprof.ProfilerContext(output_dir=tmp_path, profile_name=bad, activities=["CPU"])
    with pytest.raises(ValueError, match="cannot be a file name"):
        cprof.ProfilerContext(output_dir=tmp_path, profile_name="x\ud800", activities=["CPU"])


def test_buffer_size_below_one_chunk_or_not_a_number(tmp_path):
    with pytest.raises(ValueError, match=r"buffer_size_mb=0.05 is less than one buffer chunk"):
        cprof.ProfilerContext(output_dir=tmp_path, activities=["CPU"], buffer_size_mb=0.05)
    for bad in ("10", True, b"1"):
        with pytest.raises(ValueError, match="buffer_size_mb must be a number of MiB"):
            cprof.ProfilerContext(output_dir=tmp_path, activities=["CPU"], buffer_size_mb=bad)
    with cprof.ProfilerContext(output_dir=tmp_path, activities=["CPU"], buffer_size_mb=0.07,
                               verbose=False) as p:
        pass
    assert p.trace_path.exists()
    # exactly 64 KiB is just short of a chunk (its header): the message said "less than one
    # buffer chunk (0.0625 MiB)", the very number given; it gives the chunk exactly now, and
    # the least size it names is accepted
    import re
    with pytest.raises(ValueError) as info:
        cprof.ProfilerContext(output_dir=tmp_path, activities=["CPU"], buffer_size_mb=0.0625)
    msg = str(info.value)
    chunk = cprof._C.memory()["chunk_bytes"]
    assert f"{chunk:,} bytes = {chunk / (1 << 20):.7f} MiB" in msg and "(0.0625 MiB)" not in msg
    least = float(re.search(r"pass at least ([0-9.]+)", msg).group(1))
    assert least * (1 << 20) >= chunk and least < 0.0626
    cprof.ProfilerContext(output_dir=tmp_path, activities=["CPU"], buffer_size_mb=least)


def test_empty_ranks_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"ranks=\[\] would profile no rank"):
        cprof.ProfilerContext(output_dir=tmp_path, activities=["CPU"], ranks=[])


def test_profile_function_checks_its_arguments_when_applied(tmp_path):
    """A typo or a bad value fails where the decorator is applied, not at each call after the
    program did its work."""
    with pytest.raises(TypeError, match="activites"):
        cprof.profile_function(activites=["CPU"], output_dir=tmp_path)(lambda: None)
    for kw in ({"activities": ["TPU"]}, {"profile_name": "a/b"}, {"buffer_size_mb": -1}):
        with pytest.raises(ValueError):
            cprof.profile_function(output_dir=tmp_path, **kw)(lambda: None)
    calls = []
    f = cprof.profile_function(enabled=False, activites=["CPU"])(lambda: calls.append(1))
    f()  # disabled: nothing checked, nothing profiled
    assert calls == [1]


def test_sys_exit_0_in_a_window_is_a_normal_end(tmp_path):
    for code, partial in ((0, False), (None, False), (3, True)):
        with pytest.raises(SystemExit):
            with cprof.ProfilerContext(output_dir=tmp_path, profile_name=f"e{code}",
                                       activities=["CPU"], verbose=False) as p:
                raise SystemExit(code)
        meta = load_trace(p.trace_path)["cprof"]
        assert bool(meta.get("partial")) is partial, (code, meta)


def test_unparsable_rank_variables_warn(tmp_path, monkeypatch):
    from cprof import _dist
    monkeypatch.setattr(_dist, "_warned_env", set())
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "one")
    with pytest.warns(RuntimeWarning, match=r"\$RANK='one' is not a whole number"):
        with cprof.ProfilerContext(output_dir=tmp_path, profile_name="r", activities=["CPU"],
                                   verbose=False):
            pass


@pytest.mark.parametrize("var, value", [("RANK", "-1"), ("LOCAL_RANK", "-1"),
                                        ("WORLD_SIZE", "0")])
def test_out_of_range_rank_variables_warn_like_unparsable_ones(tmp_path, monkeypatch, var,
                                                               value):
    """Audit 000 F6: RANK=-1 was ignored silently while RANK=abc warned."""
    from cprof import _dist
    monkeypatch.setattr(_dist, "_warned_env", set())
    for v in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv(var, value)
    with pytest.warns(RuntimeWarning, match=rf"\${var}='{value}' is below [01]; it is ignored"
                      ) as caught:
        assert _dist.rank_info()[:2] == (0, 1)
    # at the user's line, as cprof's other warnings (it pointed into cprof/_dist.py)
    assert caught[0].filename == __file__


@pytest.mark.parametrize("var", ["RANK", "WORLD_SIZE"])
def test_rank_variables_past_a_c_int_are_ignored_with_a_warning(tmp_path, monkeypatch, var):
    """RANK=2147483648 passed, and the window's write raised a raw OverflowError at its end
    (save() too): the trace was lost (badinput audit F2)."""
    from cprof import _dist
    monkeypatch.setattr(_dist, "_warned_env", set())
    monkeypatch.setenv(var, "2147483648")
    with pytest.warns(RuntimeWarning, match=rf"\${var}='2147483648' is not below 2147483648"):
        with cprof.ProfilerContext(output_dir=tmp_path, profile_name="r", verbose=False,
                                   with_stack=False, activities=["CPU"]) as ctx:
            pass
    assert ctx.trace_path.exists()


def test_a_failed_write_is_reported_once_not_retried_as_an_interrupt(tmp_path):
    out = tmp_path / "out"
    ctx = cprof.ProfilerContext(output_dir=out, profile_name="w", verbose=False,
                                with_stack=False, activities=["CPU"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(cprof.TraceWriteError):
            with ctx:
                os.rmdir(out)
    assert not [w for w in caught if "interrupted" in str(w.message)]
    ctx.save(tmp_path / "w.trace.json")  # the data is still there


def test_an_interrupt_as_the_write_returns_leaves_one_trace(tmp_path, monkeypatch):
    """Ctrl-C raised just as the C write returns (the file is complete and in place): the
    salvage takes that write's result, it does not write the trace a second time (-1)."""
    from cprof import _window
    real = _window.Window.write

    def write_then_interrupt(self, *a, **k):
        real(self, *a, **k)
        raise KeyboardInterrupt

    monkeypatch.setattr(_window.Window, "write", write_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        with cprof.ProfilerContext(output_dir=tmp_path, profile_name="w", activities=["CPU"],
                                   verbose=False) as c:
            with cprof.range("r"):
                pass
    assert os.listdir(tmp_path) == ["w.trace.json.gz"]
    assert c.trace_written and c.trace_path == tmp_path / "w.trace.json.gz"
    assert "r" in [e["name"] for e in ranges_of(load_trace(c.trace_path))]


def test_a_closed_stdout_does_not_fail_the_window(tmp_path):
    """`prog | head` after head exited, or a program that closed sys.stdout: the one-line
    notice is skipped, the trace written, the code after the block runs."""
    import subprocess
    import sys
    code = ("import sys, cprof\n"
            f"with cprof.ProfilerContext(output_dir={str(tmp_path)!r}, profile_name='c',\n"
            "                           activities=['CPU']) as c:\n"
            "    sys.stdout.close()\n"
            "sys.stderr.write('after ' + str(c.trace_path.exists()))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=os.path.dirname(
                           os.path.dirname(cprof.__file__))))
    assert r.returncode == 0, r.stderr
    assert r.stderr.endswith("after True")


def test_a_directory_or_name_that_is_not_utf8_is_written(tmp_path):
    """os.fsdecode's names (bytes that are not UTF-8) are file names like any other: the trace
    goes there (it failed with a UnicodeEncodeError after the window)."""
    d = os.path.join(str(tmp_path), os.fsdecode(b"caf\xe9"))
    with cprof.ProfilerContext(output_dir=d, profile_name=os.fsdecode(b"n\xff"),
                               activities=["CPU"], verbose=False) as c:
        with cprof.range("r"):
            pass
    assert os.listdir(os.fsencode(d)) == [b"n\xff.trace.json.gz"]
    assert str(c.trace_path) == os.path.join(d, os.fsdecode(b"n\xff") + ".trace.json.gz")
    assert "r" in [e["name"] for e in ranges_of(load_trace(c.trace_path))]


def test_mem_without_cuda_warns_once_that_no_snapshot_is_written(tmp_path):
    """verbose=False: the missing snapshot was said only in the trace's metadata."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available: the snapshot is written")
    ctx = cprof.ProfilerContext(activities=["CPU", "MEM"], output_dir=tmp_path,
                                profile_name="m", verbose=False, with_stack=False)
    with pytest.warns(RuntimeWarning, match="torch has no CUDA here: none will be written") as got:
        with ctx:
            torch.ones(4)
    assert len([w for w in got if "CUDA memory snapshot" in str(w.message)]) == 1
    assert got[0].filename == __file__  # attributed to the user's with line
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same context again: said once
        with ctx:
            torch.ones(4)
    assert not list(tmp_path.glob("*.pickle"))
