"""cprof.profile: the torch.profiler drop-in (schedules, steps, handlers, results, bad input)."""
import itertools
import json
import os
import time
import pickle
import re
import socket
import warnings

import pytest

import cprof
from cprof import _C
from tests.conftest import load_trace, ranges_of

torch = pytest.importorskip("torch")
tprof = torch.profiler

CPU = [cprof.ProfilerActivity.CPU]


def steps_of(events):
    return sorted(int(e.step_name.split("#")[1]) for e in events if e.step_name)


# ---- schedule semantics ----

GRID = [dict(wait=w, warmup=u, active=a, repeat=r, skip_first=s)
        for w, u, a, r, s in itertools.product((0, 1, 3), (0, 1, 2), (1, 3), (0, 1, 2), (0, 2))]


@pytest.mark.parametrize("params", GRID, ids=lambda p: "-".join(f"{v}" for v in p.values()))
def test_schedule_actions_match_torch(params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about warmup=0
        ours, theirs = cprof.schedule(**params), tprof.schedule(**params)
    for step in range(60):
        assert ours(step).name == theirs(step).name, (params, step)


def test_skip_first_wait_matches_torch():
    p = dict(wait=4, warmup=1, active=2, repeat=2, skip_first=3, skip_first_wait=1)
    ours, theirs = cprof.schedule(**p), tprof.schedule(**p)
    assert [ours(i).name for i in range(40)] == [theirs(i).name for i in range(40)]


@pytest.mark.parametrize("bad", [dict(wait=-1, warmup=0, active=1), dict(wait=0, warmup=-2, active=1),
                                 dict(wait=0, warmup=0, active=0), dict(wait=1, warmup=1, active=-3),
                                 dict(wait=0, warmup=0, active=1, repeat=-1),
                                 dict(wait=0, warmup=0, active=1, skip_first=-1)])
def test_invalid_schedules_raise_clear_errors(bad):
    with pytest.raises(ValueError, match="cprof.schedule") as ei:
        cprof.schedule(**bad)
    assert isinstance(ei.value, AssertionError)  # what torch raises, for code written for it


def test_schedule_types_are_checked():
    with pytest.raises(TypeError, match="whole number"):
        cprof.schedule(wait=1.5, warmup=1, active=1)
    # positional, as issue 5 writes it (torch's is keyword-only: a superset)
    assert cprof.schedule(1, 2, 3, 4, 5).params == cprof.schedule(
        wait=1, warmup=2, active=3, repeat=4, skip_first=5).params
    with pytest.raises(TypeError):
        cprof.schedule(1, 1, 1, 0, 0, 0)  # skip_first_wait stays keyword-only
    # whole floats are steps, as torch takes them
    assert cprof.schedule(wait=1.0, warmup=1, active=2.0).params["active"] == 2
    with pytest.warns(UserWarning, match="warmup"):  # torch's warning, as torch gives it
        cprof.schedule(wait=0, warmup=0, active=1)


def test_actions_and_activities_equal_torchs():
    tp = pytest.importorskip("torch.profiler")
    for kw in (dict(wait=1, warmup=1, active=2, repeat=2, skip_first=1),
               dict(wait=0, warmup=2, active=1), dict(wait=2, warmup=1, active=3, repeat=1)):
        ours, theirs = cprof.schedule(**kw), tp.schedule(**kw)
        assert [ours(i) for i in range(20)] == [theirs(i) for i in range(20)]
        assert all(theirs(i) == ours(i) for i in range(20))
    assert cprof.ProfilerAction.RECORD != tp.ProfilerAction.WARMUP
    assert cprof.ProfilerActivity.CPU == tp.ProfilerActivity.CPU
    assert cprof.ProfilerActivity.CUDA == tp.ProfilerActivity.CUDA
    assert cprof.ProfilerActivity.CPU != tp.ProfilerActivity.CUDA
    assert len({cprof.ProfilerAction.NONE, cprof.ProfilerAction.NONE}) == 1
    with pytest.warns(RuntimeWarning, match="XPU"):
        p = cprof.profile(activities=[tp.ProfilerActivity.CPU, tp.ProfilerActivity.XPU])
    assert p.activities == ["CPU"]


def test_table_and_events_speak_torchs_api():
    torch = pytest.importorskip("torch")
    with cprof.profile(activities=["CPU"], with_modules=True, record_ops=False) as p:
        with cprof.record_function("blk"):
            torch.nn.Linear(4, 4)(torch.ones(2, 4))
    ka = p.key_averages()
    t = ka.table(sort_by="self_cpu_memory_usage", row_limit=5, time_unit="ms",
                 max_src_column_width=10, max_shapes_column_width=10)
    assert "blk" in t and "CPU Mem" not in t  # no memory columns without profile_memory
    total = ka.total_average()
    assert total.key == "Total" and total.count == 2
    assert ka.self_cpu_time_total == pytest.approx(sum(r.self_cpu_time_total for r in ka))
    ev = {e.name: e for e in p.events()}
    blk, lin = ev["blk"], ev["Linear"]
    assert lin.cpu_parent is blk and blk.cpu_children == [lin] and blk.cpu_parent is None
    assert blk.time_range.elapsed_us() == pytest.approx(blk.cpu_time_total)
    assert blk.count == 1 and blk.cpu_time == blk.cpu_time_total and blk.cuda_time_total == 0
    assert sorted(e.id for e in p.events()) == list(range(len(p.events())))


def test_min_steps_documents_the_right_formula():
    # seed 002's defaults: wait=3, warmup=1, active=3, repeat=1 -> 7 steps (not 11): wait is
    # part of every cycle and repeat counts cycles
    assert cprof.min_steps(3, 1, 3, 1) == 7
    sched = cprof.schedule(wait=3, warmup=1, active=3, repeat=1)
    assert [sched(i).name for i in range(7)][-1] == "RECORD_AND_SAVE"
    assert all(sched(i).name == "NONE" for i in range(7, 20))
    # seed 002's example runs with repeat 0 (cycles until the end): the first trace's steps
    assert cprof.min_steps(3, 1, 3, 0) == 7
    forever = cprof.schedule(wait=3, warmup=1, active=3, repeat=0)
    assert [forever(i).name for i in range(7)][-1] == "RECORD_AND_SAVE"
    assert cprof.min_steps(3, 1, 3, 0, skip_first=2) == 9
    with pytest.raises(ValueError, match="active"):
        cprof.min_steps(3, 1, 0, 1)  # schedule() refuses it too
    np = pytest.importorskip("numpy")
    assert cprof.min_steps(np.int64(3), 1, 3, 1) == 7  # what schedule() takes, min_steps takes


def _run(profiler_cls, sched, nsteps, tmp_path, **kw):
    """Runs nsteps steps; returns the ProfilerStep numbers of each ready trace (read from the
    exported file: torch's events() renames steps to "ProfilerStep*")."""
    traces = []

    def ready(p):
        path = str(tmp_path / f"{profiler_cls.__module__}.{len(traces)}.json")
        p.export_chrome_trace(path)
        names = [e["name"] for e in load_trace(path)["traceEvents"] if e.get("ph") == "X"]
        traces.append(sorted(int(n.split("#")[1]) for n in names
                             if n.startswith("ProfilerStep#")))

    acts = [tprof.ProfilerActivity.CPU] if profiler_cls is tprof.profile else CPU
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profiler_cls(activities=acts, schedule=sched, on_trace_ready=ready, **kw) as p:
            for _ in range(nsteps):
                torch.ones(4).add_(1)
                p.step()
    return traces


@pytest.mark.parametrize("params,nsteps", [
    (dict(wait=1, warmup=1, active=2, repeat=2), 12),
    (dict(wait=0, warmup=0, active=1, repeat=0), 5),
    (dict(wait=2, warmup=1, active=3, repeat=1, skip_first=1), 9),
    (dict(wait=3, warmup=1, active=3, repeat=1), 7),
    (dict(wait=3, warmup=1, active=3, repeat=1), 6),   # one step short: no trace
    (dict(wait=1, warmup=0, active=2, repeat=0), 10),  # stops mid-cycle: partial trace
])
def test_traces_and_step_numbers_match_torch(params, nsteps, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = _run(cprof.profile, cprof.schedule(**params), nsteps, tmp_path)
        theirs = _run(tprof.profile, tprof.schedule(**params), nsteps, tmp_path)
    assert ours == theirs


def test_torch_schedule_and_activities_are_accepted(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = tprof.schedule(wait=0, warmup=1, active=1, repeat=1)
    with cprof.profile(activities=[tprof.ProfilerActivity.CPU], schedule=sched) as p:
        for _ in range(3):
            p.step()
    assert p.traces_ready == 1
    assert steps_of(p.events()) == [1]


def test_no_schedule_records_everything_without_steps(tmp_path):
    with cprof.profile(activities=["CPU"]) as p:
        with cprof.range("work"):
            pass
        p.step()  # allowed, no ProfilerStep ranges without a schedule (as torch)
    names = [e.name for e in p.events()]
    assert "work" in names and not any(n.startswith("ProfilerStep") for n in names)


def test_warmup_is_collected_and_discarded():
    with cprof.profile(activities=CPU, schedule=cprof.schedule(wait=0, warmup=2, active=1,
                                                               repeat=1)) as p:
        for i in range(4):
            with cprof.range(f"work{i}"):
                pass
            p.step()
    names = [e.name for e in p.events()]
    assert "work2" in names and "work0" not in names and "work1" not in names


# ---- handlers and export ----

def test_tensorboard_trace_handler_names(tmp_path):
    d = tmp_path / "tb"
    with cprof.profile(activities=CPU, schedule=cprof.schedule(wait=0, warmup=0, active=1,
                                                               repeat=2),
                       on_trace_ready=cprof.tensorboard_trace_handler(str(d))) as p:
        for _ in range(3):
            p.step()
    files = sorted(os.listdir(d))
    worker = f"{socket.gethostname()}_{os.getpid()}"
    assert len(files) == 2
    for f in files:
        assert re.fullmatch(re.escape(worker) + r"\.\d+\.pt\.trace\.json", f), f
        assert ranges_of(load_trace(d / f))
    d2 = tmp_path / "tbgz"
    with cprof.profile(activities=CPU, on_trace_ready=cprof.tensorboard_trace_handler(
            d2, worker_name="w0", use_gzip=True)):
        pass
    (f,) = os.listdir(d2)
    assert re.fullmatch(r"w0\.\d+\.pt\.trace\.json\.gz", f)
    load_trace(d2 / f)


def test_tensorboard_handler_default_worker_is_torchs_under_torchrun(tmp_path, monkeypatch):
    """{hostname}_{pid}, as torch's and the issue say (each rank is its own process, so the
    names differ); the rank is in the trace's distributedInfo."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with cprof.profile(activities=CPU, schedule=cprof.schedule(wait=0, warmup=0, active=1,
                                                               repeat=1),
                       on_trace_ready=cprof.tensorboard_trace_handler(str(tmp_path))) as p:
        p.step()
    (f,) = os.listdir(tmp_path)
    assert re.fullmatch(rf"{re.escape(socket.gethostname())}_{os.getpid()}\.\d+"
                        r"\.pt\.trace\.json", f)
    assert load_trace(tmp_path / f)["distributedInfo"]["rank"] == 1


def test_tensorboard_handler_bad_directory_fails_early(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(cprof.TraceWriteError, match="cannot be created|not a directory") as e:
        cprof.tensorboard_trace_handler(str(blocker / "sub"))
    # the fix named is the handler's argument, not ProfilerContext's output_dir
    assert "tensorboard_trace_handler a directory" in str(e.value)
    assert "output_dir" not in str(e.value) and e.value.errno is not None


def test_tensorboard_handler_bad_worker_name_fails_early(tmp_path):
    """A worker_name no file can start with is refused when the handler is made, not after
    a window was profiled; an int worker name (a rank) is taken as torch's f-string does."""
    for bad in ("w" * 230, "a/b", "x\ny", ".."):
        with pytest.raises(ValueError, match="worker_name"):
            cprof.tensorboard_trace_handler(str(tmp_path), worker_name=bad)
    handler = cprof.tensorboard_trace_handler(str(tmp_path / "tb"), worker_name=3)
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], on_trace_ready=handler):
        with cprof.range("x"):
            pass
    (name,) = os.listdir(tmp_path / "tb")
    assert name.startswith("3.") and name.endswith(".pt.trace.json")
    name = "w" * 200  # the longest allowed still writes
    handler = cprof.tensorboard_trace_handler(str(tmp_path / "long"), worker_name=name,
                                              use_gzip=True)
    with cprof.profile(activities=[cprof.ProfilerActivity.CPU], on_trace_ready=handler):
        pass
    assert len(os.listdir(tmp_path / "long")) == 1


def test_tensorboard_handler_directory_removed_later_keeps_the_trace(tmp_path):
    d = tmp_path / "tb"
    handler = cprof.tensorboard_trace_handler(str(d))
    d.rmdir()
    (tmp_path / "tb").write_text("now a file")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(cprof.TraceWriteError, match="export_chrome_trace"):
            with cprof.profile(activities=CPU, on_trace_ready=handler,
                               schedule=cprof.schedule(wait=0, warmup=0, active=1, repeat=1)) as p:
                with cprof.range("kept"):
                    pass
                p.step()
    out = p.export_chrome_trace(str(tmp_path / "kept.json"))
    assert "kept" in {e["name"] for e in ranges_of(load_trace(out))}


def test_export_twice_and_gzip_by_suffix(tmp_path):
    with cprof.profile(activities=CPU) as p:
        with cprof.range("x"):
            pass
    a = p.export_chrome_trace(str(tmp_path / "a.json"))
    b = p.export_chrome_trace(str(tmp_path / "b.json.gz"))
    ta, tb = load_trace(a), load_trace(b)
    assert [e["name"] for e in ranges_of(ta)] == [e["name"] for e in ranges_of(tb)] == ["x"]
    with open(b, "rb") as f:
        assert f.read(2) == b"\x1f\x8b"
    # the same path again replaces the file, as torch.profiler does
    assert p.export_chrome_trace(a) == a
    load_trace(a)
    # through a symlink: the target is replaced, the link stays
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "a.json")
    assert p.export_chrome_trace(str(link)) == str(link)
    assert link.is_symlink() and [e["name"] for e in ranges_of(load_trace(a))] == ["x"]


