"""Window.start racing another thread's window: the check that no window is open and the C
store's start are separate steps, so another thread (cprof run's --delay timer, a capture hook,
a program thread) can open a window between them. The losing start must leave the winner's
window alone, and under cprof run the program's window still gets the hand-over (decision 178).
The race is made deterministic by a _C whose active() says "none open" to the check."""
import types

import pytest

import cprof
from cprof import _C, _window
from conftest import load_trace, ranges_of


def _blind_check(monkeypatch, blind_calls):
    """_window's _C, whose first blind_calls active() calls say no window is open (the other
    thread opened one just after them)."""
    real = _C.active
    n = [0]

    def active():
        n[0] += 1
        return False if n[0] <= blind_calls else real()

    proxy = types.SimpleNamespace(**{k: getattr(_C, k) for k in dir(_C) if not k.startswith("__")})
    proxy.active = active
    monkeypatch.setattr(_window, "_C", proxy)


def test_a_start_that_loses_the_race_leaves_the_open_window_alone(tmp_path, monkeypatch):
    with cprof.ProfilerContext(output_dir=tmp_path, profile_name="winner", verbose=False,
                               activities=["CPU"], with_stack=False) as ctx:
        with cprof.range("before"):
            pass
        _blind_check(monkeypatch, 2)  # both of start's checks miss the open window
        with pytest.raises(cprof.WindowStateError, match="already open"):
            _window.Window({}, gpu=False).start()
        monkeypatch.undo()
        assert _C.active()  # it closed the winner's store: its exit raised, its data lost
        with cprof.range("after"):
            pass
    assert [e["name"] for e in ranges_of(load_trace(ctx.trace_path))] == ["before", "after"]


def test_under_cprof_run_a_program_window_that_loses_the_race_still_gets_the_hand_over(
        tmp_path, monkeypatch):
    handed = []
    outer = cprof.ProfilerContext(output_dir=tmp_path, profile_name="run", verbose=False,
                                  activities=["CPU"], with_stack=False)
    outer.__enter__()
    try:
        def hand_over():  # as cprof run's _Session.hand_over: its window closes
            handed.append(1)
            outer.__exit__(None, None, None)

        monkeypatch.setattr(_window, "yield_to_program", hand_over)
        _blind_check(monkeypatch, 2)
        w = _window.Window({}, gpu=False)
        w.start()  # raised WindowStateError: the program died, as decision 178 says it must not
        try:
            assert handed == [1]
            with cprof.range("program"):
                pass
        finally:
            snap = w.stop()
        assert snap.ranges == 1
        w.release()
    finally:
        if outer.result is None and _C.active():
            outer.__exit__(None, None, None)
    assert outer.trace_path is not None and load_trace(outer.trace_path)


def test_a_program_window_opened_while_cprof_runs_timer_opens_its_own_waits_for_it(
        tmp_path, monkeypatch):
    """cprof run --delay: the timer thread's open holds the session's lock with the C window
    already open and the session's state still "waiting" (CUPTI's enabling takes ms). A
    program window opened then found nothing to hand over and died with WindowStateError;
    now the hand-over waits for the open, then closes cprof run's window (decision 178)."""
    import threading
    from cprof._cli_run import _Session

    msgs = []
    opts = types.SimpleNamespace(delay=1.0, duration=None, capture=None, capture_range=None)
    out = types.SimpleNamespace(info=msgs.append, error=msgs.append)
    ctx = cprof.ProfilerContext(output_dir=tmp_path, profile_name="run", verbose=False,
                                with_stack=False, activities=["CPU"])
    session = _Session(ctx, opts, out)
    opened, go, reached = threading.Event(), threading.Event(), threading.Event()
    real_enter = ctx.__enter__

    def slow_enter():  # the C window is open; the rest of the open has yet to come
        r = real_enter()
        opened.set()
        go.wait()
        return r

    ctx.__enter__ = slow_enter
    timer = threading.Thread(target=session.open, args=("delay",))
    timer.start()
    result = {}
    prog = None
    try:
        opened.wait()

        def hand_over():
            reached.set()
            session.hand_over()

        monkeypatch.setattr(_window, "yield_to_program", hand_over)

        def program():
            try:
                with cprof.ProfilerContext(output_dir=tmp_path, profile_name="program",
                                           verbose=False, with_stack=False,
                                           activities=["CPU"]) as p:
                    with cprof.range("in_program"):
                        pass
                result["path"] = p.trace_path
            except BaseException as err:  # noqa: BLE001 -- the test reports it
                result["err"] = err

        prog = threading.Thread(target=program)
        prog.start()
        reached.wait()
        go.set()
        timer.join()
        prog.join()
    finally:
        go.set()
        timer.join()
        if prog is not None:
            prog.join()
        if ctx.result is None and _C.active():
            ctx.__exit__(None, None, None)
    assert "err" not in result, result.get("err")
    assert session.state == "closed" and session.closed_by == "the program opened its own cprof window"
    assert [e["name"] for e in ranges_of(load_trace(result["path"]))] == ["in_program"]
