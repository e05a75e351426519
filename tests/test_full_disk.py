"""Writes on a full disk: the CUDA memory snapshot and export_stacks leave no temporary or
cut file, raise (or warn) naming the path, and keep what was not written for a retry.
A full disk is simulated with RLIMIT_FSIZE (files past the limit fail with EFBIG, as a full
disk fails with ENOSPC); torch's CUDA memory calls are stubbed (no GPU needed)."""
import contextlib
import os
import pickle
import resource
import signal
import warnings

import pytest

import cprof


@contextlib.contextmanager
def file_size_limit(nbytes):
    """Files written in the block cannot grow past nbytes (EFBIG instead of SIGXFSZ)."""
    old_sig = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, old_sig)


BIG = os.urandom(256 << 10)  # a snapshot bigger than the limit the tests set (64 KiB)


@pytest.fixture
def fake_cuda(monkeypatch):
    torch = pytest.importorskip("torch")
    import cprof._profile
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot",
                        lambda: {"segments": [], "device_traces": [], "blob": BIG})
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: 0)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: 0)
    monkeypatch.setattr(torch.cuda, "memory_summary", lambda *a, **k: "summary")
    monkeypatch.setattr(cprof._profile, "gpu_unavailable_reason", lambda: "test: CPU only")


def _files(d):
    return sorted(os.listdir(d))