def test_export_before_any_window_or_while_recording(tmp_path):
    p = cprof.profile(activities=CPU)
    with pytest.raises(cprof.WindowStateError, match="no window has finished"):
        p.export_chrome_trace(str(tmp_path / "t.json"))
    with p:
        with pytest.raises(cprof.WindowStateError, match="still recording"):
            p.export_chrome_trace(str(tmp_path / "t.json"))
    assert not os.path.exists(tmp_path / "t.json")


def test_on_trace_ready_that_raises_keeps_the_trace(tmp_path):
    calls = []

    def handler(p):
        calls.append(p.step_num)
        if len(calls) == 1:
            raise RuntimeError("disk on fire")

    p = cprof.profile(activities=CPU, on_trace_ready=handler,
                      schedule=cprof.schedule(wait=0, warmup=0, active=1, repeat=2))
    p.start()
    with cprof.range("first"):
        pass
    with pytest.warns(RuntimeWarning, match="on_trace_ready raised"):
        with pytest.raises(RuntimeError, match="disk on fire") as ei:
            p.step()
    assert any("export_chrome_trace" in n for n in ei.value.__notes__)
    # the failed window's data is still there until the next window finishes
    assert "first" in [e.name for e in p.events()]
    with cprof.range("second"):
        pass
    p.step()
    p.stop()
    assert len(calls) == 2
    out = p.export_chrome_trace(str(tmp_path / "after.json"))
    assert "second" in [e["name"] for e in ranges_of(load_trace(out))]


def test_on_trace_ready_error_without_schedule_keeps_data(tmp_path):
    def handler(p):
        raise OSError(28, "No space left on device")

    with pytest.warns(RuntimeWarning):
        with pytest.raises(OSError):
            with cprof.profile(activities=CPU, on_trace_ready=handler) as p:
                with cprof.range("kept"):
                    pass
    out = p.export_chrome_trace(str(tmp_path / "kept.json"))
    assert [e["name"] for e in ranges_of(load_trace(out))] == ["kept"]


@pytest.mark.parametrize("wait, warmup", [(0, 1), (1, 1), (0, 0)])
def test_on_trace_ready_error_out_of_a_with_block_keeps_the_trace(tmp_path, wait, warmup):
    """The error leaves step() and the with block. With wait=0 the next cycle's window is
    already open when it does; closing that empty window must not replace the kept one."""
    calls = []

    def handler(p):
        calls.append(p.step_num)
        raise OSError(28, "No space left on device (simulated)")

    p = cprof.profile(activities=CPU, on_trace_ready=handler,
                      schedule=cprof.schedule(wait=wait, warmup=warmup, active=2))
    with pytest.warns(RuntimeWarning, match="on_trace_ready raised"):
        with pytest.raises(OSError, match="No space"):
            with p:
                for i in range(10):
                    with cprof.range(f"work{i}"):
                        pass
                    p.step()
    out = p.export_chrome_trace(str(tmp_path / "kept.json"))
    names = [e["name"] for e in ranges_of(load_trace(out))]
    first = wait + warmup  # the two active steps
    assert names == [f"ProfilerStep#{first}", f"work{first}",
                     f"ProfilerStep#{first + 1}", f"work{first + 1}"]
    # the handler saw that window once: closing the empty next one (wait=0) did not hand it
    # the same window again (a handler writing files would have written it twice)
    assert calls == [first + 2]


