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