def _snapshot_window(out, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with file_size_limit(64 << 10):
            ctx = cprof.ProfilerContext(output_dir=out, profile_name="snap",
                                        activities=["CPU", "MEM"], with_stack=False,
                                        verbose=False, **kw)
            with ctx:
                with cprof.range("r"):
                    pass
    return ctx, [str(w.message) for w in caught if "memory snapshot" in str(w.message)]


def test_snapshot_on_full_disk_leaves_no_temp_file_and_is_kept_for_save(tmp_path, fake_cuda):
    """The hidden .tmp used to stay (on a full disk it held the rest of the disk) and the
    snapshot was lost; now nothing is left, the warning names the file and the way to save
    it, and save_memory_snapshot() writes it once there is room."""
    ctx, said = _snapshot_window(tmp_path)
    assert _files(tmp_path) == ["snap.trace.json.gz"]
    assert ctx.memory_paths == []
    (msg,) = said
    assert str(tmp_path) in msg and "snap-rank0-memory-" in msg
    assert "ctx.save_memory_snapshot(path)" in msg
    path = ctx.save_memory_snapshot(tmp_path)  # a directory: its usual name in it
    assert ctx.memory_paths == [path]
    with open(path, "rb") as f:
        assert pickle.load(f)["blob"] == BIG
    assert os.path.exists(path[: -len(".pickle")] + ".txt")
    with pytest.raises(FileExistsError, match="replace=True"):
        ctx.save_memory_snapshot(path)
    assert ctx.save_memory_snapshot(path, replace=True) == path


def test_an_unsaved_snapshot_goes_to_tmpdir_when_the_context_is_entered_again(
        tmp_path, fake_cuda, monkeypatch):
    """The next window released the snapshot no save_memory_snapshot() came for, silently."""
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    ctx, said = _snapshot_window(tmp_path / "out")
    assert ctx.memory_paths == [] and "save_memory_snapshot" in said[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ctx:
            pass
    (first,) = [p for p in ctx.memory_paths if p.startswith(str(tmp_path / "tmp"))]
    with open(first, "rb") as f:
        assert pickle.load(f)["blob"] == BIG
    assert any(f"written to {first} instead" in str(w.message) for w in caught)


def test_snapshot_where_no_one_can_save_it_goes_to_tmpdir(tmp_path, fake_cuda, monkeypatch):
    """cprof run (and a profile_function call) cannot call save_memory_snapshot(): as the
    trace, the snapshot goes to the temporary directory and the warning says where."""
    import tempfile

    import cprof._glue as glue
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    real = glue.atomic_write

    def full_out(path, *a, **k):  # only the output directory is full
        if os.path.dirname(path) == str(out):
            with file_size_limit(1024):
                return real(path, *a, **k)
        return real(path, *a, **k)

    monkeypatch.setattr(glue, "atomic_write", full_out)
    ctx = cprof.ProfilerContext(output_dir=out, profile_name="snap", activities=["CPU", "MEM"],
                                with_stack=False, verbose=False)
    ctx._memory_unreachable = True  # as cprof run sets it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ctx:
            pass
    said = [str(w.message) for w in caught if "memory snapshot" in str(w.message)]
    assert _files(out) == ["snap.trace.json.gz"]
    (path,) = ctx.memory_paths
    assert os.path.dirname(path) == str(tmp)
    (msg,) = said
    assert f"written to {path} instead" in msg and str(out) in msg
    assert sorted(f.rsplit(".", 1)[1] for f in _files(tmp)) == ["pickle", "txt"]


def test_snapshot_lost_everywhere_says_so_and_leaves_nothing(tmp_path, fake_cuda, monkeypatch):
    import tempfile
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.chdir(tmp_path)
    ctx = cprof.ProfilerContext(output_dir=tmp_path / "out", profile_name="snap",
                                activities=["CPU", "MEM"], with_stack=False, verbose=False)
    ctx._memory_unreachable = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with file_size_limit(64 << 10):
            with ctx:
                pass
    (msg,) = [str(w.message) for w in caught if "memory snapshot" in str(w.message)]
    assert "the memory snapshot is lost" in msg and str(tmp) in msg
    assert _files(tmp) == [] and ctx.memory_paths == []
    assert not [f for f in _files(tmp_path) if f.endswith(".tmp") or f.endswith(".pickle")]


def test_export_memory_snapshot_on_full_disk_names_the_path(tmp_path, fake_cuda):
    """It raised a bare OSError without the path and left its .tmp; now TraceWriteError (an
    OSError, as the trace's) names the file, nothing is left, and a retry works."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with cprof.profile(activities=[cprof.ProfilerActivity.CPU,
                                       cprof.ProfilerActivity.CUDA], profile_memory=True) as p:
            pass
    target = str(tmp_path / "exported.pickle")
    with file_size_limit(64 << 10):
        with pytest.raises(cprof.TraceWriteError) as info:
            p.export_memory_snapshot(target)
    assert info.value.errno is not None
    assert target in str(info.value) and "export_memory_snapshot(path)" in str(info.value)
    assert _files(tmp_path) == []
    assert p.export_memory_snapshot(target) == target
    assert _files(tmp_path) == ["exported.pickle", "exported.txt"]


def _deep(n):
    if n == 0:
        with cprof.range("leaf"):
            sum(range(100))
        return
    _deep(n - 1)


def test_export_stacks_on_full_disk_leaves_no_cut_file(tmp_path):
    """export_stacks wrote in place: a full disk left a file cut mid-frame under the final
    name (flamegraph.pl reads the cut line as a frame). Now a temporary file is renamed
    when whole; on failure nothing is left and TraceWriteError names the file."""
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], with_stack=True) as p:
        for i in range(400):
            _deep(i % 40)
    whole = tmp_path / "whole.txt"
    p.export_stacks(str(whole))
    assert whole.stat().st_size > (16 << 10)
    target = str(tmp_path / "stacks.txt")
    with file_size_limit(8 << 10):
        with pytest.raises(cprof.TraceWriteError) as info:
            p.export_stacks(target)
    assert target in str(info.value) and "export_stacks(path)" in str(info.value)
    assert "again with a path on a disk with room" in str(info.value)
    assert _files(tmp_path) == ["whole.txt"]
    assert p.export_stacks(target) == target  # the window's data is kept for a retry
    assert (tmp_path / "stacks.txt").read_bytes() == whole.read_bytes()


def test_export_stacks_to_a_directory_says_so_not_a_full_disk(tmp_path):
    """The advice was "again with a path on a disk with room" whatever failed."""
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], with_stack=True) as p:
        _deep(3)
    with pytest.raises(cprof.TraceWriteError, match="Is a directory; the window's data is "
                                                    "kept: call export_stacks.path. again with "
                                                    "a file's path") as info:
        p.export_stacks(str(tmp_path))
    assert "disk with room" not in str(info.value)

def test_export_stacks_to_a_full_stream_names_it(tmp_path):
    """A device (/dev/full) is written into, not replaced: its failure is a TraceWriteError
    naming it too."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], with_stack=True) as p:
        _deep(3)
    with pytest.raises(cprof.TraceWriteError, match="/dev/full"):
        p.export_stacks("/dev/full")


def test_a_failed_write_under_the_users_exception_gives_its_advice_once(tmp_path):
    """The warning read "...; the trace is kept in memory: call save(path) to write it
    elsewhere); call save(path) to write it elsewhere"."""
    gone = tmp_path / "gone"
    gone.mkdir()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(KeyError):
            with cprof.ProfilerContext(output_dir=gone, profile_name="x", activities=["CPU"],
                                       with_stack=False, verbose=False) as ctx:
                gone.rmdir()
                raise KeyError("user")
    (msg,) = [str(w.message) for w in caught if "save(path)" in str(w.message)]
    assert msg.count("save(path)") == 1 and msg.count("could not") == 1, msg
    assert str(gone / "x.trace.json.gz") in msg
    assert ctx.save(tmp_path / "again.trace.json").path.endswith("again.trace.json")


def test_on_trace_ready_that_cannot_write_gives_its_advice_once(tmp_path):
    """The on_trace_ready variant ended "...call export_chrome_trace(path) to write it
    elsewhere; the trace is kept for export_chrome_trace"."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with file_size_limit(64), pytest.raises(cprof.TraceWriteError) as info:
            with cprof.profile(activities=[cprof.ProfilerActivity.CPU],
                               on_trace_ready=lambda p: p.export_chrome_trace(
                                   str(tmp_path / "full.json"))) as p:
                pass
    (msg,) = [str(w.message) for w in caught if "on_trace_ready raised" in str(w.message)]
    assert msg.count("export_chrome_trace") == 1 and "kept in memory" in msg, msg
    assert not getattr(info.value, "__notes__", None)  # nor a third time in a note
    assert p.export_chrome_trace(str(tmp_path / "t.json"))


def test_on_trace_ready_error_carries_the_note_on_every_python(tmp_path):
    """Without torch, so it runs on Python 3.10 too: the advice goes into the error's __notes__
    through add_note (3.11+) or, where there is none (3.10), the same list set directly (3.10's
    tracebacks do not print it; the warning says it anyway). An exception that takes no
    attributes is left as it is."""
    def handler(p):
        raise RuntimeError("disk on fire")

    with pytest.warns(RuntimeWarning, match="on_trace_ready raised"):
        with pytest.raises(RuntimeError, match="disk on fire") as info:
            with cprof.profile(activities=[cprof.ProfilerActivity.CPU], on_trace_ready=handler):
                pass
    (note,) = info.value.__notes__
    assert "export_chrome_trace" in note

    from cprof._profile import _add_note
    err = ValueError("x")
    _add_note(err, "first")
    _add_note(err, "second")
    assert err.__notes__ == ["first", "second"]

    class NoAttributes(Exception):
        def __setattr__(self, name, value):
            raise AttributeError(name)

        def __getattribute__(self, name):
            if name == "add_note":  # as on 3.10
                raise AttributeError(name)
            return super().__getattribute__(name)

    _add_note(NoAttributes(), "dropped")


def test_a_file_at_the_temporary_name_is_never_written_through(tmp_path):
    """The temporary file had a fixed name (.{name}.{pid}.tmp) opened with "wb": a symlink
    found there (planted in a shared output directory) was followed, so the export truncated
    and overwrote the file it pointed to and then renamed the link over the target; two
    threads writing one path shared the file. It is now created exclusively (O_EXCL, the
    next free name when one is taken), as the C trace writer's, and a file found there is
    left alone."""
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], with_stack=True) as p:
        _deep(3)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    planted = tmp_path / f".stacks.txt.{os.getpid()}.tmp"
    os.symlink(victim, planted)
    target = tmp_path / "stacks.txt"
    assert p.export_stacks(str(target)) == str(target)
    assert victim.read_text() == "keep me"
    assert not target.is_symlink() and "leaf" in target.read_text()
    assert planted.is_symlink()  # not ours: not removed either
    assert sorted(_files(tmp_path)) == sorted([planted.name, "stacks.txt", "victim.txt"])