def test_record_function_spanning_steps_leaves_profiler_steps_whole(tmp_path):
    """A record_function around the training loop (open across prof.step()): each
    ProfilerStep#N still ends at its step() and the user's range ends at its own exit, as
    torch.profiler records them; neither closes the other."""
    from torch.profiler import record_function
    with cprof.profile(activities=CPU,
                       schedule=cprof.schedule(wait=0, warmup=0, active=4)) as p:
        with record_function("train_loop"):
            for i in range(3):
                with record_function(f"inner{i}"):
                    time.sleep(0.002)
                p.step()
        with record_function("after"):
            pass
    ev = {e["name"]: e for e in ranges_of(load_trace(p.export_chrome_trace(
        str(tmp_path / "t.json"))))}
    for i in range(3):
        step, inner = ev[f"ProfilerStep#{i}"], ev[f"inner{i}"]
        # each step holds its own inner range and ends before the next step starts
        assert step["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= step["ts"] + step["dur"]
        nxt = ev[f"ProfilerStep#{i + 1}"]
        assert step["ts"] + step["dur"] <= nxt["ts"] + 1e-3
    loop = ev["train_loop"]
    for i in range(3):
        assert ev[f"ProfilerStep#{i}"]["dur"] < 0.7 * loop["dur"]  # one step, not the loop
    assert loop["ts"] + loop["dur"] <= ev["after"]["ts"]  # ended at its own exit
    assert "cprof truncated" not in loop.get("args", {})
    assert loop["dur"] > 5000  # it spans the three steps


def test_record_function_opened_and_closed_in_different_steps(tmp_path):
    from torch.profiler import record_function
    with cprof.profile(activities=CPU, schedule=cprof.schedule(wait=0, warmup=0, active=5)) as p:
        r = None
        for i in range(4):
            if i == 1:
                r = record_function("spanning")
                r.__enter__()
            if i == 3:
                r.__exit__(None, None, None)
            with record_function(f"inner{i}"):
                time.sleep(0.001)
            p.step()
    ev = {e["name"]: e for e in ranges_of(load_trace(p.export_chrome_trace(
        str(tmp_path / "t.json"))))}
    s3, inner3 = ev["ProfilerStep#3"], ev["inner3"]
    assert s3["ts"] <= inner3["ts"] and s3["dur"] >= inner3["dur"]  # step 3 kept its work
    span = ev["spanning"]
    assert ev["ProfilerStep#1"]["ts"] <= span["ts"] <= ev["ProfilerStep#3"]["ts"] + s3["dur"]


# ---- state errors ----

def test_step_outside_the_profiler_is_an_error():
    """Issue 5 lists step() outside a window as bad input: before start(), after stop(),
    with or without a schedule."""
    p = cprof.profile(activities=CPU, schedule=cprof.schedule(wait=0, warmup=0, active=1))
    with pytest.raises(cprof.WindowStateError, match="step\\(\\) outside"):
        p.step()
    assert p.step_num == 0
    with p:
        p.step()
    with pytest.raises(cprof.WindowStateError):  # repeat=0: the schedule records again
        p.step()
    assert _C.depth() == 0
    # code written for torch.profiler catches RuntimeError: it still does
    with pytest.raises(RuntimeError):
        p.step()
    # and the AssertionError torch.profiler raises for a step before start with a schedule
    with pytest.raises(AssertionError, match="step\\(\\) outside"):
        cprof.profile(activities=CPU, schedule=cprof.schedule(wait=0, warmup=0,
                                                              active=1)).step()
    # without a schedule (always recording) too, before and after the window
    q = cprof.profile(activities=CPU)
    with pytest.raises(cprof.WindowStateError, match="step\\(\\) outside"):
        q.step()
    with q:
        q.step()
    with pytest.raises(cprof.WindowStateError, match="step\\(\\) outside"):
        q.step()
    # a schedule whose cycles have not all run yet (repeat=2, stopped in the first)
    r = cprof.profile(activities=CPU, schedule=cprof.schedule(wait=0, warmup=0, active=1,
                                                              repeat=2))
    with r:
        pass
    with pytest.raises(cprof.WindowStateError, match="step\\(\\) outside"):
        r.step()


def test_step_after_stop_counts_once_the_schedule_has_finished(tmp_path):
    """Megatron-LM's loop (and NeMo's): prof.start() before it, prof.step() at the top of
    every iteration, prof.stop() at --profile-step-end, and the loop runs on. torch.profiler's
    step() keeps counting; cprof's raised StepOutsideWindowError and ended the training run.
    Once a cprof.schedule with repeat > 0 has run its cycles, nothing can record again, and
    a step after stop() counts (decision 169). The window and its one trace are as before."""
    ready = []
    p = cprof.profile(activities=CPU, schedule=cprof.schedule(wait=2, warmup=1, active=3,
                                                              repeat=1),
                      on_trace_ready=ready.append)
    p.start()
    for it in range(10):
        p.step()
        with cprof.range(f"work{it}"):
            pass
        if it + 1 == 6:
            p.stop()
    assert p.step_num == 10 and not _C.active() and _C.depth() == 0
    assert len(ready) == 1
    names = {e.name for e in p.events()}
    assert {"work2", "work3", "work4"} <= names and not names & {"work1", "work5", "work9"}
    # skip_first and skip_first_wait move the end: stopped before it, a step is an error
    q = cprof.profile(activities=CPU, schedule=cprof.schedule(wait=1, warmup=0, active=1,
                                                              repeat=1, skip_first=2))
    with q:
        q.step()
    with pytest.raises(cprof.WindowStateError):
        q.step()  # step 2: the cycle (steps 2-3) is still ahead
    s = cprof.profile(activities=CPU, schedule=cprof.schedule(wait=1, warmup=0, active=1,
                                                              repeat=1, skip_first_wait=1))
    with s:
        pass
    s.step()  # step 1: skip_first_wait made the one cycle step 0 alone
    assert s.step_num == 1


def test_step_after_stop_counts_with_torchs_schedule_too():
    """Megatron-LM's own code passes torch.profiler.schedule(..., repeat=1), and usage.md says
    a torch.profiler.schedule works with cprof.profile: swapping only the profile class, its
    loop still died at the first step() after stop() (decision 169 read only cprof.schedule's
    params). torch's schedule's end is read from its parameters too; a cycling one (repeat=0)
    keeps the error."""
    torch = pytest.importorskip("torch")
    start, end = 3, 5  # Megatron's --profile-step-start / --profile-step-end
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = torch.profiler.schedule(wait=max(start - 1, 0), warmup=1,
                                        active=end - start, repeat=1)
    p = cprof.profile(activities=CPU, schedule=sched)
    p.start()
    for it in range(10):
        if it == end:
            p.stop()
        p.step()
    assert p.step_num == 10 and not _C.active()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cycling = torch.profiler.schedule(wait=0, warmup=1, active=1)
    q = cprof.profile(activities=CPU, schedule=cycling)
    with q:
        q.step()
    with pytest.raises(cprof.WindowStateError, match="step\\(\\) outside"):
        q.step()
    # a torch schedule stopped before its end: the error, as with cprof's
    r = cprof.profile(activities=CPU, schedule=sched)
    with r:
        pass
    with pytest.raises(cprof.WindowStateError, match="step\\(\\) outside"):
        r.step()


def test_a_window_that_fails_to_open_leaves_no_registration(monkeypatch):
    """start() registers the profile with the process lifecycle before its window opens
    (decision 168); a window that then fails to open is unregistered again, so the exit and
    SIGTERM hooks do not keep it and the next profile starts normally."""
    from cprof import _lifecycle

    def boom(self):
        raise RuntimeError("no window")
    monkeypatch.setattr(cprof.profile, "_prepare_trace", boom)
    p = cprof.profile(activities=CPU)  # (its action map holds the methods of now)
    with pytest.raises(RuntimeError, match="no window"):
        p.start()
    assert not any(r[0] is p for r in _lifecycle._running)
    assert not p._started and not _C.active()
    monkeypatch.undo()
    with cprof.profile(activities=CPU) as q:
        with cprof.range("after"):
            pass
    assert "after" in {e.name for e in q.events()}
    assert not any(r[0] is q for r in _lifecycle._running)


def test_every_cprof_error_is_a_runtime_error():
    for name in ("CprofError", "NoOpenRangeError", "WindowStateError", "TraceWriteError",
                 "CuptiBusyError", "GpuUnavailableError", "TraceFormatError"):
        assert issubclass(getattr(cprof, name), RuntimeError), name
    assert issubclass(cprof.TraceWriteError, OSError)
    assert issubclass(cprof.TraceFormatError, ValueError)


def test_start_twice_and_stop_without_start():
    p = cprof.profile(activities=CPU)
    with pytest.raises(cprof.WindowStateError, match="without start"):
        p.stop()
    p.start()
    with pytest.raises(cprof.WindowStateError, match="twice"):
        p.start()
    p.stop()
    assert not _C.active()


def test_a_second_profiler_while_one_records_is_refused():
    with cprof.profile(activities=CPU):
        with pytest.raises(cprof.WindowStateError, match="already open"):
            cprof.profile(activities=CPU).start()


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown profiler activity"):
        cprof.profile(activities=["TPU"])
    with pytest.raises(ValueError, match="empty"):
        cprof.profile(activities=[])
    with pytest.raises(TypeError, match="schedule"):
        cprof.profile(schedule=3)
    with pytest.raises(TypeError, match="on_trace_ready"):
        cprof.profile(on_trace_ready="dir")
    with pytest.raises(ValueError, match="min_duration_us"):
        cprof.profile(min_duration_us=-1)
    for text in ("5", b"5", True):  # "5" was taken, where buffer_size_mb="10" was refused
        with pytest.raises(TypeError, match="min_duration_us must be a number"):
            cprof.profile(min_duration_us=text)
        with pytest.raises(TypeError, match="min_duration_us must be a number"):
            cprof.ProfilerContext(min_duration_us=text)


def test_schedule_returning_garbage_is_a_type_error():
    with pytest.raises(TypeError, match="ProfilerAction"):
        cprof.profile(activities=CPU, schedule=lambda s: "RECORD")
    p = cprof.profile(activities=CPU, schedule=lambda s: cprof.ProfilerAction.RECORD if s == 0
                      else 42)
    with pytest.raises(TypeError, match="ProfilerAction"):
        with p:
            p.step()
    assert not _C.active() and _C.depth() == 0


def test_exception_in_profiled_code_keeps_the_window(tmp_path):
    with pytest.raises(KeyError):
        with cprof.profile(activities=CPU) as p:
            with cprof.range("before"):
                pass
            raise KeyError("boom")
    out = p.export_chrome_trace(str(tmp_path / "t.json"))
    t = load_trace(out)
    assert [e["name"] for e in ranges_of(t)] == ["before"]
    assert t["cprof"]["partial"] is True


# ---- results ----

def test_steps_are_one_row_as_torch_names_them():
    """torch.profiler's events() and key_averages() call every step "ProfilerStep*" (one row of
    N calls); the trace keeps ProfilerStep#N, and cprof's events keep the number in
    step_name."""
    rows = {}
    for mod in (cprof, tprof):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with mod.profile(activities=[mod.ProfilerActivity.CPU],
                             schedule=mod.schedule(wait=0, warmup=1, active=3, repeat=1)) as p:
                for i in range(5):
                    with torch.profiler.record_function("fwd"):
                        pass
                    p.step()
        rows[mod] = {r.key: r.count for r in p.key_averages()
                     if r.key in ("ProfilerStep*", "fwd")}
        assert not any("#" in e.name for e in p.events() if "ProfilerStep" in e.name)
    assert rows[cprof] == rows[tprof] == {"ProfilerStep*": 3, "fwd": 3}
    with cprof.profile(activities=CPU, schedule=cprof.schedule(wait=0, warmup=0, active=2,
                                                               repeat=1)) as p:
        for _ in range(2):
            p.step()
    assert [e.step_name for e in p.events() if e.name == "ProfilerStep*"] == [
        "ProfilerStep#0", "ProfilerStep#1"]


def test_acc_events_keeps_every_window_as_torch_does():
    counts = {}
    for mod in (cprof, tprof):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with mod.profile(activities=[mod.ProfilerActivity.CPU], acc_events=True,
                             schedule=mod.schedule(wait=0, warmup=0, active=1, repeat=3)) as p:
                for i in range(4):
                    with torch.profiler.record_function("w"):
                        pass
                    p.step()
        counts[mod] = ({r.key: r.count for r in p.key_averages()}.get("w"),
                       sum(e.name == "w" for e in p.events()))
    assert counts[cprof] == counts[tprof] == (3, 3)


def test_events_is_an_event_list_as_torch_returns():
    with cprof.profile(activities=CPU) as p:
        for _ in range(3):
            with cprof.range("a"):
                with cprof.range("b"):
                    pass
    ev = p.events()
    lines = ev.table(row_limit=10).splitlines()
    rows = [ln.split()[0] for ln in lines[3:-2]]  # between the header's rules and the last
    assert sorted(rows) == ["a", "a", "a", "b", "b", "b"]  # one row per event, as torch's
    avg = {r.key: r for r in ev.key_averages()}
    assert avg["a"].count == 3 and avg["b"].count == 3
    assert avg["a"].cpu_time_total == pytest.approx(sum(e.duration_us for e in ev
                                                        if e.name == "a"))
    assert ev.total_average().count == 6
    assert ev.self_cpu_time_total == pytest.approx(sum(e.self_cpu_time_total for e in ev))
    with pytest.raises(TypeError, match="averages already"):
        p.key_averages().key_averages()


def test_operator_redispatch_is_one_event_as_torch_shows_it():
    """aten::sum redispatches to its overload, another aten::sum: torch's events() show one
    (EventList._remove_dup_nodes); cprof's too, with the child's children and time."""
    x = torch.ones(10)
    got = {}
    for mod in (cprof, tprof):
        with mod.profile(activities=[mod.ProfilerActivity.CPU]) as p:
            x.sum()
        ev = [e for e in p.events() if e.name.startswith("aten::")]
        got[mod] = sorted((e.name, e.cpu_parent.name if e.cpu_parent else None) for e in ev)
    if not any(n == "aten::sum" for n, _ in got[cprof]):
        pytest.skip("torch's operators are not recorded in this process")
    assert got[cprof] == got[tprof]
    with cprof.profile(activities=CPU) as p:
        x.sum()
    (s,) = [e for e in p.events() if e.name == "aten::sum"]
    kids = sum(c.cpu_time_total for c in s.cpu_children)
    assert s.self_cpu_time_total == pytest.approx(s.cpu_time_total - kids, abs=0.01)


def test_activity_filters_of_torch_213():
    """torch 2.13 takes {ProfilerActivity.CUDA: [types]} items: [] collects nothing of that
    group; a non-empty subset is collected whole by cprof, with a warning saying so."""
    from cprof._profile import normalize_activities
    PA = tprof.ProfilerActivity
    assert normalize_activities([PA.CPU, {PA.CUDA: []}]) == ["CPU"]
    with pytest.warns(RuntimeWarning, match="filter is not applied"):
        assert normalize_activities([PA.CPU, {PA.CUDA: ["KERNEL"]}]) == ["CPU", "GPU"]
    with pytest.raises(ValueError, match="empty"):
        normalize_activities([{PA.CUDA: []}])


def test_torch_213_arguments_are_accepted():
    with cprof.profile(activities=CPU, post_processing_timeout_s=5.0) as p:
        with cprof.range("x"):
            pass
    assert [r.key for r in p.key_averages(group_by_overload_name=True)] == ["x"]
    with pytest.raises(ValueError, match="post_processing_timeout_s"):
        cprof.profile(activities=CPU, post_processing_timeout_s=0)


def test_results_before_any_window_raise_what_torch_raises():
    p = cprof.profile(activities=CPU)
    for call in (p.events, p.key_averages, lambda: p.export_chrome_trace("/dev/null")):
        with pytest.raises(AssertionError, match="no window has finished"):
            call()
        with pytest.raises(cprof.WindowStateError):  # and cprof's own error, a RuntimeError
            call()


def test_stop_during_warmup_discards_it_as_torch_does():
    """stop() (or the with-block's end) in a warmup step: torch starts and stops the trace,
    so the last results are an empty window, never the warmup's data."""
    names = {}
    for mod in (cprof, tprof):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = mod.profile(activities=[mod.ProfilerActivity.CPU],
                            schedule=mod.schedule(wait=1, warmup=1, active=1))
            p.start()
            for i in range(4):
                with torch.profiler.record_function(f"s{i}"):
                    pass
                p.step()
            with torch.profiler.record_function("tail_in_warmup"):
                pass
            p.stop()
        names[mod] = [e.name for e in p.events()]
    assert names[cprof] == names[tprof] == []


def test_torch_tensorboard_handler_works_with_cprof(tmp_path):
    """Only the import changed: torch's own tensorboard_trace_handler calls
    export_chrome_trace(path, use_python_export=...)."""
    with cprof.profile(activities=CPU, schedule=cprof.schedule(wait=0, warmup=0, active=1,
                                                               repeat=1),
                       on_trace_ready=tprof.tensorboard_trace_handler(str(tmp_path),
                                                                      worker_name="w")) as p:
        with cprof.range("x"):
            pass
        p.step()
    (f,) = os.listdir(tmp_path)
    assert f.startswith("w.") and f.endswith(".pt.trace.json")
    assert "x" in {e["name"] for e in ranges_of(load_trace(tmp_path / f))}


def test_key_averages_table():
    with cprof.profile(activities=CPU) as p:
        for _ in range(3):
            with cprof.range("outer"):
                with cprof.range("inner"):
                    sum(range(2000))
    ka = p.key_averages()
    rows = {r.key: r for r in ka}
    assert rows["outer"].count == 3 and rows["inner"].count == 3
    assert rows["outer"].cpu_time_total >= rows["inner"].cpu_time_total
    assert rows["outer"].self_cpu_time_total == pytest.approx(
        rows["outer"].cpu_time_total - rows["inner"].cpu_time_total, abs=1e-3)
    table = ka.table(sort_by="self_cpu_time_total", row_limit=1)
    for col in ("Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg",
                "# of Calls"):
        assert col in table
    body = [ln for ln in table.splitlines() if "outer" in ln or "inner" in ln]
    assert len(body) == 1
    with pytest.raises(ValueError, match="sort_by is one of"):
        ka.table(sort_by="bogus")
    assert "inner" in str(ka)


def _py_rows_step():
    t = 0
    for i in range(50):
        t += _py_rows_leaf(i)
    return t


def _py_rows_leaf(i):
    t = 0
    for k in range(200 + i):  # no calls: nothing recursive, no row counted twice
        t += k
    return t


def _this_test_name():
    return "test_with_stack_python_functions_are_rows_and_the_percentages_add_up"


def test_with_stack_python_functions_are_rows_and_the_percentages_add_up():
    """torch.profiler 2.x keeps python_function events in key_averages() (with_stack): the
    tables' rows for the user's functions, and their self time in "Self CPU time total". Left
    out, the range around them read above 100% and the total too small."""
    with cprof.profile(activities=CPU, with_stack=True, record_ops=False) as p:
        with cprof.range("outer"):
            _py_rows_step()
    ka = p.key_averages()
    rows = {r.key: r for r in ka}
    step = [k for k in rows if k.endswith(": _py_rows_step")]
    leaf = [k for k in rows if k.endswith(": _py_rows_leaf")]
    assert step and leaf and rows[leaf[0]].count == 50, sorted(rows)
    assert re.fullmatch(r".*test_profile\.py\(\d+\): _py_rows_step", step[0])
    total_self = sum(r.self_cpu_time_total for r in ka)
    # every event's self time is counted once: the frames running at start (this test,
    # pytest's) enclose everything, and the outermost one's total is what the selves add to
    me = [e for e in p.events() if e.name.endswith(": " + _this_test_name())]
    assert len(me) == 1 and me[0].cpu_parent is not None
    root = me[0]
    while root.cpu_parent is not None:
        root = root.cpu_parent
    assert total_self == pytest.approx(root.cpu_time_total, rel=0.02, abs=2.0)
    table = ka.table(sort_by="cpu_time_total", row_limit=-1)
    for name in ("outer", step[0], leaf[0]):  # the user's rows: no recursion, at most 100%
        line = next(ln for ln in table.splitlines() if ln.strip().startswith(name))
        assert all(float(x) <= 100.0 + 1e-6 for x in re.findall(r"(-?\d+\.\d+)%", line))
    assert "_py_rows_leaf" in table
    # events().table() and key_averages() agree on the total
    total = re.search(r"Self CPU time total: (.*)", table).group(1)
    assert re.search(r"Self CPU time total: (.*)", p.events().table()).group(1) == total


def test_table_options_as_torch_prints_them():
    """top_level_events_only, header and time_unit were accepted and ignored; torch.profiler
    prints only the rows with no enclosing event, rules above the header, one unit."""
    with cprof.profile(activities=CPU) as p:
        with cprof.range("outer"):
            with cprof.range("inner"):
                sum(range(2000))
    for rows in (p.key_averages(), p.events()):
        top = rows.table(sort_by="cpu_time_total", top_level_events_only=True)
        body = [ln.split()[0] for ln in top.splitlines()[5:] if ln and not ln.startswith(("-", "Self"))]
        assert body == ["outer"], top
        assert "This report only display top-level ops statistics" in top
        both = rows.table(sort_by="cpu_time_total", row_limit=1, top_level_events_only=True)
        assert "outer" in both  # the limit counts the rows shown
    lines = p.key_averages().table(header="MY HEADER").splitlines()
    assert set(lines[0]) == {"="} and lines[1] == "MY HEADER" and set(lines[2]) == {"-", " "}
    secs = p.key_averages().table(time_unit="s")
    assert re.search(r"Self CPU time total: 0\.\d{3}s$", secs.strip())
    assert not re.search(r"\d(us|ms)\b", secs)
    name = p.key_averages().table(max_name_column_width=8)
    assert "outer" in name
    # torch's spellings of the device keys, xpu's included
    for key in ("xpu_time_total", "self_xpu_time_total", "xpu_time", "cuda_time_total"):
        p.key_averages().table(sort_by=key)
    p.key_averages().table(sort_by="self_xpu_memory_usage")  # torch's memory keys too
    with pytest.raises(TypeError, match="sort_by"):
        p.key_averages().table(sort_by=3)


def test_table_keeps_a_name_on_one_line():
    with cprof.profile(activities=CPU) as p:
        with cprof.range("two\nlines\tand tab"):
            pass
    table = p.key_averages().table()
    assert "two\\nlines and tab" in table
    assert not any(ln.startswith("lines") for ln in table.splitlines())


def test_events_and_averages_have_torchs_attributes():
    """Code written for torch.profiler's FunctionEvent / FunctionEventAvg reads these: without
    profile_memory / with_flops memory and FLOPs are 0, the rest has its meaning."""
    torch = pytest.importorskip("torch")
    from torch.autograd import DeviceType
    with cprof.profile(activities=CPU, record_ops=False) as p:
        with cprof.range("blk"):
            sum(range(100))
    ev = [e for e in p.events() if e.name == "blk"][0]
    (avg,) = [r for r in p.key_averages() if r.key == "blk"]
    for obj in (ev, avg):
        for attr in ("cpu_memory_usage", "self_cpu_memory_usage", "device_memory_usage",
                     "self_device_memory_usage", "cuda_memory_usage", "flops"):
            assert getattr(obj, attr) == 0, attr
        assert obj.is_async is False and obj.is_remote is False and obj.is_legacy is False
        assert obj.is_user_annotation is True and obj.overload_name == ""
        assert obj.device_type == DeviceType.CPU and obj.device_type == "CPU"
        assert obj.device_type != DeviceType.CUDA and obj.device_type != "CUDA"
        assert obj.cpu_time_total_str.endswith("us") and obj.self_device_time_total_str == \
            "0.000us"
        assert obj.cpu_parent is None
    assert ev.trace_name == "blk" and ev.sequence_nr == -1 and ev.kernels == []
    assert ev.device_index == 0 and ev.is_python_function is False
    assert avg.cpu_children == ev.cpu_children and avg.cuda_time_total == 0
    assert {r.device_type for r in p.key_averages()} == {"CPU"}
    assert hash(ev.device_type) == hash("CPU")
    # cprof.DeviceType, for code that imported torch.profiler's: the same comparisons
    assert ev.device_type == cprof.DeviceType.CPU and ev.device_type != cprof.DeviceType.CUDA
    assert cprof.DeviceType.CUDA == DeviceType.CUDA  # (torch's enum on the left says False)
    assert cprof.DeviceType.CPU != DeviceType.CUDA
    del torch


def test_events_have_times_threads_and_nesting():
    with cprof.profile(activities=CPU) as p:
        with cprof.range("a"):
            with cprof.range("b"):
                pass
    a, b = p.events()
    assert (a.name, b.name) == ("a", "b")
    assert a.device_type == "CPU" and a.thread == b.thread
    assert a.start_us <= b.start_us <= b.end_us <= a.end_us
    assert b.depth == a.depth + 1
    assert a.time_range.start == a.start_us


def _two_shapes_run(**kw):
    lin = torch.nn.Linear(8, 4)
    # module rows only (with_modules records operators too, decision 99)
    with cprof.profile(activities=CPU, with_modules=True, record_ops=False, **kw) as p:
        for batch in (2, 2, 5):
            lin(torch.randn(batch, 8))
    return p


def test_group_by_input_shape_splits_rows_by_shapes():
    p = _two_shapes_run(record_shapes=True)
    mods = [e for e in p.events() if e.input_shapes]
    assert sorted(e.input_shapes for e in mods) == [[[2, 8]], [[2, 8]], [[5, 8]]]
    assert all(e.input_types == ["float"] for e in mods)
    ka = p.key_averages(group_by_input_shape=True)
    rows = {(r.key, str(r.input_shapes)): r.count for r in ka if r.input_shapes}
    assert sorted(rows.values()) == [1, 2]
    assert {k[1] for k in rows} == {"[[2, 8]]", "[[5, 8]]"}
    table = ka.table(row_limit=-1)
    assert "Input Shapes" in table.splitlines()[1]
    assert "[[5, 8]]" in table and "[[2, 8]]" in table
    # without grouping: one row for the module, no shapes column
    plain = p.key_averages()
    assert "Input Shapes" not in plain.table()
    (mod_row,) = [r for r in plain if r.count == 3 and r.key in {k[0] for k in rows}]
    assert mod_row.input_shapes == ""  # torch blanks shapes of rows not grouped by them


def test_events_have_no_shapes_without_record_shapes():
    p = _two_shapes_run(record_shapes=False)
    assert all(e.input_shapes == [] for e in p.events())
    ka = p.key_averages(group_by_input_shape=True)
    assert all(r.input_shapes == [] for r in ka)


def _inner_fn(x):
    return torch.relu(x)


def _outer_fn(x):
    return _inner_fn(x) + _inner_fn(x * 2)


def test_group_by_stack_n_splits_rows_by_python_frames():
    x = torch.randn(16)
    with cprof.profile(activities=CPU, with_stack=True) as p:
        for _ in range(3):
            _outer_fn(x)
            _inner_fn(x)
    relus = [e for e in p.events() if e.name == "torch.relu"]
    assert len(relus) == 9
    assert all(e.stack and e.stack[0].endswith("_inner_fn") for e in relus)
    one = {tuple(r.stack): r.count for r in p.key_averages(group_by_stack_n=1)
           if r.key == "torch.relu"}
    assert list(one.values()) == [9]
    two = {tuple(r.stack): r.count for r in p.key_averages(group_by_stack_n=2)
           if r.key == "torch.relu"}
    assert sorted(two.values()) == [3, 6]
    # frames already running when the window opened (this test) are ranges too, as in torch:
    # a direct call's second frame is this test, a call through _outer_fn's is _outer_fn
    assert sorted(len(s) for s in two) == [2, 2]
    assert {s[-1].split(": ")[-1] for s in two} == {
        "test_group_by_stack_n_splits_rows_by_python_frames", "_outer_fn"}
    table = p.key_averages(group_by_stack_n=2).table(row_limit=-1)
    assert "Source Location" in table and "_inner_fn" in table
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="group_by_stack_n"):
            p.key_averages(group_by_stack_n=bad)


def test_pybind11_functions_are_named_by_module_not_by_record_type(tmp_path):
    with cprof.profile(activities=CPU, with_stack=True) as p:
        torch._C._get_tracing_state()
    p.export_chrome_trace(str(tmp_path / "t.json"))
    c_calls = [e for e in load_trace(tmp_path / "t.json")["traceEvents"]
               if e.get("name") == "torch._C._get_tracing_state"]
    # torch's operators are captured here: C calls are python_function, as torch writes
    # them, out of operator tables (decision 124)
    assert [e["cat"] for e in c_calls] == ["python_function"]
    names = [e.name for e in p.events()]
    assert "torch._C._get_tracing_state" in names
    assert not [n for n in names if n.startswith("pybind11")]


def test_c_calls_are_operators_only_where_torchs_are_not_captured(tmp_path):
    """ProfilerContext records torch's operators only with record_ops: without them, C calls
    such as torch._C._nn.linear are how torch's ops show, as cpu_op ranges."""
    for record_ops, cat in ((False, "cpu_op"), (True, "python_function")):
        out = tmp_path / str(record_ops)
        with cprof.ProfilerContext(output_dir=str(out), profile_name="c", activities=["CPU"],
                                   verbose=False, with_stack=True, record_ops=record_ops) as c:
            torch._C._get_tracing_state()
        cats = [e["cat"] for e in load_trace(c.trace_path)["traceEvents"]
                if e.get("name") == "torch._C._get_tracing_state"]
        assert cats == [cat], (record_ops, cats)


# ---- annotations in user code ----

def test_record_function_ranges_are_captured():
    with cprof.profile(activities=CPU) as p:
        with torch.profiler.record_function("rf_ctx"):
            with torch.autograd.profiler.record_function("rf_nested"):
                pass

        @torch.profiler.record_function("rf_deco")
        def f():
            return 1

        f()
    ev = {e.name: e for e in p.events()}
    assert {"rf_ctx", "rf_nested", "rf_deco"} <= set(ev)
    assert ev["rf_nested"].depth == ev["rf_ctx"].depth + 1
    assert ev["rf_ctx"].category == "user_annotation"
    # outside a window: nothing recorded, nothing left open
    with torch.profiler.record_function("outside"):
        pass
    assert _C.depth() == 0


def test_record_function_entered_before_the_window_is_not_popped_wrongly():
    rf = torch.profiler.record_function("early")
    rf.__enter__()
    with cprof.profile(activities=CPU) as p:
        with cprof.range("mine"):
            pass
        rf.__exit__(None, None, None)
    assert [e.name for e in p.events()] == ["mine"]
    assert _C.depth() == 0


def test_nvtx_ranges_are_captured(monkeypatch, tmp_path):
    from cprof import _glue
    _glue.patch_torch()
    calls = []

    class FakeNvtx:
        @staticmethod
        def rangePushA(msg):
            calls.append(("push", msg))
            return 0

        @staticmethod
        def rangePop():
            calls.append(("pop",))
            return 0

    nvtx = torch.cuda.nvtx
    orig_push, orig_pop = nvtx._cprof_original
    monkeypatch.setitem(orig_push.__globals__, "_nvtx", FakeNvtx)
    with cprof.profile(activities=CPU) as p:
        with torch.cuda.nvtx.range("nv_{}", 1):
            torch.cuda.nvtx.range_push("nv_inner")
            torch.cuda.nvtx.range_pop()
    ev = {e.name: e for e in p.events()}
    assert {"nv_1", "nv_inner"} <= set(ev)
    assert ev["nv_inner"].depth == ev["nv_1"].depth + 1
    t = p.export_chrome_trace(str(tmp_path / "nv.json"))
    marked = {e["name"] for e in ranges_of(load_trace(t)) if e["args"].get("nvtx") == 1}
    assert marked == {"nv_1", "nv_inner"}
    assert calls == [("push", "nv_1"), ("push", "nv_inner"), ("pop",), ("pop",)]
    assert _C.depth() == 0


def test_nvtx_range_start_end_and_mark_are_captured(monkeypatch, tmp_path):
    """range_start/range_end (may end on another thread, need not nest) and mark: with torch's
    NVTX calls captured from Python, CUPTI's NVTX capture is off, so these must be too."""
    import threading
    from cprof import _glue
    _glue.patch_torch()
    ids = iter(range(100, 200))

    class FakeNvtx:
        rangeStartA = staticmethod(lambda msg: next(ids))
        rangeEnd = staticmethod(lambda rid: None)
        markA = staticmethod(lambda msg: None)

    nvtx = torch.cuda.nvtx
    orig_start = nvtx._cprof_original_start_end_mark[0]
    monkeypatch.setitem(orig_start.__globals__, "_nvtx", FakeNvtx)
    with cprof.profile(activities=CPU) as p:
        a = nvtx.range_start("overlap_a")
        with cprof.range("inner"):
            b = nvtx.range_start("overlap_b")
            nvtx.mark("a point")
        nvtx.range_end(a)  # ends before b: not nested
        time.sleep(0.001)
        nvtx.range_end(b)
        c = nvtx.range_start("ends_elsewhere")
        t = threading.Thread(target=nvtx.range_end, args=(c,))
        t.start()
        t.join()
        nvtx.range_start("never_ended")  # closed by the window's end
        assert _C.depth() == 1
    assert _C.depth() == 0
    assert not _glue._nvtx_started
    ev = {e["name"]: e for e in ranges_of(load_trace(p.export_chrome_trace(
        str(tmp_path / "nv.json"))))}
    for name in ("overlap_a", "overlap_b", "a point", "ends_elsewhere", "never_ended"):
        assert ev[name]["args"]["nvtx"] == 1, name
    assert ev["a point"]["dur"] == 0 and ev["a point"]["args"]["nvtx mark"] == 1
    a_end = ev["overlap_a"]["ts"] + ev["overlap_a"]["dur"]
    b_end = ev["overlap_b"]["ts"] + ev["overlap_b"]["dur"]
    assert ev["overlap_a"]["ts"] < ev["overlap_b"]["ts"] < a_end < b_end
    assert ev["inner"]["ts"] + ev["inner"]["dur"] < a_end
    assert ev["ends_elsewhere"]["dur"] > 0
    assert ev["ends_elsewhere"]["tid"] == ev["overlap_a"]["tid"]  # on the thread that opened it
    # overlap_b began inside "inner" and outlives it: "inner" is charged only the overlap
    rows = {r.key: r for r in p.key_averages()}
    inner_end = ev["inner"]["ts"] + ev["inner"]["dur"]
    expect = ev["inner"]["dur"] - (inner_end - ev["overlap_b"]["ts"]) - ev["a point"]["dur"]
    # (events() times are Unix us as floats: ~0.25 us apart; overlap_b lasts over 1 ms)
    assert rows["inner"].self_cpu_time_total == pytest.approx(expect, abs=0.5)
    assert all(r.self_cpu_time_total >= 0 for r in rows.values())
    # the C summary (ProfilerContext's table) charges the same way, in ns
    c_rows = {r["name"]: r for r in p._last.snapshot.summary()}
    assert c_rows["inner"]["self_ns"] / 1000 == pytest.approx(expect, abs=0.01)
    # outside a window: torch's calls only
    rid = nvtx.range_start("outside")
    nvtx.range_end(rid)
    nvtx.mark("outside")
    assert not _glue._nvtx_started and _C.depth() == 0


def test_nvtx_failure_is_the_users_and_leaves_nothing_open():
    from cprof import _glue
    _glue.patch_torch()
    if torch.cuda.is_available():
        pytest.skip("NVTX works here")
    with cprof.profile(activities=CPU):
        with pytest.raises(RuntimeError, match="NVTX"):
            torch.cuda.nvtx.range_push("x")
        assert _C.depth() == 0


# ---- seed 002's config ----

SEED_002 = dict(wait=3, warmup=1, active=3, repeat=1, record_shapes=True,
                profile_memory=True, with_stack=False)


def test_seed_002_config_maps_directly(tmp_path):
    run_dir = tmp_path / "runs" / "my_profiling_run" / "run_uuid"
    with cprof.profile.from_config(SEED_002, run_dir / "profiler_traces",
                                   activities=CPU) as p:
        for epoch in range(cprof.min_steps(3, 1, 3, 1)):
            with cprof.range(f"epoch{epoch}"):
                pass
            p.step()
    files = os.listdir(run_dir / "profiler_traces")
    assert len(files) == 1 and files[0].endswith(".pt.trace.json")
    t = load_trace(run_dir / "profiler_traces" / files[0])
    names = [e["name"] for e in ranges_of(t)]
    assert names.count("ProfilerStep#4") == 1 and "ProfilerStep#6" in names
    assert "epoch3" not in names and "epoch4" in names
    cfg = t["cprof"]["config"]
    assert cfg["schedule"]["wait"] == 3 and cfg["record_shapes"] is True
    assert cfg["profile_memory"] is True


def test_from_config_accepts_objects_and_rejects_unknown_keys(tmp_path):
    class Cfg:
        wait, warmup, active, repeat = 0, 0, 1, 1
        record_shapes = profile_memory = with_stack = False

    p = cprof.profile.from_config(Cfg(), tmp_path / "t", activities=CPU)
    assert p.record_steps
    # what a config leaves out takes seed 002's values (record_shapes, profile_memory: true)
    q = cprof.profile.from_config({"active": 1}, tmp_path / "t", activities=CPU)
    assert (q.record_shapes, q.profile_memory, q.with_stack, q.with_modules) == (
        True, True, False, False)
    assert q.schedule.params["wait"] == 3 and q.schedule.params["repeat"] == 1
    with pytest.raises(ValueError, match="unknown profiling option"):
        cprof.profile.from_config(dict(SEED_002, wiat=3), tmp_path / "t")
    import types
    r = cprof.profile.from_config(types.MappingProxyType({"active": 2}), tmp_path / "t",
                                  activities=CPU)  # any mapping, read as a dict
    assert r.schedule.params["active"] == 2


def test_from_config_refuses_what_holds_no_settings(tmp_path):
    """A str (the YAML text, unparsed), an int or a list has no wait / active attributes:
    from_config took seed 002's values for all of them, silently."""
    for bad in (5, "wait: 1\nactive: 2", [("wait", 1)], 1.5):
        with pytest.raises(TypeError, match="from_config takes the profiling section as a "
                                            "mapping or an object .* got " + type(bad).__name__):
            cprof.profile.from_config(bad, tmp_path / "t", activities=CPU)
    with pytest.raises(TypeError, match="parse YAML text first"):
        cprof.profile.from_config("wait: 1", tmp_path / "t", activities=CPU)
    assert not os.path.exists(tmp_path / "t")


def test_from_config_none_disables_profiling(tmp_path):
    """Seed 002: `profiling:None` disables profiling; the loop runs unchanged."""
    p = cprof.profile.from_config(None, tmp_path / "t", activities=CPU)
    assert not p.enabled
    with p:
        for _ in range(8):
            p.step()
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())
    with pytest.raises(cprof.WindowStateError, match="profiling: None"):
        p.export_chrome_trace(str(tmp_path / "x.json"))


def test_from_config_flags_from_strings_and_worker_name(tmp_path):
    cfg = dict(SEED_002, wait=0, warmup=0, active=1, repeat=1, with_stack="false",
               record_shapes="yes", profile_memory=0)
    p = cprof.profile.from_config(cfg, tmp_path / "t", activities=CPU, worker_name="rank3")
    assert (p.with_stack, p.record_shapes, p.profile_memory) == (False, True, False)
    with p:
        p.step()
    (f,) = os.listdir(tmp_path / "t")
    assert f.startswith("rank3.") and f.endswith(".pt.trace.json")
    with pytest.raises(ValueError, match="with_stack"):
        cprof.profile.from_config(dict(SEED_002, with_stack="maybe"), tmp_path / "t")


# ---- memory ----

def test_profile_memory_on_cpu_reports_peak_rss(tmp_path):
    with cprof.profile(activities=CPU, profile_memory=True) as p:
        x = bytearray(1 << 20)
        del x
    assert p.memory["summary"]["cpu_peak_rss_bytes"] > 0
    assert p.memory["snapshot"] is None
    out = p.export_chrome_trace(str(tmp_path / "m.json"))
    assert "cpu_peak_rss_bytes" in load_trace(out)["cprof"]["memory"]
    with pytest.raises(cprof.WindowStateError, match="memory snapshot"):
        p.export_memory_snapshot(str(tmp_path / "m.pickle"))


def test_process_peak_rss_is_never_below_the_windows(tmp_path):
    """Seed-002 audit finding 5: the process's peak (getrusage's high-water mark, which the
    kernel updates only now and then) read below the window's sampled peak (/proc/self/statm)
    in 5 of 5 runs: a lifetime peak lower than a peak inside it."""
    torch = pytest.importorskip("torch")
    for _ in range(3):
        keep = []
        with cprof.profile(activities=CPU, profile_memory=True) as p:
            for _ in range(3):
                keep.append(torch.ones(8 << 20))  # 32 MiB more resident each time
                time.sleep(0.01)
        s = p.memory["summary"]
        assert s["cpu_peak_rss_bytes"] >= s["cpu_peak_rss_window_bytes"] > 0, s
        del keep


def _memory_work():
    x = torch.ones(100, 100)  # 40,000 bytes in aten::empty under aten::ones
    y = x * 2  # and in aten::mul
    del y  # released outside any operator: a "[memory]" event of its own
    big = torch.empty(50_000_000, dtype=torch.uint8)
    del big  # a 50 MB spike no sampler sees
    return x


def test_profile_memory_records_each_allocation_as_torch_profiler(tmp_path):
    """Seed 002: profile_memory profiles allocations and deallocations. Each allocation and
    release torch's allocator reports is a "[memory]" event as torch.profiler writes it; every
    event's CPU Mem / Self CPU Mem are torch's (the allocations while it ran, less its
    children's), key_averages sorts by them and the table has torch's columns; the releases
    outside any op are "[memory]" events of their own; the peak is exact."""
    res = {}
    for name, P in (("torch", torch.profiler), ("cprof", cprof)):
        with P.profile(activities=[P.ProfilerActivity.CPU], profile_memory=True) as p:
            _memory_work()
        res[name] = (sorted((e.name, e.cpu_memory_usage, e.self_cpu_memory_usage)
                            for e in p.events() if e.name != "[memory]"),
                     sorted(e.cpu_memory_usage for e in p.events() if e.name == "[memory]"),
                     {r.key: (r.cpu_memory_usage, r.self_cpu_memory_usage)
                      for r in p.key_averages()})
        if name == "cprof":
            cp = p
    assert res["cprof"][0] == res["torch"][0]
    assert res["cprof"][1] == res["torch"][1]
    assert res["cprof"][2] == res["torch"][2]
    assert ("aten::empty", 40000 + 50_000_000) == (
        "aten::empty", res["cprof"][2]["aten::empty"][0])
    table = cp.key_averages().table(sort_by="self_cpu_memory_usage", row_limit=3)
    head = table.splitlines()[1]
    assert head.index("CPU time avg") < head.index("CPU Mem") < head.index("Self CPU Mem") \
        < head.index("# of Calls")
    first = table.splitlines()[3]
    assert first.split()[0] == "aten::empty" and "47.72 MB" in first
    path = cp.export_chrome_trace(str(tmp_path / "m.json"))
    t = load_trace(path)
    mem = [e for e in t["traceEvents"] if e.get("name") == "[memory]"]
    assert all(e["ph"] == "i" and e["cat"] == "cpu_instant_event" and e["s"] == "t"
               for e in mem)
    assert {k for e in mem for k in e["args"]} == {"Total Reserved", "Total Allocated",
                                                   "Bytes", "Device Id", "Device Type",
                                                   "Addr"}
    spike = [e for e in mem if abs(e["args"]["Bytes"]) == 50_000_000]
    assert [e["args"]["Bytes"] for e in spike] == [50_000_000, -50_000_000]
    assert spike[0]["args"]["Addr"] == spike[1]["args"]["Addr"]
    assert spike[0]["args"]["Device Type"] == 0 and spike[0]["args"]["Device Id"] == -1
    summary = t["cprof"]["memory"]
    assert summary["cpu_peak_allocated_bytes_reported"] >= 50_000_000
    assert summary["allocation_events"] == len(mem)
    (win,) = [e for e in t["traceEvents"] if e.get("cat") == "Trace"]
    assert all(win["ts"] <= e["ts"] <= win["ts"] + win["dur"] for e in mem)


def test_no_allocation_events_without_profile_memory_and_torch_profiler_inside_works(tmp_path):
    """Without profile_memory nothing is reported; with it, torch.profiler started inside the
    window takes the allocator's reports while it runs (its state needs the slot cprof's
    reporter holds) and cprof's come back after it."""
    with cprof.profile(activities=CPU) as p:
        torch.ones(1000)
    p.export_chrome_trace(str(tmp_path / "a.json"))
    t = load_trace(tmp_path / "a.json")
    assert not [e for e in t["traceEvents"] if e.get("name") == "[memory]"]
    with cprof.profile(activities=CPU, profile_memory=True) as p:
        torch.ones(1000)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    profile_memory=True) as tp:
            torch.ones(2000)
        torch.ones(3000)
    assert sorted(r.cpu_memory_usage for r in tp.key_averages() if r.key == "aten::ones") \
        == [8000]
    got = sorted(e.cpu_memory_usage for e in p.events() if e.name == "aten::empty")
    assert got == [4000, 12000]
    # and a later torch.profiler on this thread starts: nothing of cprof's is left in its way
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        torch.ones(10)


def _cpu_memory_track(trace):
    return [e for e in trace["traceEvents"] if e.get("ph") == "C" and e["name"] == "CPU memory"]


def test_profile_memory_on_cpu_writes_a_memory_counter_track(tmp_path):
    """profile_memory=True on CPU: a counter track of the resident set and malloc's bytes in
    use, sampled by a C thread, inside the window, showing what the window allocated."""
    block = 64 << 20
    with cprof.profile(activities=CPU, profile_memory=True) as p:
        time.sleep(0.005)
        x = torch.ones(block // 4)  # 64 MiB through malloc (mmapped)
        time.sleep(0.02)
        del x
        time.sleep(0.005)
    assert not _C.mem_sampler_running()
    trace = load_trace(p.export_chrome_trace(str(tmp_path / "m.json")))
    track = _cpu_memory_track(trace)
    assert len(track) >= 5  # ~30 at 1 ms over 30 ms; a loaded CI machine may skip some
    (window,) = [e for e in trace["traceEvents"] if e.get("cat") == "Trace"]
    ts = [e["ts"] for e in track]
    assert ts == sorted(ts)
    assert window["ts"] - 1 <= ts[0] and ts[-1] <= window["ts"] + window["dur"] + 1
    assert {e["pid"] for e in track} == {os.getpid()}
    rss = [e["args"]["resident bytes"] for e in track]
    assert max(rss) - rss[0] >= block * 0.9  # torch.ones touched every page
    summary = p.memory["summary"]
    assert summary["cpu_peak_rss_window_bytes"] == max(rss)
    assert summary["cpu_memory_samples"] == len(track)
    if "malloc in use bytes" not in track[0]["args"]:  # not glibc's malloc (ASan's): no series
        assert "cpu_peak_malloc_bytes" not in summary
        return
    heap = [e["args"]["malloc in use bytes"] for e in track]
    assert max(heap) - heap[0] >= block * 0.9  # the tensor is visible...
    assert heap[-1] - heap[0] < block * 0.5  # ...and its release too
    assert summary["cpu_peak_malloc_bytes"] == max(heap)
    assert trace["cprof"]["memory"]["cpu_peak_malloc_bytes"] == max(heap)


def test_memory_track_only_with_profile_memory_and_one_per_window(tmp_path, monkeypatch):
    # periodic samples 1 s apart: inside these windows only the step-start samples are taken,
    # so each step's own sample is told apart without timing tolerances (a loaded machine can
    # put any amount of time between the sample and the step's range)
    monkeypatch.setenv("CPROF_MEMORY_INTERVAL_US", "1000000")
    with cprof.profile(activities=CPU) as p:
        time.sleep(0.003)
    assert not _cpu_memory_track(load_trace(p.export_chrome_trace(str(tmp_path / "n.json"))))
    out = []
    sched = cprof.schedule(wait=1, warmup=1, active=2, repeat=2)
    with cprof.profile(activities=CPU, profile_memory=True, schedule=sched,
                       on_trace_ready=lambda prof: out.append(
                           load_trace(prof.export_chrome_trace(
                               str(tmp_path / f"w{len(out)}.json"))))) as p:
        for _ in range(8):
            time.sleep(0.003)
            p.step()
    assert len(out) == 2
    for trace in out:
        (window,) = [e for e in trace["traceEvents"] if e.get("cat") == "Trace"]
        steps = [e for e in trace["traceEvents"] if str(e.get("name")).startswith("ProfilerStep")]
        track = _cpu_memory_track(trace)
        assert track, "each active window has its own track"
        # the track starts where the active steps do (its first sample is taken in the
        # transition, just before ProfilerStep opens), not at the 3 ms warmup step discarded
        assert min(e["ts"] for e in steps) - 1500 <= track[0]["ts"]
        assert track[-1]["ts"] <= window["ts"] + window["dur"] + 1
        # a sample at each step's start, whatever the interval: step-to-step growth is exact
        steps.sort(key=lambda e: e["ts"])
        for prev, st in zip([None] + steps, steps):
            lo = prev["ts"] + prev["dur"] if prev else window["ts"] - 1
            assert any(lo <= e["ts"] <= st["ts"] for e in track), st["name"]
    assert not _C.mem_sampler_running()


def test_memory_track_keeps_a_long_window_in_bounded_samples(tmp_path, monkeypatch):
    """A full sample array halves (keeping each pair's larger sample) and samples half as
    often: the whole window stays covered, the peak stays."""
    monkeypatch.setattr(cprof._glue, "MEMORY_SAMPLES_CAP", 16)
    monkeypatch.setenv("CPROF_MEMORY_INTERVAL_US", "100")
    with cprof.profile(activities=CPU, profile_memory=True) as p:
        time.sleep(0.01)
        x = torch.ones((48 << 20) // 4)
        time.sleep(0.02)
        del x
        time.sleep(0.03)
    summary = p.memory["summary"]
    assert summary["cpu_memory_samples"] <= 17
    assert summary["cpu_memory_interval_us"] > 100  # doubled at least once
    track = _cpu_memory_track(load_trace(p.export_chrome_trace(str(tmp_path / "b.json"))))
    assert len(track) == summary["cpu_memory_samples"]
    key = "malloc in use bytes" if "malloc in use bytes" in track[0]["args"] else \
        "resident bytes"  # the series halving keeps by (no malloc'd bytes under ASan)
    vals = [e["args"][key] for e in track]
    assert max(vals) - min(vals) >= (48 << 20) * 0.9  # the peak survived the halvings
    peak_key = "cpu_peak_malloc_bytes" if key.startswith("malloc") else \
        "cpu_peak_rss_window_bytes"
    assert summary[peak_key] == max(vals)


@pytest.mark.parametrize("bad", ["0", "5", "fast", "-1", "1e9"])
def test_bad_memory_interval_is_refused_before_the_window_opens(bad, monkeypatch):
    p = cprof.profile(activities=CPU, profile_memory=True)
    monkeypatch.setenv("CPROF_MEMORY_INTERVAL_US", bad)  # set after the profiler was made
    with pytest.raises(ValueError, match="CPROF_MEMORY_INTERVAL_US"):
        p.start()
    assert not _C.mem_sampler_running()
    assert not _C.active()


@pytest.mark.parametrize("api", ["profile", "from_config", "ProfilerContext"])
def test_bad_memory_interval_is_refused_when_the_profiler_is_made(api, monkeypatch, tmp_path):
    """Docs audit: a bad CPROF_MEMORY_INTERVAL_US was found only when the window opened, so
    under a schedule it came out of step() in the middle of the loop, after the wait steps
    (CPROF_GPU_BUFFER_MB and CPROF_OPS_CAPTURE are checked when the profiler is made). Now it
    is a ValueError there too; without MEM the variable is not read."""
    monkeypatch.setenv("CPROF_MEMORY_INTERVAL_US", "5")
    make = {
        "profile": lambda **kw: cprof.profile(schedule=cprof.schedule(wait=1, warmup=0,
                                                                      active=1), **kw),
        "from_config": lambda **kw: cprof.profile.from_config(
            {"wait": 1, "warmup": 1, "active": 1}, tmp_path, **kw),
        "ProfilerContext": lambda **kw: cprof.ProfilerContext(output_dir=tmp_path,
                                                              verbose=False, **kw),
    }[api]
    mem = ["CPU", "MEM"]
    with pytest.raises(ValueError, match="CPROF_MEMORY_INTERVAL_US='5'"):
        make(activities=mem)
    assert not _C.active()
    if api != "from_config":  # (seed 002's profile_memory default adds MEM there)
        make(activities=["CPU"])  # no MEM: the variable is not read


def test_memory_sampler_is_not_inherited_by_a_forked_child(tmp_path):
    with cprof.profile(activities=CPU, profile_memory=True) as p:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(r)
            os.write(w, b"1" if _C.mem_sampler_running() else b"0")
            os._exit(0)
        os.close(w)
        child_saw = os.read(r, 1)
        os.close(r)
        os.waitpid(pid, 0)
        assert _C.mem_sampler_running()
    assert child_saw == b"0"
    assert _cpu_memory_track(load_trace(p.export_chrome_trace(str(tmp_path / "f.json"))))


def test_memory_snapshot_with_cuda_is_written_and_loads(tmp_path, monkeypatch):
    """CUDA memory history through a stand-in for torch.cuda (the GPU test does it for real)."""
    state = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history",
                        lambda enabled="all", **kw: state.setdefault("calls", []).append(enabled))
    monkeypatch.setattr(torch.cuda.memory, "_snapshot",
                        lambda: {"segments": [], "device_traces": [[{"action": "alloc"}]]})
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 1234)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: 4096)
    monkeypatch.setattr(torch.cuda, "memory_summary", lambda: "|  memory summary |")
    monkeypatch.setattr(cprof._profile, "gpu_unavailable_reason", lambda: "test: CPU only")
    ctx = cprof.ProfilerContext(activities=["CPU", "MEM"], output_dir=tmp_path,
                                profile_name="memtest", with_stack=False, record_shapes=False,
                                verbose=False)
    with ctx:
        pass
    assert state["calls"] == ["all", None]
    (pk,) = ctx.memory_paths
    assert re.fullmatch(r"memtest-rank0-memory-\d+\.pickle", os.path.basename(pk))
    with open(pk, "rb") as f:
        assert pickle.load(f)["device_traces"][0][0]["action"] == "alloc"
    with open(pk[: -len(".pickle")] + ".txt") as f:
        assert "memory summary" in f.read()
    assert ctx.memory_summary["cuda_peak_allocated_bytes"] == 1234
    meta = load_trace(ctx.trace_path)["cprof"]
    assert meta["memory"]["cuda_peak_reserved_bytes"] == 4096


def test_ranks_gate_profiling(monkeypatch, tmp_path):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    p = cprof.profile(activities=CPU, ranks=[0])
    with p:
        p.step()
        assert not _C.active()
    ctx = cprof.ProfilerContext(activities=["CPU"], output_dir=tmp_path, profile_name="r",
                                ranks=0, with_stack=False, record_shapes=False)
    with ctx:
        assert not _C.active()
    assert not os.listdir(tmp_path) if os.path.exists(tmp_path) else True
    with cprof.profile(activities=CPU, ranks=[1]) as p:
        assert _C.active()
    for bad in ("1", [1, "2"], True, 1.0, [-1]):  # "1" used to profile no rank, silently
        with pytest.raises(TypeError, match=r"ranks=\[0, 1\]"):
            cprof.ProfilerContext(activities=["CPU"], output_dir=tmp_path, ranks=bad)


def test_event_times_are_exact_and_from_the_windows_start(tmp_path):
    """events() times are microseconds from the window's start (torch's are from its trace's
    start), exact to the nanosecond the trace has: as Unix-clock microseconds in a float they
    stepped by 0.25 us, so 200 short ranges had a handful of distinct durations and the
    key_averages total missed the trace's sum."""
    with cprof.profile(activities=["CPU"]) as p:
        for i in range(200):
            with cprof.range("r"):
                i * i
    p.export_chrome_trace(str(tmp_path / "t.json"))
    t = load_trace(tmp_path / "t.json")
    trace = sorted(e["dur"] for e in ranges_of(t) if e["name"] == "r")
    evs = sorted((e for e in p.events() if e.name == "r"), key=lambda e: e.duration_us)
    assert len(evs) == len(trace) == 200
    for e, d in zip(evs, trace):
        assert abs(e.duration_us - d) < 0.0015, (e.duration_us, d)
    row = next(r for r in p.key_averages() if r.key == "r")
    assert abs(row.cpu_time_total - sum(trace)) < 0.0015 * 200
    (win,) = [e for e in t["traceEvents"] if e.get("cat") == "Trace"]
    first = min(e["ts"] for e in ranges_of(t) if e["name"] == "r")
    assert 0 <= evs[0].start_us < win["dur"]
    assert abs(min(e.start_us for e in evs) - (first - win["ts"])) < 0.0015


def test_record_function_ended_by_a_future_spans_until_it_completes():
    """record_function._call_end_callbacks_on_future (DDP, RPC): torch ends the range when the
    future completes; cprof's ended at the with block's exit, before the work it covers."""
    torch = pytest.importorskip("torch")
    from torch.autograd.profiler import record_function
    with cprof.profile(activities=CPU) as p:
        with record_function("fut_range") as rf:
            fut = torch.futures.Future()
            done = rf._call_end_callbacks_on_future(fut)
        torch.ones(3)
        fut.set_result(None)
        done.wait()
        with record_function("plain"):
            pass
    ev = {e.name: e for e in p.events()}
    f, o = ev["fut_range"], ev["aten::ones"]
    assert f.time_range.start <= o.time_range.start and o.time_range.end <= f.time_range.end
    assert "plain" in ev and not any(e.truncated for e in p.events())


def test_step_ranges_are_kept_past_the_buffer_cap(tmp_path):
    """Past the range cap the other ranges are dropped (counted), but each ProfilerStep#N
    is kept, so the timeline and per-step reports keep their steps (all but the first were
    dropped with the rest)."""
    paths = []

    def ready(p):
        paths.append(p.export_chrome_trace(str(tmp_path / f"s{len(paths)}.json")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with cprof.profile(activities=CPU, schedule=cprof.schedule(wait=0, warmup=1, active=4),
                           on_trace_ready=ready, buffer_size_mb=1) as p:
            for _ in range(5):
                for _ in range(20000):
                    cprof.push("r")
                    cprof.pop()
                p.step()
    t = load_trace(paths[0])
    steps = [e["name"] for e in ranges_of(t) if e["name"].startswith("ProfilerStep#")]
    assert steps == [f"ProfilerStep#{i}" for i in range(1, 5)]
    kept = len([e for e in ranges_of(t) if e["name"] == "r"])
    assert kept + t["cprof"]["dropped"]["cpu_ranges"] == 4 * 20000
    assert any("were dropped" in str(w.message) for w in caught)
def test_data_loss_warnings_point_at_the_users_line(tmp_path):
    """The range-cap drop warning (and cprof's other data-loss warnings, which go through
    cprof._warn) names the first frame outside cprof: the with line, stop() or step(),
    whatever depth inside cprof raised it. A fixed stacklevel named cprof/_profile.py."""
    def fill():
        for _ in range(60000):
            cprof.push("r")
            cprof.pop()

    def caught(body):
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            body()
        got = [w for w in rec if "ranges were dropped" in str(w.message)]
        assert len(got) == 1, [str(w.message) for w in rec]
        return got[0].filename, got[0].lineno

    def with_block():
        with cprof.profile(activities=CPU, buffer_size_mb=1):
            fill()

    def start_stop():
        p = cprof.profile(activities=CPU, buffer_size_mb=1)
        p.start()
        fill()
        p.stop()

    def stepped():
        with cprof.profile(activities=CPU, buffer_size_mb=1,
                           schedule=cprof.schedule(wait=0, warmup=0, active=1, repeat=1)) as p:
            fill()
            p.step()

    def context():
        with cprof.ProfilerContext(output_dir=tmp_path, profile_name="w", activities=["CPU"],
                                   buffer_size_mb=1, verbose=False):
            fill()

    for body in (with_block, start_stop, stepped, context):
        filename, lineno = caught(body)
        first, last = body.__code__.co_firstlineno, max(
            ln for _, _, ln in body.__code__.co_lines() if ln is not None)
        assert filename == __file__ and first <= lineno <= last, (body.__name__, lineno)



def test_acc_events_ids_are_unique_across_windows():
    """Code keying on e.id (a parent map {e.id: e}) must not merge events of two windows: torch's
    accumulated ids are unique; cprof's count on from the windows before."""
    with cprof.profile(activities=CPU, acc_events=True,
                       schedule=cprof.schedule(wait=0, warmup=0, active=1, repeat=3)) as p:
        for _ in range(4):
            with cprof.range("w"):
                with cprof.range("inner"):
                    pass
            p.step()
    ev = p.events()
    assert sum(e.name == "w" for e in ev) == 3
    assert sorted(e.id for e in ev) == list(range(len(ev)))
    by_id = {e.id: e for e in ev}
    assert all(by_id[e.id] is e for e in ev)
    assert all(by_id[e.cpu_parent.id] is e.cpu_parent for e in ev if e.cpu_parent is not None)


@pytest.mark.filterwarnings("ignore:cprof.schedule")
def test_events_is_built_once_per_window_as_torchs_function_events():
    """events() gives the same list and objects on every call (torch's cached
    function_events): an event from one call is found by identity in the next, and a loop
    calling events() is not quadratic; a later window gives its own."""
    def window(name):
        with cprof.profile(activities=CPU) as p:
            with cprof.range(name):
                with cprof.range("inner"):
                    pass
        return p

    p = window("first")
    a, b = p.events(), p.events()
    assert a is b and a[0] is b[0]
    inner = [e for e in a if e.name == "inner"][0]
    assert any(e is inner.cpu_parent for e in p.events())
    assert p.profiler.function_events is a
    assert [r.key for r in p.key_averages()] == [r.key for r in a.key_averages()]
    with p:  # the same profiler's next window: its own events
        with cprof.range("second"):
            pass
    c = p.events()
    assert c is not a and [e.name for e in c] == ["second"] and p.events() is c
    acc = cprof.profile(activities=CPU, acc_events=True,
                        schedule=cprof.schedule(wait=0, warmup=0, active=1, repeat=2,
                                                skip_first_wait=0))
    with acc:
        for i in range(2):
            with cprof.range(f"w{i}"):
                pass
            acc.step()
            if i == 0:  # the first window is done, the second records
                first = acc.events()
                assert "w0" in [e.name for e in first] and acc.events() is first
    assert [e.name for e in acc.events() if e.name.startswith("w")] == ["w0", "w1"]
    assert acc.events() is acc.events()


def _held_across_suspension(rf):
    """A range held open across an await (20 ms) and one held across a generator's yields
    while its consumer sleeps (2 x 10 ms): the frame that opened each ends long before it."""
    import asyncio

    async def coro():
        with rf("coro_range"):
            await asyncio.sleep(0.02)

    def gen():
        with rf("gen_range"):
            yield from range(2)

    asyncio.run(coro())
    for _ in gen():
        time.sleep(0.01)


def test_self_times_count_each_instant_once_with_ranges_held_across_awaits(tmp_path):
    """Accuracy audit finding 1: under with_stack, a range that outlives the frame it began in
    (held across an await or a yield) took later frames as its children and left its own
    parent charged only for the overlap: the self times summed to 1.9x the window in events()
    (2.9x in ProfilerContext's summary), where torch's sum to it. Now an instant goes to the
    innermost event open then, and the parent is the innermost event containing the range
    (torch's rule): run_forever for the coroutine's range, as torch's."""
    torch = pytest.importorskip("torch")
    got = {}
    for name, mod in (("cprof", cprof), ("torch", torch.profiler)):
        with mod.profile(activities=[mod.ProfilerActivity.CPU], with_stack=True) as p:
            _held_across_suspension(torch.profiler.record_function)
        evs = p.events()
        self_sum = sum(r.self_cpu_time_total for r in p.key_averages())
        window = sum(e.cpu_time_total for e in evs if e.cpu_parent is None)
        assert self_sum == pytest.approx(window, rel=0.01), name
        assert window > 35_000, name  # 40 ms of sleeps
        rng = next(e for e in evs if e.name == "coro_range")
        par = rng.cpu_parent
        assert par.time_range.start <= rng.time_range.start
        assert rng.time_range.end <= par.time_range.end, name  # the parent contains it
        got[name] = par.name.split(": ")[-1]
    assert got["cprof"] == got["torch"] == "run_forever"
    # ProfilerContext's summary (computed in C) counts each instant once too
    with cprof.ProfilerContext(activities=["CPU"], output_dir=tmp_path, verbose=False) as ctx:
        _held_across_suspension(cprof.range)
    span = next(e for e in load_trace(ctx.trace_path)["traceEvents"] if e.get("cat") == "Trace")
    assert sum(r["self_ns"] for r in ctx.summary) <= span["dur"] * 1000 * 1.001
    assert sum(r["self_ns"] for r in ctx.summary) > 0.9 * span["dur"] * 1000


def test_events_kept_from_an_earlier_window_export_their_own_events(tmp_path):
    """Review 5 finding 4: an events() list kept from window 1 of a schedule wrote window 2's
    trace once window 2 had finished (the list pointed at the profiler, not its window). It
    now writes its own events, as torch's EventList does (torch's EventList format: a JSON
    array); while its window is the last one it still writes the window's full trace."""
    kept, paths = [], []

    def ready(p):
        kept.append(p.events())
        paths.append(str(tmp_path / f"now{len(kept)}.json"))
        kept[-1].export_chrome_trace(paths[-1])  # its window is the last one: full trace
    with cprof.profile(activities=CPU, on_trace_ready=ready,
                       schedule=cprof.schedule(wait=0, warmup=0, active=1, repeat=2)) as prof:
        for i in range(2):
            with cprof.range(f"window{i + 1}_range"):
                pass
            prof.step()
    assert "traceEvents" in load_trace(paths[0])
    kept[0].export_chrome_trace(str(tmp_path / "w1.json"))
    with open(tmp_path / "w1.json") as f:
        names = {e.get("name") for e in json.load(f)}
    assert "window1_range" in names and "window2_range" not in names
    with pytest.raises(RuntimeError, match="last window"):
        kept[0].export_stacks(str(tmp_path / "s.txt"))


def test_acc_events_list_exports_every_window(tmp_path):
    """Review 6: with acc_events, events() covers every window but its export_chrome_trace
    wrote the last window only; it now writes its own events, as torch's EventList does."""
    sched = cprof.schedule(wait=0, warmup=0, active=1, repeat=3)
    with cprof.profile(activities=CPU, schedule=sched, acc_events=True,
                       on_trace_ready=lambda p: None) as p:
        for i in range(3):
            with cprof.range(f"cycle{i}"):
                pass
            p.step()
    ev = p.events()
    assert {e.name for e in ev if e.name.startswith("cycle")} == {"cycle0", "cycle1", "cycle2"}
    path = ev.export_chrome_trace(str(tmp_path / "acc.json"))
    with open(path) as f:
        got = {e.get("name") for e in json.load(f)}
    assert {"cycle0", "cycle1", "cycle2"} <= got


def test_min_steps_with_skip_first_wait_is_what_the_schedule_needs():
    """docs/usage.md: min_steps(..., skip_first_wait=1) leaves the first cycle's wait out; the
    count is exactly the steps after which the schedule has saved its last trace."""
    for wait, warmup, active, repeat, skip in [(3, 1, 3, 1, 0), (4, 1, 2, 2, 3), (2, 0, 1, 3, 1)]:
        n = cprof.min_steps(wait, warmup, active, repeat, skip_first=skip, skip_first_wait=1)
        assert n == skip + (wait + warmup + active) * repeat - wait
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sched = cprof.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat,
                                   skip_first=skip, skip_first_wait=1)
        actions = [sched(i).name for i in range(n + 5)]
        assert actions.count("RECORD_AND_SAVE") == repeat
        assert actions[n - 1] == "RECORD_AND_SAVE" and "RECORD" not in actions[n:]


def test_a_loop_shorter_than_the_schedule_says_how_many_steps_the_first_trace_needs(tmp_path):
    """Seed 002 with too few epochs for its schedule: torch.profiler writes no trace and says
    nothing. cprof says so at stop, with the step count the first trace needs (cprof's or
    torch's schedule); a loop that made a trace, or ended by an exception, hears nothing."""
    import warnings
    handler = cprof.tensorboard_trace_handler(str(tmp_path / "tb"))
    with pytest.warns(UserWarning, match=r"stopped after 2 step\(s\) with no trace recorded: "
                      r"the schedule's first trace needs 6 prof.step\(\) calls"):
        with cprof.profile(activities=CPU, on_trace_ready=handler,
                           schedule=cprof.schedule(wait=1, warmup=1, active=3,
                                                   skip_first=1)) as p:
            for _ in range(2):
                p.step()
    assert not (tmp_path / "tb").exists() or not list((tmp_path / "tb").iterdir())
    tp = pytest.importorskip("torch.profiler")
    with pytest.warns(UserWarning, match="first trace needs 5 prof.step"):
        with cprof.profile(activities=CPU, schedule=tp.schedule(wait=2, warmup=1,
                                                                active=2)) as p:
            p.step()
    with pytest.warns(UserWarning, match="never reached RECORD_AND_SAVE"):
        with cprof.profile(activities=CPU, schedule=lambda s: cprof.ProfilerAction.NONE):
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # stopped mid-active: a (partial) trace is ready, nothing to say
        with cprof.profile(activities=CPU, schedule=cprof.schedule(wait=1, warmup=1,
                                                                   active=3)) as p:
            for _ in range(3):
                p.step()
        assert p.traces_ready == 1
        # an exception ended the loop: the user hears about that one
        with pytest.raises(KeyError):
            with cprof.profile(activities=CPU, schedule=cprof.schedule(wait=5, warmup=1,
                                                                       active=1)):
                raise KeyError("x")
